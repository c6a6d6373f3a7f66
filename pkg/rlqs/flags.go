package rlqs

import (
	"flag"
	"fmt"
	"time"
)

// Bounds of the flags.
const (
	minTick         = 100 * time.Millisecond
	maxTick         = 10 * time.Second
	maxBucketsBound = 1_000_000
)

// Flags are the --rlqs-* flags of the serve command (a group of its
// options, internal/options).
type Flags struct {
	// On serves RLQS on the gRPC listener.
	On               bool
	Tick             time.Duration
	AssignmentTTL    time.Duration
	AbandonAfter     time.Duration
	BucketsPerStream int
	Aggregates       int
}

// flagAccepts says what each flag takes, as errors put it after "must
// be". Read only.
var flagAccepts = map[string]string{
	"rlqs-tick":                   fmt.Sprintf("a duration from %s to %s", minTick, maxTick),
	"rlqs-assignment-ttl":         fmt.Sprintf("0 (three reporting intervals) or whole seconds from 1s to %s", maxTTL),
	"rlqs-abandon-after":          "a duration of at least 1s",
	"rlqs-max-buckets-per-stream": fmt.Sprintf("an integer between 1 and %d", maxBucketsBound),
	"rlqs-max-aggregates":         fmt.Sprintf("an integer between 1 and %d", maxBucketsBound),
}

// Define defines the flags on fs.
func (f *Flags) Define(fs *flag.FlagSet) map[string]string {
	fs.BoolVar(&f.On, "rlqs", true, "serve Envoy's Rate Limit Quota Service (envoy.service.rate_limit_quota.v3) on the gRPC listener, from the same rules and states as RateLimitService (docs/rlqs.md)")
	fs.DurationVar(&f.Tick, "rlqs-tick", defaultTick, "how often RLQS charges the reported usage and revises the assignments")
	fs.DurationVar(&f.AssignmentTTL, "rlqs-assignment-ttl", 0, "the time to live of every RLQS assignment (whole seconds); 0: three of the proxy's reporting intervals, 2s to 1m")
	fs.DurationVar(&f.AbandonAfter, "rlqs-abandon-after", 5*time.Minute, "tell a proxy to abandon a bucket that saw no request for this long")
	fs.IntVar(&f.BucketsPerStream, "rlqs-max-buckets-per-stream", defaultBucketsPerStream, "the buckets one RLQS stream may subscribe; one more ends the stream (RESOURCE_EXHAUSTED)")
	fs.IntVar(&f.Aggregates, "rlqs-max-aggregates", defaultAggregates, "the (limit, subject) pairs this replica divides; a bucket beyond is answered by its rule's failure mode")
	return nil
}

// Check refuses, one error each, the values New would.
func (f *Flags) Check(check func(string, bool, string), _ func(string) string) {
	bad := func(name string, ok bool) { check(name, ok, "must be "+flagAccepts[name]) }
	bad("rlqs-tick", f.Tick >= minTick && f.Tick <= maxTick)
	bad("rlqs-assignment-ttl", f.AssignmentTTL == 0 || f.AssignmentTTL >= time.Second && f.AssignmentTTL <= maxTTL && f.AssignmentTTL%time.Second == 0)
	bad("rlqs-abandon-after", f.AbandonAfter >= time.Second)
	bad("rlqs-max-buckets-per-stream", f.BucketsPerStream >= 1 && f.BucketsPerStream <= maxBucketsBound)
	bad("rlqs-max-aggregates", f.Aggregates >= 1 && f.Aggregates <= maxBucketsBound)
}

// Config is the part of a Config the flags set.
func (f *Flags) Config() Config {
	return Config{Tick: f.Tick, AssignmentTTL: f.AssignmentTTL, AbandonAfter: f.AbandonAfter,
		Limits: Limits{BucketsPerStream: f.BucketsPerStream, Aggregates: f.Aggregates}}
}
