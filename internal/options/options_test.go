package options

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serveCase is one Serve call and the error it must return.
type serveCase struct {
	name string
	args []string
	env  map[string]string
	want string // "" = accepted
}

// checkServe runs each case as a subtest: Serve refuses everything serve
// would refuse at start that needs no file and no network, naming the flag
// or variable as the user set it, the value and what is accepted.
func checkServe(t *testing.T, cases []serveCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Serve(tc.args, func(k string) string { return tc.env[k] }, nil)
			if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
				t.Fatalf("Serve(%q) = %v, want %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestServeErrors(t *testing.T) {
	const rules = "rules.yaml"
	listen := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	checkServe(t, []serveCase{
		{"no config", nil, nil, "--config (or ENVOY_RLS_CONFIG) is not set: must be the rule file or directory to serve"},
		{"argument", []string{"--config", rules, "extra"}, nil, `serve takes no arguments (got ["extra"]): the rules are --config PATH`},
		{"unknown flag", []string{"--config", rules, "--colour"}, nil, `unknown flag --colour ("envoy-rls serve --help" lists the flags)`},
		{"no value", []string{"--config"}, nil, `--config needs a value ("envoy-rls serve --help" says which)`},
		{"bad store", []string{"--config", rules, "--store", "etcd"}, nil, `--store="etcd": must be memory or redis`},
		{"bad headers", []string{"--config", rules, "--default-headers", "some"}, nil, `--default-headers="some": must be full, retry_after or none`},
		{"bad env duration", []string{"--config", rules}, map[string]string{"ENVOY_RLS_DRAIN_TIMEOUT": "soon"}, `ENVOY_RLS_DRAIN_TIMEOUT="soon": must be a positive duration such as 15s`},
		{"env duration zero", []string{"--config", rules}, map[string]string{"ENVOY_RLS_DRAIN_TIMEOUT": "0s"}, `ENVOY_RLS_DRAIN_TIMEOUT="0s": must be a positive duration such as 15s`},
		{"bad level", []string{"--config", rules, "--log-level", "loud"}, nil, `--log-level="loud": must be debug, info, warn or error`},
		{"readiness", []string{"--config", rules, "--readiness", "redis"}, nil, `--readiness="redis": must be rules or store`},
		{"readiness env", []string{"--config", rules}, map[string]string{"ENVOY_RLS_READINESS": "always"}, `ENVOY_RLS_READINESS="always": must be rules or store`},
		{"default failure mode", []string{"--config", rules, "--default-failure-mode", "fallback"}, nil, `--default-failure-mode="fallback": must be closed, open or local`},
		{"several problems", []string{"--config", rules, "--store", "etcd"}, map[string]string{"ENVOY_RLS_LOG_LEVEL": "loud", "ENVOY_RLS_DRAIN_TIMEOUT": "x"},
			`ENVOY_RLS_DRAIN_TIMEOUT="x": must be a positive duration such as 15s` + "\n" + `--store="etcd": must be memory or redis` + "\n" + `ENVOY_RLS_LOG_LEVEL="loud": must be debug, info, warn or error`},
		{"redis without secret", append([]string{"--config", rules, "--store", "redis"}, listen...), nil, "--store redis needs an HMAC secret shared by every replica: set --hmac-secret-file (or ENVOY_RLS_HMAC_SECRET_FILE) or ENVOY_RLS_HMAC_SECRET"},
		{"short secret", append([]string{"--config", rules}, listen...), map[string]string{SecretEnv: "short"}, "ENVOY_RLS_HMAC_SECRET: must be at least 16 bytes (it holds 5)"},
	})
}

func TestServeChecks(t *testing.T) {
	base := []string{"--config", "rules"}
	checkServe(t, []serveCase{
		{"defaults", base, nil, ""},
		{"redis without a secret", []string{"--config", "rules", "--store", "redis"}, nil, "--store redis needs an HMAC secret shared by every replica: set --hmac-secret-file (or ENVOY_RLS_HMAC_SECRET_FILE) or ENVOY_RLS_HMAC_SECRET"},
		{"short secret", base, map[string]string{SecretEnv: "short"}, "ENVOY_RLS_HMAC_SECRET: must be at least 16 bytes (it holds 5)"},
		{"help", []string{"-h"}, nil, flag.ErrHelp.Error()},
		{"log level", append(base, "--log-level", "verbose"), nil, `--log-level="verbose": must be debug, info, warn or error`},
		{"header mode", base, map[string]string{"ENVOY_RLS_DEFAULT_HEADERS": "all"}, `ENVOY_RLS_DEFAULT_HEADERS="all": must be full, retry_after or none`},
		{"drain timeout", append(base, "--drain-timeout", "-1s"), nil, `--drain-timeout="-1s": must be a positive duration such as 15s`},
		{"override policies zero", append(base, "--override-max-policies", "0"), nil, `--override-max-policies="0": must be an integer from 1 to 65536`},
		{"override policies too many", base, map[string]string{"ENVOY_RLS_OVERRIDE_MAX_POLICIES": "65537"}, `ENVOY_RLS_OVERRIDE_MAX_POLICIES="65537": must be an integer from 1 to 65536`},
		{"override policies at the bound", append(base, "--override-max-policies", "65536"), nil, ""},
	})
}

// The --grpc-* limits refuse values out of range.
func TestServeTransportChecks(t *testing.T) {
	base := []string{"--config", "rules"}
	checkServe(t, []serveCase{
		{"defaults", base, nil, ""},
		{"all set", append(base, "--grpc-max-concurrent-streams", "1", "--grpc-max-connections", "1048576", "--grpc-first-call-timeout", "0", "--grpc-receive-timeout", "1ms", "--grpc-max-incomplete-requests", "1",
			"--grpc-max-recv-msg-size", "4096", "--grpc-max-connection-idle", "0", "--grpc-max-connection-age", "0", "--grpc-max-connection-age-grace", "0",
			"--grpc-keepalive-time", "1s", "--grpc-keepalive-timeout", "1s", "--grpc-keepalive-min-time", "0", "--grpc-keepalive-permit-without-stream=false"), nil, ""},
		{"streams zero", append(base, "--grpc-max-concurrent-streams", "0"), nil, `--grpc-max-concurrent-streams="0": must be an integer between 1 and 4294967295`},
		{"streams above uint32", base, map[string]string{"ENVOY_RLS_GRPC_MAX_CONCURRENT_STREAMS": "4294967296"}, `ENVOY_RLS_GRPC_MAX_CONCURRENT_STREAMS="4294967296": must be an integer between 1 and 4294967295`},
		{"connections zero", append(base, "--grpc-max-connections", "0"), nil, `--grpc-max-connections="0": must be an integer between 1 and 1048576`},
		{"connections not a number", append(base, "--grpc-max-connections", "many"), nil, `--grpc-max-connections="many": must be an integer`},
		{"first call timeout negative", base, map[string]string{"ENVOY_RLS_GRPC_FIRST_CALL_TIMEOUT": "-1s"}, `ENVOY_RLS_GRPC_FIRST_CALL_TIMEOUT="-1s": must be 0 (never) or a positive duration such as 5s`},
		{"receive timeout zero", base, map[string]string{"ENVOY_RLS_GRPC_RECEIVE_TIMEOUT": "0s"}, `ENVOY_RLS_GRPC_RECEIVE_TIMEOUT="0s": must be a positive duration such as 5s`},
		{"incomplete requests zero", append(base, "--grpc-max-incomplete-requests", "0"), nil, `--grpc-max-incomplete-requests="0": must be an integer between 1 and 1048576`},
		{"message size too small", append(base, "--grpc-max-recv-msg-size", "100"), nil, `--grpc-max-recv-msg-size="100": must be a size in bytes between 4096 and 2147483647`},
		{"idle negative", append(base, "--grpc-max-connection-idle", "-1s"), nil, `--grpc-max-connection-idle="-1s": must be 0 (never) or a positive duration such as 5m`},
		{"age negative", append(base, "--grpc-max-connection-age", "-1s"), nil, `--grpc-max-connection-age="-1s": must be 0 (never) or a positive duration such as 5m`},
		{"grace negative", append(base, "--grpc-max-connection-age-grace", "-1s"), nil, `--grpc-max-connection-age-grace="-1s": must be 0 or a positive duration such as 30s`},
		{"keepalive time below 1s", append(base, "--grpc-keepalive-time", "500ms"), nil, `--grpc-keepalive-time="500ms": must be a duration of at least 1s`},
		{"keepalive timeout below 1s", append(base, "--grpc-keepalive-timeout", "0s"), nil, `--grpc-keepalive-timeout="0s": must be a duration of at least 1s`},
		{"keepalive min time negative", append(base, "--grpc-keepalive-min-time", "-5s"), nil, `--grpc-keepalive-min-time="-5s": must be 0 or a positive duration such as 5s`},
		{"permit without stream", append(base, "--grpc-keepalive-permit-without-stream=maybe"), nil, `--grpc-keepalive-permit-without-stream="maybe": must be true or false`},
	})
}

// The --grpc-tls-* flags that cannot work together are refused without
// reading the files.
func TestServeTLSChecks(t *testing.T) {
	base := []string{"--config", "rules"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-tls-cert", "c.pem"}, `--grpc-tls-key (or ENVOY_RLS_GRPC_TLS_KEY) is not set: must be given together with --grpc-tls-cert`},
		{[]string{"--grpc-tls-key", "k.pem"}, `--grpc-tls-cert (or ENVOY_RLS_GRPC_TLS_CERT) is not set: must be given together with --grpc-tls-key`},
		{[]string{"--grpc-tls-client-ca", "ca.pem"}, `--grpc-tls-cert (or ENVOY_RLS_GRPC_TLS_CERT) is not set: must be set when --grpc-tls-client-ca is`},
		{[]string{"--grpc-tls-cert", "c", "--grpc-tls-key", "k", "--grpc-tls-client-san", "x"}, `--grpc-tls-client-ca (or ENVOY_RLS_GRPC_TLS_CLIENT_CA) is not set: must be set when --grpc-tls-client-san is`},
	} {
		_, _, err := Serve(append(base, tc.args...), noEnv, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func noEnv(string) string { return "" }

// writeFile writes content to the file name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The serve help lists every flag as --name with its variable and default,
// without the flag package's artefacts.
func TestPrintUsage(t *testing.T) {
	var o Options
	fs := NewFlagSet(&o)
	var out bytes.Buffer
	PrintUsage(&out, ServeUsage, fs)
	help := out.String()
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help, "\n  --"+f.Name+" ") && !strings.Contains(help, "\n  --"+f.Name+"\n") {
			t.Errorf("no --%s line", f.Name)
		}
		if !strings.Contains(help, "("+EnvName(f.Name)) {
			t.Errorf("--%s without %s", f.Name, EnvName(f.Name))
		}
	})
	for _, want := range []string{
		"  --default-headers MODE\n      response headers of the rules that set no headers field of their own:\n      full, retry_after or none\n      (ENVOY_RLS_DEFAULT_HEADERS, default \"full\")\n",
		"  --override-max-policies N\n",
		"(ENVOY_RLS_DRAIN_TIMEOUT, default 15s)",
		"(ENVOY_RLS_CONFIG)\n",
		"  --pprof\n",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	for i, line := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "-") && !strings.HasPrefix(strings.TrimSpace(line), "--") {
			t.Errorf("line %d has a single-dash flag: %q", i+1, line)
		}
		if strings.Contains(line, "`") || len(line) > HelpWidth {
			t.Errorf("line %d: %q", i+1, line)
		}
	}
}
