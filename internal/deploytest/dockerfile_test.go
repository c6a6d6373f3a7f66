package deploytest

import (
	"slices"
	"testing"
)

func TestFinalStage(t *testing.T) {
	got := finalStage("# syntax=docker/dockerfile:1\n" +
		"FROM golang AS build\n" +
		"RUN go build \\\n" +
		"    ./cmd/x\n" +
		"\n" +
		"from scratch\n" +
		"# a comment\n" +
		"COPY --from=build /out/x   /x\n" +
		"CMD [\"serve\",  \"--config\", \"/etc/x\"]\n")
	want := []string{"from scratch", "COPY --from=build /out/x /x", `CMD ["serve", "--config", "/etc/x"]`}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
