package options

import (
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors/xds"
)

// Rule sources (--config-source).
const (
	SourceFile = "file"
	SourceXDS  = "xds"
)

// Defaults of the rule source's flags.
const (
	DefaultConfigSource      = SourceFile
	DefaultXDSNodeID         = xds.DefaultNodeID
	DefaultXDSRetryInterval  = xds.DefaultRetryInterval
	DefaultXDSRetryMax       = xds.DefaultMaxRetryInterval
	DefaultXDSInitialTimeout = time.Minute
)

// xdsOptions are the --config-source and --xds-* flags (part of Options).
type xdsOptions struct {
	ConfigSource     string
	XDSServer        string
	XDSNodeID        string
	XDSNodeMetadata  PairList
	XDSTLS           bool
	XDSTLSCert       string
	XDSTLSKey        string
	XDSTLSCA         string
	XDSTLSSAN        string
	XDSHeaders       PairList
	XDSRetryInterval time.Duration
	XDSRetryMax      time.Duration
	XDSInitialWait   time.Duration
	ForceStart       bool
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

// xdsFlags adds the flags of the rule source to fs.
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

// check returns one error per refused value of the rule source's flags;
// the --xds-* flags are checked only with --config-source xds.
func (o *xdsOptions) check(given map[string]Given) []error {
	r := refusals{given: given, accepts: accepts}
	switch o.ConfigSource {
	case SourceFile:
		return nil
	case SourceXDS:
	default:
		r.check("config-source", false)
		return r.errs
	}
	host, port, err := net.SplitHostPort(o.XDSServer)
	r.check("xds-server", err == nil && host != "" && port != "")
	r.check("xds-node-id", o.XDSNodeID != "")
	switch {
	case o.XDSTLSCert == "" && o.XDSTLSKey != "":
		r.check("xds-tls-cert", false)
	case o.XDSTLSCert != "" && o.XDSTLSKey == "":
		r.check("xds-tls-key", false)
	}
	for _, kv := range o.XDSHeaders.pairs {
		if !validHeaderName(kv[0]) {
			r.errs = append(r.errs, fmt.Errorf("%s: header name %q must be lower-case letters, digits, '-', '_' or '.', and not start with grpc-", Label("xds-header", given), kv[0]))
			break
		}
	}
	r.check("xds-retry-interval", o.XDSRetryInterval > 0)
	r.check("xds-retry-max-interval", o.XDSRetryMax >= o.XDSRetryInterval)
	r.check("xds-initial-timeout", o.XDSInitialWait > 0)
	return r.errs
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

// XDSConfig is the xDS client's configuration from the flags, the CA
// bundle read; the caller adds what is not a flag (Apply, OnState).
func (o *xdsOptions) XDSConfig() (xds.Config, error) {
	c := xds.Config{
		Server: o.XDSServer, NodeID: o.XDSNodeID, NodeMetadata: o.XDSNodeMetadata.Map(), Headers: o.XDSHeaders.Map(),
		RetryInterval: o.XDSRetryInterval, MaxRetryInterval: o.XDSRetryMax,
	}
	if !(o.XDSTLS || o.XDSTLSCA != "" || o.XDSTLSCert != "" || o.XDSTLSSAN != "") {
		return c, nil
	}
	c.TLS = &xds.TLS{CertFile: o.XDSTLSCert, KeyFile: o.XDSTLSKey, ServerName: o.XDSTLSSAN}
	if o.XDSTLSCA != "" {
		pool, err := ReadCAPool("xds-tls-ca", o.XDSTLSCA)
		if err != nil {
			return xds.Config{}, err
		}
		c.TLS.RootCAs = pool
	}
	return c, nil
}
