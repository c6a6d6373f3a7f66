package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"
)

// Config sources of --config-source.
const (
	ConfigSourceFile = "file"
	ConfigSourceXDS  = "xds"
)

// Defaults of the xDS and statsd flags (the reference service's).
const (
	DefaultXDSNodeID           = "default"
	DefaultXDSRetryInterval    = 3 * time.Second
	DefaultXDSBackoffInitial   = 10 * time.Second
	DefaultXDSBackoffMax       = 60 * time.Second
	DefaultStatsdFlushInterval = 10 * time.Second
	DefaultStatsdNearLimit     = 0.8
)

// xdsOptions are the --xds-* flags: where the rules come from when
// --config-source is xds (part of Options).
type xdsOptions struct {
	ConfigSource string
	// ServerURL is the ADS server's host:port.
	ServerURL string
	NodeID    string
	// NodeMetadata is k:v or k=v pairs separated by commas.
	NodeMetadata string
	TLSCert      string
	TLSKey       string
	TLSCA        string
	TLSSAN       string
	TLS          bool
	// Headers are k:v request headers, one per --xds-header.
	Headers        headerList
	RetryInterval  time.Duration
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// ForceStart serves without rules until the first version arrives.
	ForceStart bool
}

// headerList is a repeatable k:v flag.
type headerList []string

func (h *headerList) String() string { return strings.Join(*h, ",") }

func (h *headerList) Set(s string) error {
	if k, _, ok := strings.Cut(s, ":"); !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("%q is not name:value", s)
	}
	*h = append(*h, s)
	return nil
}

// xdsFlags adds the config source and --xds-* flags to fs.
func xdsFlags(fs *flag.FlagSet, o *xdsOptions) {
	fs.StringVar(&o.ConfigSource, "config-source", ConfigSourceFile, "where the rules come from: file (--config) or xds (an ADS server, --xds-server)")
	fs.StringVar(&o.ServerURL, "xds-server", "", "xDS (ADS) server host:port serving RateLimitConfig resources")
	fs.StringVar(&o.NodeID, "xds-node-id", DefaultXDSNodeID, "node ID this service subscribes as")
	fs.StringVar(&o.NodeMetadata, "xds-node-metadata", "", "node metadata: key:value (or key=value) pairs separated by commas")
	fs.BoolVar(&o.TLS, "xds-tls", false, "connect to the xDS server over TLS (on too when any --xds-tls-* file is given)")
	fs.StringVar(&o.TLSCert, "xds-tls-cert", "", "PEM client certificate for mutual TLS to the xDS server")
	fs.StringVar(&o.TLSKey, "xds-tls-key", "", "PEM key of --xds-tls-cert")
	fs.StringVar(&o.TLSCA, "xds-tls-ca", "", "PEM CA bundle that verifies the xDS server (default: system roots)")
	fs.StringVar(&o.TLSSAN, "xds-tls-san", "", "name the xDS server's certificate must hold (default: the host of --xds-server)")
	fs.Var(&o.Headers, "xds-header", "extra request header name:value sent to the xDS server (repeatable)")
	fs.DurationVar(&o.RetryInterval, "xds-retry-interval", DefaultXDSRetryInterval, "wait between attempts to connect to the xDS server")
	fs.DurationVar(&o.BackoffInitial, "xds-backoff-initial", DefaultXDSBackoffInitial, "first wait before re-subscribing after the xDS stream fails")
	fs.DurationVar(&o.BackoffMax, "xds-backoff-max", DefaultXDSBackoffMax, "longest wait before re-subscribing after the xDS stream fails")
	fs.BoolVar(&o.ForceStart, "force-start-without-initial-config", false, "with --config-source xds: serve before the first rules arrive (every call is answered OK, as no rule matches)")
}

// check refuses --config-source and --xds-* values that cannot work,
// without dialling or reading files.
func (o *xdsOptions) check(given map[string]given) error {
	var errs []error
	bad := func(name, want string) {
		errs = append(errs, fmt.Errorf("%s: must be %s", label(name, given), want))
	}
	switch o.ConfigSource {
	case ConfigSourceFile, ConfigSourceXDS:
	default:
		bad("config-source", "file or xds")
	}
	if o.ConfigSource == ConfigSourceXDS {
		if _, port, err := net.SplitHostPort(o.ServerURL); err != nil || port == "" {
			bad("xds-server", "the xDS server's host:port with --config-source xds")
		}
		if o.NodeID == "" {
			bad("xds-node-id", "a node ID")
		}
	}
	if _, err := parsePairs(o.NodeMetadata); err != nil {
		bad("xds-node-metadata", "key:value pairs separated by commas ("+err.Error()+")")
	}
	switch {
	case o.TLSCert != "" && o.TLSKey == "":
		bad("xds-tls-key", "given together with --xds-tls-cert (mutual TLS needs both)")
	case o.TLSKey != "" && o.TLSCert == "":
		bad("xds-tls-cert", "given together with --xds-tls-key (mutual TLS needs both)")
	}
	if o.RetryInterval <= 0 {
		bad("xds-retry-interval", "a positive duration such as 3s")
	}
	if o.BackoffInitial <= 0 {
		bad("xds-backoff-initial", "a positive duration such as 10s")
	}
	if o.BackoffMax < o.BackoffInitial {
		bad("xds-backoff-max", "a duration no shorter than --xds-backoff-initial")
	}
	return errors.Join(errs...)
}

// parsePairs parses key:value or key=value pairs separated by commas, as
// the reference service's map variables (CONFIG_GRPC_XDS_NODE_METADATA,
// EXTRA_TAGS) hold them.
func parsePairs(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		i := strings.IndexAny(p, ":=")
		if i <= 0 {
			return nil, fmt.Errorf("%q has no key:value", p)
		}
		m[strings.TrimSpace(p[:i])] = strings.TrimSpace(p[i+1:])
	}
	return m, nil
}

// statsdOptions are the --statsd-* flags (part of Options).
type statsdOptions struct {
	// StatsdAddr is the statsd server's host:port; empty: no statsd.
	StatsdAddr          string
	StatsdExtraTags     string
	StatsdFlushInterval time.Duration
	// StatsdNearLimitRatio is the share of a limit past which an allowed
	// hit counts as near_limit.
	StatsdNearLimitRatio float64
}

// statsdFlags adds the --statsd-* flags to fs.
func statsdFlags(fs *flag.FlagSet, o *statsdOptions) {
	fs.StringVar(&o.StatsdAddr, "statsd-addr", "", "send the reference service's statsd counters to this host:port over UDP (empty: no statsd)")
	fs.StringVar(&o.StatsdExtraTags, "statsd-extra-tags", "", "tags added to every statsd metric: key:value pairs separated by commas")
	fs.DurationVar(&o.StatsdFlushInterval, "statsd-flush-interval", DefaultStatsdFlushInterval, "how often statsd counters are sent")
	fs.Float64Var(&o.StatsdNearLimitRatio, "statsd-near-limit-ratio", DefaultStatsdNearLimit, "share of a limit past which an allowed hit counts as near_limit (0–1)")
}

// check refuses --statsd-* values that cannot work.
func (o *statsdOptions) check(given map[string]given) error {
	var errs []error
	bad := func(name, want string) {
		errs = append(errs, fmt.Errorf("%s: must be %s", label(name, given), want))
	}
	if o.StatsdAddr != "" {
		if _, port, err := net.SplitHostPort(o.StatsdAddr); err != nil || port == "" {
			bad("statsd-addr", "host:port of a statsd server (UDP)")
		}
	}
	if _, err := parsePairs(o.StatsdExtraTags); err != nil {
		bad("statsd-extra-tags", "key:value pairs separated by commas ("+err.Error()+")")
	}
	if o.StatsdFlushInterval <= 0 {
		bad("statsd-flush-interval", "a positive duration such as 10s")
	}
	if o.StatsdNearLimitRatio <= 0 || o.StatsdNearLimitRatio > 1 {
		bad("statsd-near-limit-ratio", "a number above 0 and at most 1")
	}
	return errors.Join(errs...)
}
