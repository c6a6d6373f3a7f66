// Package topk tracks, per rate-limit policy, the subjects with the most
// hits and the most denials over the last minutes, and each policy's usage
// totals, in bounded memory.
//
// A Tracker is fed one Observation per decided limit and answers Top and
// Usage. Subjects are subject digests (HMACs): no raw descriptor value ever
// reaches this package.
//
// Memory is fixed by Config: at most MaxPolicies policies are tracked (the
// observations of further policies are counted in Untracked and otherwise
// dropped); each tracked policy holds Shards shards, each with two windows
// of two space-saving sketches (by hits and by denials) of Counters/Shards
// counters, and a HyperLogLog sketch of precision HLLPrecision. A subject
// always falls in the same shard (by its digest), so the shards partition
// the subjects and their answers merge exactly.
//
// Concurrency: Record takes no lock shared by all calls. It finds the policy
// in a copy-on-write map read with one atomic load, adds to the policy's
// atomic totals, and locks only the subject's shard of that policy. A
// Tracker is safe for concurrent use.
package topk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axiomhq/hyperloglog"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Defaults and bounds of Config.
const (
	defaultCounters    = 128
	defaultMaxPolicies = 256
	defaultWindow      = time.Minute
	// maxCounters bounds Config.Counters.
	maxCounters = 4096
	// maxPolicies bounds Config.MaxPolicies.
	maxPolicies = 65536
	// shards is the number of shards of a policy.
	shards = 4
	// hllPrecision is the precision of the distinct-subject estimate:
	// 2^12 registers per shard, a standard error of about 1.6%.
	hllPrecision = 12
)

// Config configures a Tracker. The zero value takes every default.
type Config struct {
	// Counters is the number of subjects a policy's sketch monitors, per
	// ranking (by hits, by denials) and per window; rounded up to a
	// multiple of Shards. (Optional, default DefaultCounters)
	Counters int
	// MaxPolicies caps the policies tracked. (Optional, default
	// DefaultMaxPolicies)
	MaxPolicies int
	// Window is the length of one of the two rotating windows: an answer
	// covers the current window and the one before it, so between Window
	// and twice Window of the most recent traffic. (Optional, default
	// DefaultWindow)
	Window time.Duration
	// Clock reads the time. (Optional, default the system clock)
	Clock limiter.Clock
}

// key names one tracked policy: configured strings only.
type key struct {
	Domain, Policy string
}

// Observation is one decided limit.
type Observation struct {
	// Domain and Policy are the configured domain and policy ID; Key is
	// the descriptor key of the matched rule (configured too).
	Domain, Policy, Key string
	// Subject is the limit's subject digest.
	Subject limiter.SubjectDigest
	// Hits is the decision's cost (0 for a probe).
	Hits int64
	// Denied: the limit denied (not in shadow mode). ShadowDenied: a
	// shadow-mode limit was over.
	Denied, ShadowDenied bool
	// Reserved is the units a committed reserve of a reserving policy
	// holds. Settle marks the settle of a reservation, which is no
	// decision: only its Used (the usage it reports) is counted.
	Reserved, Used int64
	Settle         bool
}

// Tracker holds the sketches. Build it with New.
type Tracker struct {
	clock       limiter.Clock
	counters    int // per shard
	maxPolicies int
	windowMs    int64

	policies  atomic.Pointer[map[key]*policy]
	mu        sync.Mutex // serialises additions to policies
	untracked atomic.Uint64
}

// policy is the state of one tracked policy.
type policy struct {
	key   key
	dkey  string
	since time.Time

	shards [shards]shard
}

// shard holds the subjects of one part of the digest space.
type shard struct {
	mu sync.Mutex
	// total counts the shard's subjects since the policy was first
	// observed: kept here, under the lock Record takes anyway, rather
	// than in atomics of the policy that every call would share.
	total    counts
	cur, old window
	distinct *hyperloglog.Sketch
	_        [64]byte // keep shards on separate cache lines
}

// counts are the traffic of a period.
type counts struct {
	hits, decisions, denials, shadowDenials int64
	reserved, used                          int64
}

// add counts one observation.
func (c *counts) add(o *Observation) {
	c.reserved += o.Reserved
	c.used += o.Used
	if o.Settle {
		return
	}
	c.hits += o.Hits
	c.decisions++
	if o.Denied {
		c.denials++
	}
	if o.ShadowDenied {
		c.shadowDenials++
	}
}

// window is one period of Window.
type window struct {
	index int64 // unix ms / Window
	counts
	byHits, byDenied spaceSaving
}

// New validates cfg and returns a Tracker.
func New(cfg Config) (*Tracker, error) {
	switch {
	case cfg.Counters < 0 || cfg.Counters > maxCounters:
		return nil, fmt.Errorf("topk: counters %d is not between 1 and %d", cfg.Counters, maxCounters)
	case cfg.MaxPolicies < 0 || cfg.MaxPolicies > maxPolicies:
		return nil, fmt.Errorf("topk: max policies %d is not between 1 and %d", cfg.MaxPolicies, maxPolicies)
	case cfg.Window < 0 || cfg.Window > 0 && cfg.Window < time.Second:
		return nil, errors.New("topk: the window must be at least 1s")
	}
	if cfg.Counters == 0 {
		cfg.Counters = defaultCounters
	}
	if cfg.MaxPolicies == 0 {
		cfg.MaxPolicies = defaultMaxPolicies
	}
	if cfg.Window == 0 {
		cfg.Window = defaultWindow
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	t := &Tracker{
		clock:       cfg.Clock,
		counters:    (cfg.Counters + shards - 1) / shards,
		maxPolicies: cfg.MaxPolicies,
		windowMs:    cfg.Window.Milliseconds(),
	}
	empty := map[key]*policy{}
	t.policies.Store(&empty)
	return t, nil
}

// Window returns the length of one window.
func (t *Tracker) Window() time.Duration { return time.Duration(t.windowMs) * time.Millisecond }

// Counters returns the subjects monitored per policy, ranking and window.
func (t *Tracker) Counters() int { return t.counters * shards }

// Untracked returns how many observations were dropped because
// MaxPolicies policies were already tracked.
func (t *Tracker) Untracked() uint64 { return t.untracked.Load() }

// Record adds one observation.
func (t *Tracker) Record(o Observation) {
	p := (*t.policies.Load())[key{o.Domain, o.Policy}]
	if p == nil {
		if p = t.add(o); p == nil {
			t.untracked.Add(1)
			return
		}
	}
	sh := &p.shards[shardOf(&o.Subject)]
	now := t.clock.Now().UnixMilli()
	sh.mu.Lock()
	t.rotate(sh, now)
	sh.total.add(&o)
	w := &sh.cur
	w.counts.add(&o)
	if o.Hits > 0 {
		w.byHits.add(&o.Subject, o.Hits, o.Denied)
	}
	if o.Denied {
		w.byDenied.add(&o.Subject, 1, true)
	}
	sh.distinct.InsertHash(binary.LittleEndian.Uint64(o.Subject[8:16]))
	sh.mu.Unlock()
}

// shardOf places a subject: digests are HMAC outputs, so their bytes are
// uniform.
func shardOf(s *limiter.SubjectDigest) int { return int(s[0]) % shards }

// add starts tracking o's policy, or returns nil when MaxPolicies are
// tracked.
func (t *Tracker) add(o Observation) *policy {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := *t.policies.Load()
	k := key{o.Domain, o.Policy}
	if p := cur[k]; p != nil {
		return p
	}
	if len(cur) >= t.maxPolicies {
		return nil
	}
	p := &policy{key: k, dkey: o.Key, since: t.clock.Now()}
	for i := range p.shards {
		sh := &p.shards[i]
		sh.cur = window{byHits: newSpaceSaving(t.counters), byDenied: newSpaceSaving(t.counters)}
		sh.old = window{byHits: newSpaceSaving(t.counters), byDenied: newSpaceSaving(t.counters)}
		sh.distinct, _ = hyperloglog.NewSketch(hllPrecision, true) // a valid precision
	}
	next := make(map[key]*policy, len(cur)+1)
	for kk, v := range cur {
		next[kk] = v
	}
	next[k] = p
	t.policies.Store(&next)
	return p
}

// rotate moves sh's windows to the one holding now (unix ms). The caller
// holds sh.mu.
func (t *Tracker) rotate(sh *shard, now int64) {
	idx := now / t.windowMs
	switch {
	case idx <= sh.cur.index:
		// The current window (or a clock step back: stay in it).
	case idx == sh.cur.index+1:
		sh.cur, sh.old = sh.old, sh.cur
		sh.cur.clear(idx)
	default:
		sh.cur.clear(idx)
		sh.old.clear(idx - 1)
	}
}

func (w *window) clear(idx int64) {
	w.index = idx
	w.counts = counts{}
	w.byHits.reset()
	w.byDenied.reset()
}
