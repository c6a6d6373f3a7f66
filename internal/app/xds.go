package app

import (
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors/xds"
)

// Config sources (--config-source).
const (
	SourceFile = "file"
	SourceXDS  = "xds"
)

// Defaults of the xDS flags.
const (
	DefaultConfigSource      = SourceFile
	DefaultXDSNodeID         = xds.DefaultNodeID
	DefaultXDSRetryInterval  = xds.DefaultRetryInterval
	DefaultXDSRetryMax       = xds.DefaultMaxRetryInterval
	DefaultXDSInitialTimeout = time.Minute
)

// xdsOptions are the --config-source and --xds-* flags.
type xdsOptions struct {
	ConfigSource     string
	XDSServer        string
	XDSNodeID        string
	XDSNodeMetadata  pairList
	XDSTLS           bool
	XDSTLSCert       string
	XDSTLSKey        string
	XDSTLSCA         string
	XDSTLSSAN        string
	XDSHeaders       pairList
	XDSRetryInterval time.Duration
	XDSRetryMax      time.Duration
	XDSInitialWait   time.Duration
	ForceStart       bool
}

// pairList is a list of key:value (or key=value) pairs, comma-separated;
// each Set adds to it, so the flag can be repeated.
type pairList struct{ pairs [][2]string }

func (p *pairList) String() string {
	if p == nil {
		return ""
	}
	parts := make([]string, 0, len(p.pairs))
	for _, kv := range p.pairs {
		parts = append(parts, kv[0]+":"+kv[1])
	}
	return strings.Join(parts, ",")
}

func (p *pairList) Set(s string) error {
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

func (p *pairList) m() map[string]string {
	if len(p.pairs) == 0 {
		return nil
	}
	out := make(map[string]string, len(p.pairs))
	for _, kv := range p.pairs {
		out[kv[0]] = kv[1]
	}
	return out
}

// xdsFlags adds the flags of the rule source.
func xdsFlags(fs *flag.FlagSet, o *xdsOptions) {
	fs.StringVar(&o.ConfigSource, "config-source", DefaultConfigSource, "where the rules come from: file (--config) or xds (RateLimitConfig resources from --xds-server)")
	fs.StringVar(&o.XDSServer, "xds-server", "", "xDS management server, host:port (--config-source xds)")
	fs.StringVar(&o.XDSNodeID, "xds-node-id", DefaultXDSNodeID, "node ID this service subscribes as")
	fs.Var(&o.XDSNodeMetadata, "xds-node-metadata", "node metadata, key:value or key=value pairs, comma-separated (repeatable)")
	fs.BoolVar(&o.XDSTLS, "xds-tls", false, "connect to the xDS server over TLS (implied by any --xds-tls-* file)")
	fs.StringVar(&o.XDSTLSCert, "xds-tls-cert", "", "PEM client certificate for mutual TLS with the xDS server (read at each connection)")
	fs.StringVar(&o.XDSTLSKey, "xds-tls-key", "", "PEM client key for mutual TLS with the xDS server")
	fs.StringVar(&o.XDSTLSCA, "xds-tls-ca", "", "PEM CA bundle that verifies the xDS server (default: system roots)")
	fs.StringVar(&o.XDSTLSSAN, "xds-tls-san", "", "name the xDS server's certificate must hold (default: the host of --xds-server)")
	fs.Var(&o.XDSHeaders, "xds-header", "gRPC metadata sent on the xDS stream, key:value pairs, comma-separated (repeatable)")
	fs.DurationVar(&o.XDSRetryInterval, "xds-retry-interval", DefaultXDSRetryInterval, "first wait before reconnecting to the xDS server; it doubles after each failed attempt up to --xds-retry-max-interval, each wait drawn between half and all of it")
	fs.DurationVar(&o.XDSRetryMax, "xds-retry-max-interval", DefaultXDSRetryMax, "longest wait between reconnection attempts")
	fs.DurationVar(&o.XDSInitialWait, "xds-initial-timeout", DefaultXDSInitialTimeout, "how long serve waits for the first valid rules from the xDS server before it gives up (not with --force-start-without-initial-config)")
	fs.BoolVar(&o.ForceStart, "force-start-without-initial-config", false, "with --config-source xds: serve at once with no rules (every call answered OK) until the xDS server sends valid rules")
}

// xdsAccepts is what the xDS flags take, for errors.
var xdsAccepts = map[string]string{
	"config-source":          SourceFile + " or " + SourceXDS,
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

// check returns the problems of the xDS flags, one error each.
func (o *xdsOptions) check(seen map[string]given) []error {
	var errs []error
	bad := func(name string) {
		errs = append(errs, fmt.Errorf("%s: must be %s", label(name, seen), xdsAccepts[name]))
	}
	switch o.ConfigSource {
	case SourceFile:
		return nil
	case SourceXDS:
	default:
		bad("config-source")
		return errs
	}
	if host, port, err := net.SplitHostPort(o.XDSServer); err != nil || host == "" || port == "" {
		bad("xds-server")
	}
	if o.XDSNodeID == "" {
		bad("xds-node-id")
	}
	if (o.XDSTLSCert == "") != (o.XDSTLSKey == "") {
		if o.XDSTLSCert == "" {
			bad("xds-tls-cert")
		} else {
			bad("xds-tls-key")
		}
	}
	for _, kv := range o.XDSHeaders.pairs {
		if !validHeaderName(kv[0]) {
			errs = append(errs, fmt.Errorf("%s: header name %q must be lower-case letters, digits, '-', '_' or '.', and not start with grpc-", label("xds-header", seen), kv[0]))
			break
		}
	}
	if o.XDSRetryInterval <= 0 {
		bad("xds-retry-interval")
	}
	if o.XDSRetryMax < o.XDSRetryInterval {
		bad("xds-retry-max-interval")
	}
	if o.XDSInitialWait <= 0 {
		bad("xds-initial-timeout")
	}
	return errs
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

// xdsTLS is the TLS of the xDS connection (nil: plaintext); the CA is
// read here.
func (o *xdsOptions) xdsTLS() (*xds.TLS, error) {
	if !(o.XDSTLS || o.XDSTLSCA != "" || o.XDSTLSCert != "" || o.XDSTLSSAN != "") {
		return nil, nil
	}
	t := &xds.TLS{CertFile: o.XDSTLSCert, KeyFile: o.XDSTLSKey, ServerName: o.XDSTLSSAN}
	if o.XDSTLSCA != "" {
		pool, err := readCAPool("xds-tls-ca", o.XDSTLSCA)
		if err != nil {
			return nil, err
		}
		t.RootCAs = pool
	}
	return t, nil
}
