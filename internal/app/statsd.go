package app

import (
	"flag"
	"net"
	"strconv"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/observe"
	"github.com/envoy-rls/envoy-rls/internal/statsd"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Defaults of the statsd flags.
const (
	DefaultStatsdProtocol      = "tcp"
	DefaultStatsdFlushInterval = statsd.DefaultFlushInterval
	DefaultNearLimitRatio      = "0.8"
)

// statsdOptions are the --statsd-* flags and --near-limit-ratio (part of
// Options). The ratio and the tags are kept as given and parsed by check.
type statsdOptions struct {
	StatsdAddr          string
	StatsdProtocol      string
	StatsdExtraTags     string
	StatsdFlushInterval time.Duration
	NearLimitRatio      string
}

// statsdFlags adds the statsd flags to fs.
func statsdFlags(fs *flag.FlagSet, o *statsdOptions) {
	fs.StringVar(&o.StatsdAddr, "statsd-addr", "", "send envoyproxy/ratelimit's stats (ratelimit.service.rate_limit.<domain>.<key…>.total_hits and others, docs/operations.md) to this statsd server, host:port (empty: off)")
	fs.StringVar(&o.StatsdProtocol, "statsd-protocol", DefaultStatsdProtocol, "statsd transport: tcp (as envoyproxy/ratelimit) or udp")
	fs.StringVar(&o.StatsdExtraTags, "statsd-extra-tags", "", "tags added to every stat name as .__key=value suffixes: key:value pairs, comma-separated (envoyproxy/ratelimit's EXTRA_TAGS)")
	fs.DurationVar(&o.StatsdFlushInterval, "statsd-flush-interval", DefaultStatsdFlushInterval, "how often the counters are sent to statsd")
	fs.StringVar(&o.NearLimitRatio, "near-limit-ratio", DefaultNearLimitRatio, "statsd near_limit: an allowed hit that takes a limit's usage above floor(limit × ratio) counts near_limit; 0 < ratio ≤ 1")
}

// statsdAccepts says what each statsd flag takes, as errors put it after
// "must be". Read only.
var statsdAccepts = map[string]string{
	"statsd-addr":           "host:port, or empty for no statsd",
	"statsd-protocol":       "tcp or udp",
	"statsd-extra-tags":     "key:value pairs separated by commas",
	"statsd-flush-interval": "a positive duration such as 10s",
	"near-limit-ratio":      "a number greater than 0 and at most 1, such as 0.8",
}

// check validates the statsd flags, one error per refused value.
func (o *statsdOptions) check(given map[string]given) error {
	r := refusals{given: given, accepts: statsdAccepts}
	bad := r.check
	if o.StatsdAddr != "" {
		host, port, err := net.SplitHostPort(o.StatsdAddr)
		p, perr := strconv.Atoi(port)
		bad("statsd-addr", err == nil && host != "" && perr == nil && p > 0 && p < 65536)
	}
	bad("statsd-protocol", o.StatsdProtocol == "tcp" || o.StatsdProtocol == "udp")
	_, err := statsd.ParseTags(o.StatsdExtraTags)
	bad("statsd-extra-tags", err == nil)
	bad("statsd-flush-interval", o.StatsdFlushInterval > 0)
	_, ok := o.nearLimitRatio()
	bad("near-limit-ratio", ok)
	return r.err()
}

// nearLimitRatio parses --near-limit-ratio.
func (o *statsdOptions) nearLimitRatio() (float64, bool) {
	r, err := strconv.ParseFloat(o.NearLimitRatio, 64)
	return r, err == nil && r > 0 && r <= 1
}

// startStatsd starts the statsd sink when --statsd-addr is set: it returns
// the observer to give the rls server (nil when off) and the function that
// sends the last counts and stops it.
func (s *server) startStatsd() (rls.Observer, func(), error) {
	o := &s.opts.statsdOptions
	tags, _ := statsd.ParseTags(o.StatsdExtraTags) // checked by check
	ratio, _ := o.nearLimitRatio()
	return observe.StartStatsd(statsd.Config{
		Addr:           o.StatsdAddr,
		Protocol:       o.StatsdProtocol,
		Tags:           tags,
		FlushInterval:  o.StatsdFlushInterval,
		NearLimitRatio: ratio,
		Logger:         s.log,
	})
}
