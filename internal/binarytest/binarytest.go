// Package binarytest builds the envoy-rls binary for the tests that run it:
// cmd/envoy-rls's, and, in the e2e module, the e2e suite and the deployment
// tests. Each build configuration (tags, -race, -ldflags) is built once per
// test process, always in the service module's directory, so that the
// binary links the service module's dependency versions whichever module
// the test belongs to. A package whose tests call Build runs them through
// Main, which removes the binaries when they end.
package binarytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ServiceModule is the module path of the service, whose cmd/envoy-rls is
// the binary.
const ServiceModule = "github.com/envoy-rls/envoy-rls"

// BuildTimeout bounds one `go build` of the binary.
const BuildTimeout = 5 * time.Minute

// Race reports whether this test binary runs with the race detector.
const Race = raceEnabled

// Option changes how the binary is built.
type Option func(*config)

type config struct {
	tags    []string
	race    bool
	ldflags string
}

// Tags builds with these build tags (`-tags testclock`).
func Tags(tags ...string) Option {
	return func(c *config) { c.tags = append(c.tags, tags...) }
}

// MatchRace builds with -race when the tests run with it (Race): a data
// race in the binary then surfaces in the test that started it.
func MatchRace() Option { return func(c *config) { c.race = Race } }

// LDFlags builds with these -ldflags (`-X pkg.var=value` stamps).
func LDFlags(flags string) Option { return func(c *config) { c.ldflags = flags } }

// args are the go build arguments of c, without -o and the package.
func (c config) args() []string {
	var a []string
	if len(c.tags) > 0 {
		a = append(a, "-tags", strings.Join(c.tags, ","))
	}
	if c.race {
		a = append(a, "-race")
	}
	if c.ldflags != "" {
		a = append(a, "-ldflags", c.ldflags)
	}
	return a
}

// build is one configuration's binary, built once.
type build struct {
	once sync.Once
	path string
	err  error
}

// process is what the test process built: Main sets dir and removes it.
var process struct {
	mu     sync.Mutex
	dir    string
	main   bool
	builds map[string]*build
}

// Main runs the package's tests and then removes the binaries they built;
// call it from TestMain: func TestMain(m *testing.M) { binarytest.Main(m) }.
func Main(m *testing.M) {
	process.mu.Lock()
	process.main = true
	process.mu.Unlock()
	code := m.Run()
	process.mu.Lock()
	if process.dir != "" {
		_ = os.RemoveAll(process.dir)
	}
	process.mu.Unlock()
	os.Exit(code)
}

// Build returns the path of cmd/envoy-rls built with opts, building it on
// the first call for these options. A failed build fails t with go build's
// output; without Main in TestMain, Build fails t.
func Build(t testing.TB, opts ...Option) string {
	t.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	args := c.args()
	key := strings.Join(args, "\x00")
	process.mu.Lock()
	if !process.main {
		process.mu.Unlock()
		t.Fatal("binarytest: call binarytest.Main(m) from this package's TestMain, which removes the binaries")
	}
	if process.dir == "" {
		dir, err := os.MkdirTemp("", "envoy-rls-binarytest-")
		if err != nil {
			process.mu.Unlock()
			t.Fatalf("binarytest: %v", err)
		}
		process.dir = dir
	}
	if process.builds == nil {
		process.builds = map[string]*build{}
	}
	b := process.builds[key]
	if b == nil {
		b = &build{path: filepath.Join(process.dir, strconv.Itoa(len(process.builds)), "envoy-rls")}
		process.builds[key] = b
	}
	process.mu.Unlock()

	root := ModuleRoot(t)
	b.once.Do(func() { b.err = goBuild(root, b.path, args) })
	if b.err != nil {
		t.Fatalf("binarytest: %v", b.err)
	}
	return b.path
}

// goBuild runs go build args -o out ./cmd/envoy-rls in the module root.
func goBuild(root, out string, args []string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	full := append(append([]string{"build"}, args...), "-o", out, "./cmd/envoy-rls")
	cmd := exec.CommandContext(ctx, goTool(), full...)
	cmd.Dir = root
	output, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("go %s did not finish within %v", strings.Join(full, " "), BuildTimeout)
	}
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(full, " "), err, output)
	}
	return nil
}

// moduleRoot is the service module's directory, asked of the go command
// once per process.
var moduleRoot = sync.OnceValues(func() (string, error) {
	out, err := exec.Command(goTool(), "list", "-m", "-f", "{{.Dir}}", ServiceModule).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go list -m %s: %w\n%s", ServiceModule, err, ee.Stderr)
		}
		return "", fmt.Errorf("go list -m %s: %w", ServiceModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s: no directory (is the test inside a module that requires it?)", ServiceModule)
	}
	return dir, nil
})

// ModuleRoot returns the service module's directory, the repository root,
// from a test of any module of the repository (the e2e and tools modules
// replace the service module with it).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := moduleRoot()
	if err != nil {
		t.Fatalf("binarytest: %v", err)
	}
	return dir
}

// goTool is the go command of the toolchain running the tests.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}
