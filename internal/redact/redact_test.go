package redact

import (
	"strings"
	"testing"
)

func TestSetting(t *testing.T) {
	for _, c := range []struct {
		name, value, want string
	}{
		// URL user information, with and without a scheme, in lists.
		{"REDIS_URL", "redis://u:PASSWORD@host:6379", "redis://u:xxxxx@host:6379"},
		{"REDIS_URL", "rediss://:PASSWORD@host:6379/0", "rediss://:xxxxx@host:6379/0"},
		{"REDIS_URL", "u:PASSWORD@host:6379", "u:xxxxx@host:6379"},
		{"REDIS_URL", "redis://u:PASS@WORD@host:6379", "redis://u:xxxxx@host:6379"},
		{"REDIS_URL", "redis://u:PASS,WORD@h1:1,redis://v:OTHER@h2:2", "redis://u:xxxxx@h1:1,redis://v:xxxxx@h2:2"},
		{"REDIS_URL", "redis://u:PASS WORD/x@h:1", "redis://u:xxxxx@h:1"},
		{"redis-addr", "redis://user@host:6379", "redis://user@host:6379"},
		{"redis-addr", "host:6379,host2:6379", "host:6379,host2:6379"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/v1/traces?api_key=PASSWORD&region=eu", "https://collector:4318/v1/traces?api_key=xxxxx&region=eu"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/?x=1&token=PASSWORD#f", "https://collector:4318/?x=1&token=xxxxx#f"},
		// Credentials as a whole.
		{"REDIS_AUTH", "user:PASSWORD", "xxxxx"},
		{"REDIS_PERSECOND_AUTH", "PASSWORD", "xxxxx"},
		{"ENVOY_RLS_HMAC_SECRET", "PASSWORD", "xxxxx"},
		{"some-api-key", "PASSWORD", "xxxxx"},
		{"REDIS_AUTH", "", ""},
		// Paths and key names are not credentials.
		{"hmac-secret-file", "/run/secret", "/run/secret"},
		{"redis-password-file", "/run/pw", "/run/pw"},
		{"hmac-secret-redis-key", "envoy-rls:hmac-secret", "envoy-rls:hmac-secret"},
		{"redis-tls-key", "/tls/key.pem", "/tls/key.pem"},
		// Header and metadata lists.
		{"xds-header", "authorization:Bearer PASSWORD", "authorization:xxxxx"},
		{"xds-header", "Authorization:Bearer PASSWORD,x-tenant:a", "Authorization:xxxxx,x-tenant:a"},
		{"xds-header", "x-api-key=PASSWORD", "x-api-key=xxxxx"},
		{"xds-header", "authorization Bearer PASSWORD", "xxxxx"},
		{"xds-header", "x-api-key\tPASSWORD", "xxxxx"},
		{"LIMIT_REMAINING_HEADER", "X Left", "X Left"},
		{"xds-header", "authorization:Bearer PASS,WORD,x", "authorization:xxxxx,xxxxx,xxxxx"},
		{"xds-header", "authorization:Bearer PASS,x-tenant:a,b", "authorization:xxxxx,x-tenant:a,b"},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "cookie:s=PASSWORD,proxy-authorization:Basic PASSWORD", "cookie:xxxxx,proxy-authorization:xxxxx"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Basic%20PASSWORD,x-honeycomb-team=PASSWORD,dataset=a", "authorization=xxxxx,x-honeycomb-team=PASSWORD,dataset=a"},
		{"xds-node-metadata", "cluster:a,session-id:PASSWORD", "cluster:a,session-id:xxxxx"},
		{"limit-header", "RateLimit-Limit", "RateLimit-Limit"},
		{"default-headers", "full", "full"},
	} {
		got := Setting(c.name, c.value)
		if got != c.want {
			t.Errorf("Setting(%q, %q) = %q, want %q", c.name, c.value, got, c.want)
		}
	}
}

// An x-honeycomb-team header is no credential by its name: the rule is by
// name, so such a header is only masked when its name says so. The test
// above pins that; this one pins what the name rule covers.
func TestCredentialHeader(t *testing.T) {
	for _, n := range []string{"authorization", "Proxy-Authorization", "cookie", "set-cookie", "x-api-key", "api-key", "x-auth-token",
		"x-goog-api-key", "private-token", "x-amz-security-token", "x-csrf-token", "x-session", "x-signature", "jwt", "password", "x-client-secret"} {
		if !CredentialHeader(n) {
			t.Errorf("CredentialHeader(%q) = false", n)
		}
	}
	for _, n := range []string{"x-tenant", "user-agent", "content-type", "x-request-id", "cluster", "region"} {
		if CredentialHeader(n) {
			t.Errorf("CredentialHeader(%q) = true", n)
		}
	}
}

func TestURLsInText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`REDIS_URL="redis://u:PASSWORD@127.0.0.1:1": must be host:port`, `REDIS_URL="redis://u:xxxxx@127.0.0.1:1": must be host:port`},
		{"no url here: host:port", "no url here: host:port"},
		{"http://collector:4318/v1/traces", "http://collector:4318/v1/traces"},
		{"mailto alice@example.com", "mailto alice@example.com"},
		{"", ""},
	} {
		if got := URLs(c.in); got != c.want {
			t.Errorf("URLs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzSetting: whatever the value, a password placed in a URL's user
// information or in a credential header never survives.
func FuzzSetting(f *testing.F) {
	f.Add("redis://u:", "@h:1", "pw")
	f.Add("", "@", "p,w")
	f.Add("x:", "@y", "p w@q")
	f.Fuzz(func(t *testing.T, before, after, secret string) {
		if len(secret) < 4 || strings.ContainsAny(secret, ":") || strings.Contains(before+after+"authorization:"+Mask, secret) {
			return // the secret must be found only where it was put
		}
		// user:SECRET@host.
		if !strings.HasSuffix(before, ":") || !strings.HasPrefix(after, "@") {
			return
		}
		v := before + secret + after
		if strings.Count(v, "://") != strings.Count(before, "://") {
			return // the secret would be cut at a scheme's "://"
		}
		if got := Setting("REDIS_URL", v); strings.Contains(got, secret) {
			t.Fatalf("Setting(REDIS_URL, %q) = %q: the secret survived", v, got)
		}
		if strings.ContainsAny(secret, "=") {
			return // a second pair: key=value
		}
		h := "authorization:" + secret
		if got := Setting("xds-header", h); strings.Contains(got, secret) {
			t.Fatalf("Setting(xds-header, %q) = %q", h, got)
		}
	})
}
