package tracing

import (
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/redact"
)

// The OTLP exporter's variables that Flags.read checks before the
// exporter reads them: the exporter would log a malformed one whole (a
// header's credential or an endpoint's password included) on stderr and
// go on without it.
const (
	envHeaders        = "OTEL_EXPORTER_OTLP_HEADERS"
	envTracesHeaders  = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envInsecure       = "OTEL_EXPORTER_OTLP_INSECURE"
	envTracesInsecure = "OTEL_EXPORTER_OTLP_TRACES_INSECURE"
)

// checkOTLP refuses, through bad, a malformed header list or endpoint of
// the OTLP exporter. bad quotes the value through redact.Setting.
func checkOTLP(getenv func(string) string, bad func(name, value, want string)) {
	for _, name := range []string{envHeaders, envTracesHeaders} {
		if raw := strings.TrimSpace(getenv(name)); raw != "" {
			if _, ok := parseOTLPHeaders(raw); !ok {
				bad(name, raw, "name=value pairs separated by commas, each name an HTTP header name and each value URL-encoded")
			}
		}
	}
	for _, name := range []string{envEndpoint, envTracesEndpoint} {
		if raw := strings.TrimSpace(getenv(name)); raw != "" {
			if _, err := url.Parse(raw); err != nil {
				bad(name, raw, "a URL such as https://collector:4318")
			}
		}
	}
}

// parseOTLPHeaders reads an OTEL_EXPORTER_OTLP_HEADERS value as the
// exporter does: name=value pairs separated by commas, the value
// URL-decoded; ok is false when one pair does not parse.
func parseOTLPHeaders(raw string) (map[string]string, bool) {
	h := map[string]string{}
	for _, pair := range strings.Split(raw, ",") {
		n, v, found := strings.Cut(pair, "=")
		n = strings.TrimSpace(n)
		if !found || !headerToken(n) {
			return nil, false
		}
		v, err := url.PathUnescape(v)
		if err != nil {
			return nil, false
		}
		h[n] = strings.TrimSpace(v)
	}
	return h, true
}

// headerToken is an HTTP header name (RFC 9110 token).
func headerToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// otlpPlaintext reports whether the OTLP exporter sends in plaintext, as
// it decides from its variables: OTEL_EXPORTER_OTLP_TRACES_INSECURE, else
// OTEL_EXPORTER_OTLP_INSECURE, else the scheme of the traces endpoint,
// else of the endpoint (http is plaintext; a unix socket is local and
// counts as not); TLS when none is set.
func otlpPlaintext(getenv func(string) string) bool {
	for _, name := range []string{envTracesInsecure, envInsecure} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return strings.EqualFold(v, "true")
		}
	}
	for _, name := range []string{envTracesEndpoint, envEndpoint} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			u, err := url.Parse(v)
			return err == nil && strings.EqualFold(u.Scheme, "http")
		}
	}
	return false
}

// warnOTLPCredentials logs redact.MsgPlaintextCredentials once when the OTLP
// exporter sends credential headers (redact.Credentials) in plaintext.
func warnOTLPCredentials(log *zap.Logger, getenv func(string) string) {
	if !otlpPlaintext(getenv) {
		return
	}
	var names []string
	for _, name := range []string{envHeaders, envTracesHeaders} {
		h, _ := parseOTLPHeaders(strings.TrimSpace(getenv(name)))
		names = append(names, redact.Credentials(h)...)
	}
	if len(names) > 0 {
		log.Warn(redact.MsgPlaintextCredentials, zap.String("to", "otlp"), zap.Strings("headers", names))
	}
}
