package statsd

import (
	"flag"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// DefaultProtocol is --statsd-protocol's default, the reference's.
const DefaultProtocol = "tcp"

// Flags are the statsd sink's settings on the serve command: the
// --statsd-* flags and --near-limit-ratio (options.Group). The ratio and
// the tags are kept as given and parsed by Check.
type Flags struct {
	Addr           string
	Protocol       string
	ExtraTags      string
	FlushInterval  time.Duration
	NearLimitRatio string
}

// flagAccepts says what each flag takes, as errors put it after "must be".
// Read only.
var flagAccepts = map[string]string{
	"statsd-addr":           "host:port, or empty for no statsd",
	"statsd-protocol":       "tcp or udp",
	"statsd-extra-tags":     "key:value pairs separated by commas",
	"statsd-flush-interval": "a positive duration such as 10s",
	"near-limit-ratio":      "a number greater than 0 and at most 1, such as 0.8",
}

// Define defines the flags on fs.
func (f *Flags) Define(fs *flag.FlagSet) map[string]string {
	fs.StringVar(&f.Addr, "statsd-addr", "", "send envoyproxy/ratelimit's stats (ratelimit.service.rate_limit.<domain>.<key…>.total_hits and others, docs/observe.md) to this statsd server, host:port (empty: off)")
	fs.StringVar(&f.Protocol, "statsd-protocol", DefaultProtocol, "statsd transport: tcp (as envoyproxy/ratelimit) or udp")
	fs.StringVar(&f.ExtraTags, "statsd-extra-tags", "", "tags added to every stat name as .__key=value suffixes: key:value pairs, comma-separated (envoyproxy/ratelimit's EXTRA_TAGS)")
	fs.DurationVar(&f.FlushInterval, "statsd-flush-interval", DefaultFlushInterval, "how often the counters are sent to statsd")
	fs.StringVar(&f.NearLimitRatio, "near-limit-ratio", strconv.FormatFloat(DefaultNearLimitRatio, 'g', -1, 64), "near_limit of statsd and --reference-metrics-addr: an allowed hit that takes a limit's usage above floor(limit × ratio) counts near_limit; 0 < ratio ≤ 1")
	return nil
}

// Check refuses the values New would, one error each.
func (f *Flags) Check(check func(string, bool, string), _ func(string) string) {
	bad := func(name string, ok bool) { check(name, ok, "must be "+flagAccepts[name]) }
	if f.Addr != "" {
		host, port, err := net.SplitHostPort(f.Addr)
		p, perr := strconv.Atoi(port)
		bad("statsd-addr", err == nil && host != "" && perr == nil && p > 0 && p < 65536)
	}
	bad("statsd-protocol", f.Protocol == "tcp" || f.Protocol == "udp")
	_, err := parseTags(f.ExtraTags)
	bad("statsd-extra-tags", err == nil)
	bad("statsd-flush-interval", f.FlushInterval > 0)
	_, ok := f.Ratio()
	bad("near-limit-ratio", ok)
}

// Ratio is --near-limit-ratio, and whether it is one.
func (f *Flags) Ratio() (float64, bool) {
	r, err := strconv.ParseFloat(f.NearLimitRatio, 64)
	return r, err == nil && r > 0 && r <= 1
}

// Start starts the sink of the checked f: it returns the observer to give
// the rls server and the function that sends the last counts and stops
// it; a nil observer and nothing to stop when --statsd-addr is empty.
func Start(f *Flags, log *zap.Logger) (rls.Observer, func(), error) {
	if f.Addr == "" {
		return nil, func() {}, nil
	}
	tags, _ := parseTags(f.ExtraTags) // checked by Check
	ratio, _ := f.Ratio()
	sink, err := New(Config{Addr: f.Addr, Protocol: f.Protocol, Tags: tags, FlushInterval: f.FlushInterval, NearLimitRatio: ratio, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("statsd: %w", err)
	}
	go sink.Run()
	log.Info("sending stats to statsd",
		zap.String("addr", f.Addr),
		zap.String("protocol", f.Protocol),
		zap.Duration("flush_interval", f.FlushInterval),
		zap.Float64("near_limit_ratio", ratio),
		zap.Int("extra_tags", len(tags)))
	return sink, sink.Stop, nil
}
