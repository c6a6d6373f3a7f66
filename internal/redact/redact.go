// Package redact is the one rule for what of a configured value may be
// printed: start-up errors and log lines quote what the user wrote, less
// the credentials it carries. It masks
//
//   - the password of every URL's user information (scheme://user:PASSWORD@host,
//     user:PASSWORD@host) and the values of credential-named query
//     parameters (?password=…, ?token=…);
//   - the value of every credential header or metadata key (CredentialHeader)
//     in a list of key:value or key=value pairs;
//   - the whole value of a setting that is a credential (SecretSetting:
//     REDIS_AUTH, ENVOY_RLS_HMAC_SECRET, …).
//
// Masked text is replaced by Mask. The package has no state and imports
// nothing of the module.
package redact

import (
	"slices"
	"strings"
)

// Mask replaces a credential in printed text.
const Mask = "xxxxx"

// credentialWords make a header, metadata key or query parameter a
// credential when its lower-case name contains one of them.
var credentialWords = []string{"auth", "token", "secret", "passw", "key", "credential", "session", "cookie", "signature", "jwt"}

// secretLastWords make a setting a credential as a whole when its name,
// split at '-' and '_', ends with one of them (REDIS_AUTH,
// ENVOY_RLS_HMAC_SECRET); a name ending in -file, -key or -prefix names a
// path or a key name, not a credential.
var secretLastWords = []string{"auth", "password", "passwd", "secret", "token", "credential", "credentials", "cookie", "apikey"}

// pairLastWords make a setting a list of headers or metadata pairs
// (--xds-header, OTEL_EXPORTER_OTLP_HEADERS, CONFIG_GRPC_XDS_NODE_METADATA).
var pairLastWords = []string{"header", "headers", "metadata"}

// CredentialHeader reports whether a header, gRPC metadata key or query
// parameter named name carries a credential: authorization,
// proxy-authorization, cookie, x-api-key, and any name holding auth,
// token, secret, passw, key, credential, session, cookie, signature or jwt
// (any case). Over-matching only hides a value that was not secret.
func CredentialHeader(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// words splits a setting's name (a flag without dashes, or an environment
// variable) into lower-case words.
func words(name string) []string {
	return strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '-' || r == '_' })
}

func lastWordIn(name string, set []string) bool {
	w := words(name)
	if len(w) == 0 {
		return false
	}
	last := w[len(w)-1]
	if len(w) > 1 && last == "key" && w[len(w)-2] == "api" {
		last = "apikey"
	}
	for _, s := range set {
		if last == s {
			return true
		}
	}
	return false
}

// SecretSetting reports whether the setting named name (a flag without
// dashes, or an environment variable) is a credential as a whole: its
// last word is auth, password, passwd, secret, token, credential(s),
// cookie or api-key.
func SecretSetting(name string) bool { return lastWordIn(name, secretLastWords) }

// PairSetting reports whether the setting named name holds key:value
// pairs of headers or metadata: its last word is header, headers or
// metadata.
func PairSetting(name string) bool { return lastWordIn(name, pairLastWords) }

// Setting is the value of the setting named name (a flag without dashes,
// or an environment variable) as it may be printed: Mask for a
// SecretSetting, the pairs of a PairSetting with credentials masked, and in
// every case URL passwords masked.
func Setting(name, value string) string {
	switch {
	case value == "":
		return value
	case SecretSetting(name):
		return Mask
	case PairSetting(name):
		value = Pairs(value)
	}
	return URLs(value)
}

// Pairs masks the value of each credential key (CredentialHeader) in s, a
// list of key:value or key=value entries separated by commas (the first of
// ':' and '=' separates). An entry without a separator is masked when its
// first word is a credential name (a pair written with a space instead of
// a separator: "authorization Bearer …") or it follows a masked entry (the
// rest of a value cut at a comma); otherwise it is kept (a bare name such
// as RateLimit-Limit).
func Pairs(s string) string {
	entries := strings.Split(s, ",")
	masked := false
	for i, e := range entries {
		sep := strings.IndexAny(e, ":=")
		fields := strings.Fields(e)
		switch {
		case sep < 0 && (masked || len(fields) > 1 && CredentialHeader(fields[0])):
			entries[i], masked = Mask, true
		case sep < 0:
		case CredentialHeader(e[:sep]):
			entries[i], masked = e[:sep+1]+Mask, true
		default:
			masked = false
		}
	}
	return strings.Join(entries, ",")
}

// URLs masks, in s, the password of every URL's user information and the
// value of every credential-named query parameter (CredentialHeader) of a
// URL with a scheme. s is cut into segments at each "://"; in each, the
// text between the first ':' and the last '@' is masked (user:PASSWORD@host),
// so a password holding a ',', ' ', '/' or '@' is masked whole. The rule
// errs on the side of masking: in free text it may hide more than the
// password, never less. Text without '@' or '?' comes back as it is.
func URLs(s string) string {
	if !strings.ContainsAny(s, "@?") {
		return s
	}
	var b strings.Builder
	for i, seg := range strings.Split(s, "://") {
		if i > 0 {
			b.WriteString("://")
		}
		if at := strings.LastIndexByte(seg, '@'); at >= 0 {
			if c := strings.IndexByte(seg[:at], ':'); c >= 0 {
				seg = seg[:c+1] + Mask + seg[at:]
			}
		}
		if i > 0 {
			seg = query(seg)
		}
		b.WriteString(seg)
	}
	return b.String()
}

// query masks the value of every credential parameter (?name=value or
// &name=value, CredentialHeader(name)) in seg, the part of a URL after its
// scheme: up to the next '&', '#', space, quote or ','.
func query(seg string) string {
	var b strings.Builder
	for {
		i := strings.IndexAny(seg, "?&")
		if i < 0 {
			b.WriteString(seg)
			return b.String()
		}
		b.WriteString(seg[:i+1])
		seg = seg[i+1:]
		eq := strings.IndexByte(seg, '=')
		end := strings.IndexAny(seg, "&#?,;\"'` \t\r\n")
		if end < 0 {
			end = len(seg)
		}
		if eq < 0 || eq > end {
			continue
		}
		b.WriteString(seg[:eq+1])
		if eq+1 < end && CredentialHeader(seg[:eq]) {
			b.WriteString(Mask)
		} else {
			b.WriteString(seg[eq+1 : end])
		}
		seg = seg[end:]
	}
}

// MsgPlaintextCredentials is the start-up warning of credential headers
// (Credentials) sent without TLS (to the OTLP endpoint or the xDS server).
const MsgPlaintextCredentials = "credential headers are sent without TLS: anyone on the path can read them; use TLS to that endpoint"

// Credentials are the names of the credential headers (CredentialHeader)
// among those of headers, sorted: what a warning may name.
func Credentials(headers map[string]string) []string {
	var names []string
	for k := range headers {
		if CredentialHeader(k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}
