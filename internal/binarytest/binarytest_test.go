package binarytest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBuildArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want []string
	}{
		{"production", nil, nil},
		{"test clock", []Option{Tags("testclock")}, []string{"-tags", "testclock"}},
		{"two tags", []Option{Tags("a"), Tags("b")}, []string{"-tags", "a,b"}},
		{"stamped", []Option{LDFlags("-X p.v=1")}, []string{"-ldflags", "-X p.v=1"}},
		{"as the tests", []Option{MatchRace(), Tags("testclock")}, func() []string {
			if Race {
				return []string{"-tags", "testclock", "-race"}
			}
			return []string{"-tags", "testclock"}
		}()},
	} {
		var c config
		for _, o := range tc.opts {
			o(&c)
		}
		if got := c.args(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: go build %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestModuleRoot(t *testing.T) {
	root := ModuleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(b), "\n"); first != "module "+ServiceModule {
		t.Fatalf("%s/go.mod starts %q", root, first)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "envoy-rls")); err != nil {
		t.Fatal(err)
	}
}

// fatalT records a Fatal's message and ends the helper with a panic.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatal(args ...any) { f.msg = fmt.Sprint(args...); panic(f) }

func TestBuildWithoutMain(t *testing.T) {
	process.mu.Lock()
	process.main = false
	process.mu.Unlock()
	ft := &fatalT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != ft {
				t.Fatalf("recovered %v, want the test's Fatal", r)
			}
		}()
		Build(ft)
	}()
	if !strings.Contains(ft.msg, "binarytest.Main") {
		t.Fatalf("failure %q does not say to call Main", ft.msg)
	}
}
