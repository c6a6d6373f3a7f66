// Package xdsrules is serve's rules from an xDS server: the --xds-* flags
// (read with --config-source xds), their check, and Start, which
// subscribes through pkg/descriptors/xds and waits for the first valid
// rules.
package xdsrules

import (
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/credfiles"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/xds"
)

// defaultInitialTimeout is --xds-initial-timeout's default.
const defaultInitialTimeout = time.Minute

// Flags are the xDS client's flags of the serve command (a group of its
// options, internal/options).
type Flags struct {
	Server        string
	NodeID        string
	NodeMetadata  PairList
	TLS           bool
	TLSCert       string
	TLSKey        string
	TLSCA         string
	TLSSAN        string
	Headers       PairList
	RetryInterval time.Duration
	RetryMax      time.Duration
	InitialWait   time.Duration
	ForceStart    bool
}

// PairList is a list of key:value (or key=value) pairs, comma-separated;
// each Set adds to it, so the flag can be repeated.
type PairList struct{ pairs [][2]string }

func (p *PairList) String() string {
	if p == nil {
		return ""
	}
	parts := make([]string, 0, len(p.pairs))
	for _, kv := range p.pairs {
		parts = append(parts, kv[0]+":"+kv[1])
	}
	return strings.Join(parts, ",")
}

func (p *PairList) Set(s string) error {
	if s == "" {
		return nil
	}
	var add [][2]string
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, ":")
		if i := strings.IndexByte(part, '='); i >= 0 && (!ok || i < len(k)) {
			k, v, ok = part[:i], part[i+1:], true
		}
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("%q is not key:value", part)
		}
		add = append(add, [2]string{k, strings.TrimSpace(v)})
	}
	p.pairs = append(p.pairs, add...)
	return nil
}

// Map is the pairs by key (the last of a repeated key wins), nil when
// there are none.
func (p *PairList) Map() map[string]string {
	if len(p.pairs) == 0 {
		return nil
	}
	out := make(map[string]string, len(p.pairs))
	for _, kv := range p.pairs {
		out[kv[0]] = kv[1]
	}
	return out
}

// flagAccepts says what each flag takes, as errors put it after "must
// be". Read only.
var flagAccepts = map[string]string{
	"xds-server":             "host:port of the xDS server (required with --config-source xds)",
	"xds-node-id":            "a non-empty node ID",
	"xds-tls-cert":           "set together with --xds-tls-key",
	"xds-tls-key":            "set together with --xds-tls-cert",
	"xds-retry-interval":     "a positive duration such as 3s",
	"xds-retry-max-interval": "a duration at least --xds-retry-interval",
	"xds-initial-timeout":    "a positive duration such as 1m",
	"xds-node-metadata":      "key:value or key=value pairs, comma-separated",
	"xds-header":             "key:value pairs, comma-separated",
}

// Define defines the flags on fs.
func (f *Flags) Define(fs *flag.FlagSet) map[string]string {
	fs.StringVar(&f.Server, "xds-server", "", "xDS management server, host:port (--config-source xds)")
	fs.StringVar(&f.NodeID, "xds-node-id", xds.DefaultNodeID, "node ID this service subscribes as")
	fs.Var(&f.NodeMetadata, "xds-node-metadata", "node metadata, key:value or key=value pairs, comma-separated (repeatable)")
	fs.BoolVar(&f.TLS, "xds-tls", false, "connect to the xDS server over TLS (implied by any --xds-tls-* file)")
	fs.StringVar(&f.TLSCert, "xds-tls-cert", "", "PEM client certificate for mutual TLS with the xDS server (read at each connection)")
	fs.StringVar(&f.TLSKey, "xds-tls-key", "", "PEM client key for mutual TLS with the xDS server")
	fs.StringVar(&f.TLSCA, "xds-tls-ca", "", "PEM CA bundle that verifies the xDS server (default: system roots)")
	fs.StringVar(&f.TLSSAN, "xds-tls-san", "", "name the xDS server's certificate must hold (default: the host of --xds-server)")
	fs.Var(&f.Headers, "xds-header", "gRPC metadata sent on the xDS stream, key:value pairs, comma-separated (repeatable)")
	fs.DurationVar(&f.RetryInterval, "xds-retry-interval", xds.DefaultRetryInterval, "first wait before reconnecting to the xDS server; it doubles after each failed attempt up to --xds-retry-max-interval, each wait drawn between half and all of it")
	fs.DurationVar(&f.RetryMax, "xds-retry-max-interval", xds.DefaultMaxRetryInterval, "longest wait between reconnection attempts")
	fs.DurationVar(&f.InitialWait, "xds-initial-timeout", defaultInitialTimeout, "how long serve waits for the first valid rules from the xDS server before it gives up (not with --force-start-without-initial-config)")
	fs.BoolVar(&f.ForceStart, "force-start-without-initial-config", false, "with --config-source xds: serve at once with no rules (every call answered OK) until the xDS server sends valid rules")
	return flagAccepts
}

// Check returns one error per refused value, with --config-source xds
// (value) only.
func (f *Flags) Check(check func(string, bool, string), value func(string) string) {
	if value("config-source") != "xds" {
		return
	}
	bad := func(name string, ok bool) { check(name, ok, "must be "+flagAccepts[name]) }
	host, port, err := net.SplitHostPort(f.Server)
	bad("xds-server", err == nil && host != "" && port != "")
	bad("xds-node-id", f.NodeID != "")
	switch {
	case f.TLSCert == "" && f.TLSKey != "":
		bad("xds-tls-cert", false)
	case f.TLSCert != "" && f.TLSKey == "":
		bad("xds-tls-key", false)
	}
	for _, kv := range f.Headers.pairs {
		if !validHeaderName(kv[0]) {
			check("xds-header", false, fmt.Sprintf("header name %q must be lower-case letters, digits, '-', '_' or '.', and not start with grpc-", kv[0]))
			break
		}
	}
	bad("xds-retry-interval", f.RetryInterval > 0)
	bad("xds-retry-max-interval", f.RetryMax >= f.RetryInterval)
	bad("xds-initial-timeout", f.InitialWait > 0)
}

// validHeaderName is a gRPC metadata key a client may send.
func validHeaderName(k string) bool {
	if k == "" || strings.HasPrefix(k, "grpc-") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// clientConfig is the xDS client's configuration of f, the CA bundle
// read; the caller adds what is not a flag (Apply, OnState).
func (f *Flags) clientConfig() (xds.Config, error) {
	c := xds.Config{
		Server: f.Server, NodeID: f.NodeID, NodeMetadata: f.NodeMetadata.Map(), Headers: f.Headers.Map(),
		RetryInterval: f.RetryInterval, MaxRetryInterval: f.RetryMax,
	}
	if !(f.TLS || f.TLSCA != "" || f.TLSCert != "" || f.TLSSAN != "") {
		return c, nil
	}
	c.TLS = &xds.TLS{CertFile: f.TLSCert, KeyFile: f.TLSKey, ServerName: f.TLSSAN}
	if f.TLSCA != "" {
		pool, err := credfiles.ReadCAPool("xds-tls-ca", f.TLSCA)
		if err != nil {
			return xds.Config{}, err
		}
		c.TLS.RootCAs = pool
	}
	return c, nil
}
