package rls

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// DefaultMaxOverridePolicies bounds the override policies of a domain
// (Config.MaxOverridePolicies): an override policy is one key list and
// window of a descriptor that carries its own limit, so a deployment has as
// many as its Envoy configuration has rate-limit actions with a limit
// override, usually a handful; the default leaves room for large
// configurations while keeping what a client that names new keys at will
// can create small (docs/config.md, Overrides).
const DefaultMaxOverridePolicies = 256

// MaxOverridePoliciesBound is the largest Config.MaxOverridePolicies.
const MaxOverridePoliciesBound = 65536

// minOverrideRetry is the least retry hint of a refused override.
const minOverrideRetry = time.Second

// overrideCap keeps the override policies of each domain that may hold
// state, at most max a domain (see Config.MaxOverridePolicies). A policy is
// tracked from its first use until its state is gone for certain: its last
// use plus its window and cleanup grace (a fixed window's state expires at
// its window's end plus the grace). The policies whose time has passed are
// dropped when a new one arrives after the earliest such time, one pass
// over the domain's set (at most one per passing of that time). Domains are
// configured ones: an override of an unknown domain is never matched. Safe
// for concurrent use.
type overrideCap struct {
	max     int
	metrics *Metrics

	mu      sync.RWMutex
	domains map[string]*overrideSet
}

// overrideSet is the tracked override policies of one domain.
type overrideSet struct {
	domain string // a copy that holds no request buffer

	// live holds, by policy ID, the time (Unix ms) after which the
	// policy's state is gone; raised (atomically, under the read lock) at
	// each use.
	live map[string]*atomic.Int64
	// soonest is at most the earliest of the live times: until then no
	// policy can be dropped.
	soonest int64
}

func newOverrideCap(limit int, m *Metrics) *overrideCap {
	return &overrideCap{max: limit, metrics: m, domains: make(map[string]*overrideSet)}
}

// admit reports whether the override policy p of domain may be used at
// nowMs: it is tracked already, or there is room to track it. When it is
// refused, wait is how long until the earliest tracked policy of the
// domain is dropped (at least a second).
func (c *overrideCap) admit(domain string, p *limiter.Policy, nowMs int64) (ok bool, wait time.Duration) {
	until := nowMs + p.WindowMillis() + p.CleanupGraceMillis()
	c.mu.RLock()
	if set := c.domains[domain]; set != nil {
		if v := set.live[p.ID()]; v != nil {
			raise(v, until)
			c.mu.RUnlock()
			return true, 0
		}
	}
	c.mu.RUnlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.domains[domain]
	if set == nil {
		// Copy the string: domain may point into a request buffer.
		set = &overrideSet{domain: string([]byte(domain)), live: make(map[string]*atomic.Int64), soonest: math.MaxInt64}
		c.domains[set.domain] = set
	}
	if v := set.live[p.ID()]; v != nil {
		raise(v, until)
		return true, 0
	}
	if nowMs > set.soonest {
		set.dropPassed(nowMs)
		c.metrics.overridePolicies(set.domain, len(set.live))
	}
	if len(set.live) >= c.max {
		c.metrics.overrideRefused(set.domain)
		return false, max(minOverrideRetry, time.Duration(set.soonest-nowMs)*time.Millisecond)
	}
	v := new(atomic.Int64)
	v.Store(until)
	set.live[p.ID()] = v
	set.soonest = min(set.soonest, until)
	c.metrics.overridePolicies(set.domain, len(set.live))
	return true, 0
}

// dropPassed drops the policies whose state is gone at nowMs and makes
// soonest exact. Called with the write lock held.
func (set *overrideSet) dropPassed(nowMs int64) {
	set.soonest = math.MaxInt64
	for id, v := range set.live {
		if until := v.Load(); nowMs > until {
			delete(set.live, id)
		} else {
			set.soonest = min(set.soonest, until)
		}
	}
}

// raise sets v to until if that is later.
func raise(v *atomic.Int64, until int64) {
	for {
		cur := v.Load()
		if until <= cur || v.CompareAndSwap(cur, until) {
			return
		}
	}
}
