package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/options"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := writeRules(t, dir, testRules)
	var out, errOut bytes.Buffer
	if err := Run(context.Background(), []string{"validate", good}, noEnv, &out, &errOut); err != nil {
		t.Fatalf("validate good: %v\n%s%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "domain app") {
		t.Fatalf("validate output lacks the domain:\n%s", out.String())
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(badUnitRules), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	err := Run(context.Background(), []string{"validate", "--config", bad}, noEnv, &out, &errOut)
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("validate bad: err %v, want ErrFailed (exit 1)", err)
	}
	if !strings.HasPrefix(out.String(), bad+":4:") || !strings.Contains(out.String(), "fortnight") {
		t.Fatalf("validate bad printed:\n%s", out.String())
	}

	// From the environment, and a missing path.
	out.Reset()
	if err := Run(context.Background(), []string{"validate"}, func(k string) string {
		if k == "ENVOY_RLS_CONFIG" {
			return good
		}
		return ""
	}, &out, &errOut); err != nil {
		t.Fatalf("validate via ENVOY_RLS_CONFIG: %v", err)
	}
	if err := Run(context.Background(), []string{"validate"}, noEnv, &out, &errOut); err == nil || errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "exactly one rule path") {
		t.Fatalf("validate without a path: %v, want an error for main to print", err)
	}
	if err := Run(context.Background(), []string{"validate", filepath.Join(dir, "missing.yaml")}, noEnv, &out, &errOut); !errors.Is(err, ErrFailed) {
		t.Fatalf("validate of a missing file: %v", err)
	}
}

// Every start-up failure is an error for main to print (not ErrFailed, which
// main keeps quiet about), one line per problem, naming the flag or
// variable as the user set it, the value and what is accepted: the
// command line, the options' checks (every problem at once), and what
// only a start finds.
func TestServeFlagErrors(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	listen := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	shared := filepath.Join(t.TempDir(), "hmac-secret")
	if err := os.WriteFile(shared, []byte("a-secret-of-more-than-16-bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no command", nil, nil, `a command is required: serve, validate, explain, digest, version or help ("envoy-rls help" explains them)`},
		{"unknown command", []string{"launch"}, nil, `unknown command "launch": must be serve, validate, explain, digest, version or help ("envoy-rls help" explains them)`},
		{"several problems", []string{"serve", "--config", rules, "--store", "etcd"}, map[string]string{"ENVOY_RLS_LOG_LEVEL": "loud", "ENVOY_RLS_MEMORY_MAX_ENTRIES": "x"},
			`ENVOY_RLS_MEMORY_MAX_ENTRIES="x": must be 0 (automatic) or a positive integer` + "\n" + `--store="etcd": must be memory or redis` + "\n" + `ENVOY_RLS_LOG_LEVEL="loud": must be debug, info, warn or error`},
		{"unreadable secret file", append([]string{"serve", "--config", rules}, listen...), map[string]string{"ENVOY_RLS_HMAC_SECRET_FILE": "/nonexistent/secret"}, `ENVOY_RLS_HMAC_SECRET_FILE="/nonexistent/secret": must be a readable file holding the secret: open /nonexistent/secret: no such file or directory`},
		{"secret file others can read", append([]string{"serve", "--config", rules, "--hmac-secret-file", shared}, listen...), nil,
			`--hmac-secret-file="` + shared + `": must be a readable file holding the secret: mode 0644 lets group or others use it: chmod 600 ` + shared},
		{"listen failure", []string{"serve", "--config", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:99999"}, nil, `--admin-addr="127.0.0.1:99999": must be an address this process can listen on: listen tcp: address 99999: invalid port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errOut bytes.Buffer
			err := Run(context.Background(), tc.args, func(k string) string { return tc.env[k] }, io.Discard, &errOut)
			if err == nil || errors.Is(err, ErrFailed) || err.Error() != tc.want {
				t.Fatalf("err\n%v\nwant\n%s\nstderr %q", err, tc.want, errOut.String())
			}
		})
	}
}

// Rules that fail to load stop serve with every problem on a line of its
// own.
func TestServeRulesErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: app\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), []string{"serve", "--config", bad, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, noEnv, io.Discard, io.Discard)
	if err == nil || errors.Is(err, ErrFailed) {
		t.Fatalf("serve with bad rules: %v", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], bad+":4:") || !strings.HasPrefix(lines[1], bad+":6:") ||
		lines[2] != fmt.Sprintf("--config=%q: 2 problem(s) in the rules; nothing served", bad) {
		t.Fatalf("serve with bad rules:\n%v", err)
	}
}

// serve --help prints the help of every serve flag, the rule source's
// included, on standard output.
func TestServeHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		var out, errOut bytes.Buffer
		if err := Run(context.Background(), []string{"serve", arg}, noEnv, &out, &errOut); err != nil {
			t.Fatalf("serve %s: %v", arg, err)
		}
		if errOut.Len() != 0 {
			t.Fatalf("serve %s wrote to stderr: %q", arg, errOut.String())
		}
		for _, want := range []string{"Usage: envoy-rls serve", "  --config PATH\n", "  --xds-server VALUE\n", "(ENVOY_RLS_CONFIG_SOURCE, default \"file\")", "  --env-compat\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("serve %s: help lacks %q", arg, want)
			}
		}
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"validate", "--help"}, noEnv, &out, io.Discard); err != nil || !strings.Contains(out.String(), "  --config PATH\n") {
		t.Fatalf("validate --help: %v\n%s", err, out.String())
	}
}

// The top-level help lists the commands and where flag values come from.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"help", "-h", "--help"} {
		var out bytes.Buffer
		if err := Run(context.Background(), []string{arg}, noEnv, &out, io.Discard); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"envoy-rls serve --config PATH", "envoy-rls validate", "envoy-rls version", "ENVOY_RLS_GRPC_ADDR", "envoy-rls serve --help"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
}

// Started as ratelimit, the binary serves with the reference's
// environment.
func TestArgsAs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/bin/ratelimit", nil, []string{"serve", "--env-compat"}},
		{"ratelimit", []string{"--log-level", "debug"}, []string{"serve", "--env-compat", "--log-level", "debug"}},
		{"/usr/local/bin/envoy-rls", []string{"version"}, []string{"version"}},
		{"/bin/ratelimit", []string{"version"}, []string{"version"}},
		{"/bin/ratelimit", []string{"--version", "--output", "json"}, []string{"version", "--output", "json"}},
	} {
		if got := argsAs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("argsAs(%q, %q) = %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}

// TestRatelimitHelp: started as ratelimit, help names every reference
// variable the translation reads, and points at the flags.
func TestRatelimitHelp(t *testing.T) {
	for _, arg := range []string{"help", "-h", "--help"} {
		var out bytes.Buffer
		if err := RunAs(context.Background(), "/bin/ratelimit", []string{arg}, noEnv, &out, io.Discard); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"Usage: ratelimit", "ratelimit version", "envoy-rls serve --help", "docs/migration.md",
			"USE_PROMETHEUS PROMETHEUS_ADDR PROMETHEUS_PATH PROMETHEUS_MAPPER_YAML", "REDIS_URL", "LOG_LEVEL", "RUNTIME_ROOT"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: lacks %q:\n%s", arg, want, out.String())
			}
		}
		for i, line := range strings.Split(out.String(), "\n") {
			if len(line) > options.HelpWidth {
				t.Errorf("%s: line %d is %d wide: %q", arg, i+1, len(line), line)
			}
		}
	}
}

// twoRules holds two descriptors.
const twoRules = testRules + `  - key: ip
    rate_limit: {unit: second, requests_per_unit: 9}
`

// A rule set over --config-max-descriptors (or its variable) stops serve
// with one line naming the limit, the measured total and the flag; a bad
// bound is refused like any flag value.
func TestServeRuleSetLimits(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, dir, twoRules)
	// Should serve start anyway, the context ends it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listen := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	err := Run(ctx, append([]string{"serve", "--config", dir, "--config-max-descriptors", "1"}, listen...), noEnv, io.Discard, io.Discard)
	want := fmt.Sprintf(`--config=%q: the 1 rule file(s) hold 2 descriptors, more than the limit of 1: raise --config-max-descriptors (or ENVOY_RLS_CONFIG_MAX_DESCRIPTORS) to load them; nothing served`, dir)
	if err == nil || errors.Is(err, ErrFailed) || err.Error() != want {
		t.Fatalf("serve over the descriptor limit:\n%v\nwant:\n%s", err, want)
	}
	env := func(k string) string {
		if k == "ENVOY_RLS_CONFIG_MAX_BYTES" {
			return "10"
		}
		return ""
	}
	err = Run(ctx, append([]string{"serve", "--config", dir}, listen...), env, io.Discard, io.Discard)
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "bytes, more than the limit of 10: raise --config-max-bytes (or ENVOY_RLS_CONFIG_MAX_BYTES)") {
		t.Fatalf("serve over the byte limit from the environment: %v", err)
	}
	err = Run(ctx, append([]string{"serve", "--config", dir, "--config-max-bytes", "0"}, listen...), noEnv, io.Discard, io.Discard)
	if err == nil || err.Error() != `--config-max-bytes="0": must be a positive number of bytes` {
		t.Fatalf("--config-max-bytes 0: %v", err)
	}
}

// validate applies the same bounds, refuses a named pipe at once, and
// returns when its context ends.
func TestValidateLimitsAndPipes(t *testing.T) {
	dir := t.TempDir()
	good := writeRules(t, dir, twoRules)
	var out bytes.Buffer
	err := Run(context.Background(), []string{"validate", "--config-max-descriptors", "1", good}, noEnv, &out, io.Discard)
	if !errors.Is(err, ErrFailed) || !strings.Contains(out.String(), good+": the 1 rule file(s) hold 2 descriptors, more than the limit of 1: raise --config-max-descriptors") {
		t.Fatalf("validate over the limit: %v\n%s", err, out.String())
	}
	fifo := filepath.Join(t.TempDir(), "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = Run(context.Background(), []string{"validate", fifo}, noEnv, &out, io.Discard)
	if !errors.Is(err, ErrFailed) || !strings.Contains(out.String(), fifo+": not a regular file (a named pipe)") {
		t.Fatalf("validate of a FIFO: %v\n%s", err, out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = validateCommand(ctx, []string{good}, noEnv, io.Discard, io.Discard)
	if err != nil && (errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "stopped before the rules were read")) {
		t.Fatalf("validate with an ended context: %v", err)
	}
}

// TestValidateNamesRLQSRefusals: validate says, under each rule RLQS
// cannot assign a quota, why and that its failure_mode answers; a plain
// limit gets no such line.
func TestValidateNamesRLQSRefusals(t *testing.T) {
	path := writeRules(t, t.TempDir(), `domain: app
descriptors:
  - key: jobs
    rate_limit: {concurrency: 5, lease_ttl: 1m}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	var out, errOut bytes.Buffer
	if err := Run(context.Background(), []string{"validate", path}, noEnv, &out, &errOut); err != nil {
		t.Fatalf("validate: %v\n%s", err, errOut.String())
	}
	jobs, user, found := strings.Cut(out.String(), "  app/user\n")
	if !found || !strings.Contains(jobs, "RLQS: no quota, its failure_mode answers (a concurrency limit") || strings.Contains(user, "RLQS") {
		t.Fatalf("validate printed:\n%s", out.String())
	}
}
