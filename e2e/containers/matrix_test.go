package containers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// differentialTests are the tests of pkg/limiter/redis that run the rate
// program against the Go rules (algorithm.Apply) on the Redis of REDIS_ADDR:
// every algorithm's steps, random states and random batches of every role.
// They reach into the store's unexported program runner and key layout, so
// the matrix runs them where they live, once per image, rather than a copy.
var differentialTests = []string{"TestProgramsAgainstApply", "TestRandomDifferential", "TestBatchProgramAgainstApply"}

// differentialTimeout bounds one run of the differential tests, their build
// included.
const differentialTimeout = 10 * time.Minute

// TestVersionMatrix runs the rate programs' differential tests on a server
// of every image of the lane.
func TestVersionMatrix(t *testing.T) {
	for _, image := range Images(t) {
		t.Run(image, func(t *testing.T) {
			s := redistest.Standalone(t, redistest.WithRunner(Runner(image)))
			runDifferential(t, s.Addr())
		})
	}
}

// testEvent is one line of `go test -json`.
type testEvent struct {
	Action string
	Test   string
	Output string
}

// runDifferential runs differentialTests with REDIS_ADDR=addr (and -race
// when these tests run with it) and fails t for each that fails or does not
// run, with its output.
func runDifferential(t *testing.T, addr string) {
	t.Helper()
	args := []string{"test", "-count=1", "-json", "-run", "^(" + strings.Join(differentialTests, "|") + ")$"}
	if binarytest.Race {
		args = append(args, "-race")
	}
	args = append(args, "./pkg/limiter/redis")
	ctx, cancel := context.WithTimeout(context.Background(), differentialTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = binarytest.ModuleRoot(t)
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()

	result := map[string]string{}
	output := map[string]*strings.Builder{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e testEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" {
			continue
		}
		top, _, _ := strings.Cut(e.Test, "/")
		if output[top] == nil {
			output[top] = &strings.Builder{}
		}
		output[top].WriteString(e.Output)
		if e.Test == top && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
			result[top] = e.Action
		}
	}
	for _, name := range differentialTests {
		switch result[name] {
		case "pass":
			t.Logf("%s passed on %s", name, addr)
		case "":
			t.Errorf("%s did not run (go %s: %v)\n%s", name, strings.Join(args, " "), runErr, stderr.String())
		default:
			t.Errorf("%s: %s on %s\n%s", name, result[name], addr, output[name])
		}
	}
}
