package app

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/redact"
	"github.com/envoy-rls/envoy-rls/internal/xdstest"
)

// credential is the secret the tests of this file put in headers.
const credential = "Bearer c0nfidential-t0ken"

// TestCredentialHeadersInPlaintext: a credential header sent to an xDS
// server or an OTLP endpoint without TLS is named (never its value) in
// one warning at start; over TLS, or without a credential header, there is
// none.
func TestCredentialHeadersInPlaintext(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	certs := xdstest.NewCerts(t)
	tlsServer := xdstest.Start(t, certs, "rls-node")
	tlsServer.Set("v1", userLimit(2))
	xdsPlain := []string{"--config-source", "xds", "--xds-server", deploytest.FreeAddr(t), "--force-start-without-initial-config"}
	otlp := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + deploytest.FreeAddr(t), "OTEL_EXPORTER_OTLP_HEADERS": "authorization=" + strings.ReplaceAll(credential, " ", "%20") + ",x-tenant=a"}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string // the headers field of the warning; "" for none
	}{
		{"xds plaintext", append(xdsPlain, "--xds-header", "authorization:"+credential+",x-tenant:a"), nil, `"to":"xds","headers":["authorization"]`},
		{"xds plaintext, no credential", append(xdsPlain, "--xds-header", "x-tenant:a"), nil, ""},
		{"xds over TLS", append(xdsArgs(tlsServer, certs), "--xds-header", "authorization:"+credential), nil, ""},
		{"otlp over http", []string{"--config", rules}, otlp, `"to":"otlp","headers":["authorization"]`},
		{"otlp insecure", []string{"--config", rules}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=" + strings.ReplaceAll(credential, " ", "%20")}, `"to":"otlp","headers":["x-api-key"]`},
		{"otlp over https", []string{"--config", rules}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://" + deploytest.FreeAddr(t), "OTEL_EXPORTER_OTLP_HEADERS": otlp["OTEL_EXPORTER_OTLP_HEADERS"]}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startServe(t, c.args, c.env, hooks{})
			_ = r.stop(t)
			logs := r.logs.String()
			if strings.Contains(logs, "c0nfidential") {
				t.Errorf("the logs show the credential:\n%s", logs)
			}
			n := strings.Count(logs, redact.MsgPlaintextCredentials)
			switch {
			case c.want == "" && n != 0:
				t.Errorf("a plaintext warning without cause:\n%s", logs)
			case c.want != "" && (n != 1 || !strings.Contains(logs, c.want)):
				t.Errorf("%d warnings, want one with %s:\n%s", n, c.want, logs)
			}
		})
	}
}

// TestStartFailuresRedacted: a start that fails after the options were
// accepted — no rules from the xDS server, a refused reference setting —
// shows no credential in its error or its log.
func TestStartFailuresRedacted(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"no rules from xds", []string{"--config-source", "xds", "--xds-server", deploytest.FreeAddr(t), "--xds-initial-timeout", "300ms",
			"--xds-header", "authorization:" + credential, "--xds-node-metadata", "token:" + credential}, nil},
		{"compat REDIS_URL", []string{"--env-compat"}, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis://u:c0nfidential@127.0.0.1:1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var logs bytes.Buffer
			args := append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, c.args...)
			err := Run(ctx, args, func(k string) string { return c.env[k] }, io.Discard, &logs)
			if err == nil {
				t.Fatal("serve started")
			}
			if out := err.Error() + "\n" + logs.String(); strings.Contains(out, "c0nfidential") {
				t.Errorf("the output shows the credential:\n%s", out)
			}
		})
	}
}
