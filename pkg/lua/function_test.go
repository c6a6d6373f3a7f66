package lua

import (
	"regexp"
	"strings"
	"testing"
)

// TestBatchFunctionNames: the library and its function carry the same
// digest of the library, which the library's own text gives.
func TestBatchFunctionNames(t *testing.T) {
	f := BatchFunction()
	lib := regexp.MustCompile(`^envoy_rls_rate_v2_([0-9a-f]{12})$`).FindStringSubmatch(f.Library)
	fn := regexp.MustCompile(`^envoy_rls_rate_batch_v2_([0-9a-f]{12})$`).FindStringSubmatch(f.Function)
	if lib == nil || fn == nil || lib[1] != fn[1] {
		t.Fatalf("library %q, function %q: want envoy_rls_rate_v2_<12 hex> and envoy_rls_rate_batch_v2_<the same>", f.Library, f.Function)
	}
	if !strings.HasPrefix(f.Source, "#!lua name="+f.Library+"\n") {
		t.Fatalf("the library does not start with its name line")
	}
}
