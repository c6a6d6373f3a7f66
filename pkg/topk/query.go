package topk

import (
	"cmp"
	"slices"
	"time"

	"github.com/axiomhq/hyperloglog"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Filter selects policies: an empty field matches every value.
type Filter struct {
	Domain, Policy, Key string
}

func (f Filter) match(p *policy) bool {
	return (f.Domain == "" || f.Domain == p.key.Domain) &&
		(f.Policy == "" || f.Policy == p.key.Policy) &&
		(f.Key == "" || f.Key == p.dkey)
}

// By orders a Top answer.
type By int

const (
	// ByHits ranks subjects by hits (cost-weighted).
	ByHits By = iota
	// ByDenied ranks subjects by denials.
	ByDenied
)

// entry is one subject of a Top answer. Hits and Denied are estimates over
// the answer's period: Hits is at most HitsError above the subject's true
// hits and never below them; Denied is at most DeniedError above its true
// denials (for ByHits answers of a subject absent from the denial sketch,
// Denied counts the denials seen while it was monitored, a lower bound).
type entry struct {
	Subject             limiter.SubjectDigest
	Hits, HitsError     int64
	Denied, DeniedError int64
}

// top is one policy's heaviest subjects over [From, now].
type top struct {
	Domain, Policy, Key string
	From                time.Time
	Entries             []entry
}

// Top returns, for every policy f selects, its n heaviest subjects by by,
// in descending order (ties by digest), policies ordered by domain then
// policy. n is capped at Counters.
func (t *Tracker) Top(f Filter, by By, n int) []top {
	n = min(max(n, 0), t.Counters())
	now := t.clock.Now().UnixMilli()
	var out []top
	for _, p := range t.selected(f) {
		var entries []entry
		from := t.eachShard(p, now, func(sh *shard) { entries = appendMerged(entries, sh, by) })
		slices.SortFunc(entries, func(a, b entry) int {
			x, y := a.Hits, b.Hits
			if by == ByDenied {
				x, y = a.Denied, b.Denied
			}
			if c := cmp.Compare(y, x); c != 0 {
				return c
			}
			return slices.Compare(a.Subject[:], b.Subject[:])
		})
		if len(entries) > n {
			entries = entries[:n]
		}
		out = append(out, top{Domain: p.key.Domain, Policy: p.key.Policy, Key: p.dkey, From: from, Entries: entries})
	}
	return out
}

// appendMerged appends the subjects ranked by by in sh's two windows, each
// once, with its counts summed over both windows. The caller holds sh.mu.
func appendMerged(dst []entry, sh *shard, by By) []entry {
	start := len(dst)
	seen := make(map[limiter.SubjectDigest]bool)
	for _, w := range []*window{&sh.cur, &sh.old} {
		ranked := &w.byHits
		if by == ByDenied {
			ranked = &w.byDenied
		}
		for _, c := range ranked.heap {
			if !seen[c.subject] {
				seen[c.subject] = true
				dst = append(dst, entry{Subject: c.subject})
			}
		}
	}
	for i := start; i < len(dst); i++ {
		e := &dst[i]
		for _, w := range []*window{&sh.cur, &sh.old} {
			h, inHits := w.byHits.index.get(short(&e.Subject))
			if inHits {
				e.Hits += w.byHits.heap[h].count
				e.HitsError += w.byHits.heap[h].err
			}
			// The denial sketch counts every denial while it monitors
			// the subject; the hit sketch only those while it does.
			if d, ok := w.byDenied.index.get(short(&e.Subject)); ok {
				e.Denied += w.byDenied.heap[d].count
				e.DeniedError += w.byDenied.heap[d].err
			} else if inHits {
				e.Denied += w.byHits.heap[h].denied
			}
		}
	}
	return dst
}

// usage is one policy's totals.
type usage struct {
	Domain, Policy, Key string
	// Since is when the policy was first observed; the totals count from
	// then.
	Since time.Time
	// Hits (cost-weighted), Decisions, Denials and ShadowDenials since
	// Since.
	Hits, Decisions, Denials, ShadowDenials int64
	// DistinctSubjects estimates the distinct subjects since Since
	// (HyperLogLog, standard error about 1.6%).
	DistinctSubjects uint64
	// Reserved and Used are, for a reserving policy, the units its
	// committed reserves held and the usage its settles reported since
	// Since; both 0 for a policy that has not reserved.
	Reserved, Used int64
	// Recent holds the same counts over the Top period.
	Recent recent
}

// recent is a policy's traffic over [From, now].
type recent struct {
	From                                    time.Time
	Hits, Decisions, Denials, ShadowDenials int64
}

// Usage returns the totals of every policy f selects, ordered by domain
// then policy.
func (t *Tracker) Usage(f Filter) []usage {
	now := t.clock.Now().UnixMilli()
	var out []usage
	for _, p := range t.selected(f) {
		u := usage{Domain: p.key.Domain, Policy: p.key.Policy, Key: p.dkey, Since: p.since}
		distinct, _ := hyperloglog.NewSketch(hllPrecision, true) // a valid precision
		u.Recent.From = t.eachShard(p, now, func(sh *shard) {
			u.Hits += sh.total.hits
			u.Decisions += sh.total.decisions
			u.Denials += sh.total.denials
			u.ShadowDenials += sh.total.shadowDenials
			u.Reserved += sh.total.reserved
			u.Used += sh.total.used
			for _, w := range []*window{&sh.cur, &sh.old} {
				u.Recent.Hits += w.hits
				u.Recent.Decisions += w.decisions
				u.Recent.Denials += w.denials
				u.Recent.ShadowDenials += w.shadowDenials
			}
			_ = distinct.Merge(sh.distinct) // same precision
		})
		u.DistinctSubjects = distinct.Estimate()
		out = append(out, u)
	}
	return out
}

// eachShard calls fn with every shard of p, rotated to now, under the
// shard's lock, and returns when the period the shards' two windows cover
// starts: the older window's start, not before p was first observed.
func (t *Tracker) eachShard(p *policy, now int64, fn func(sh *shard)) time.Time {
	from := int64(-1)
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		t.rotate(sh, now)
		from = sh.old.index * t.windowMs
		fn(sh)
		sh.mu.Unlock()
	}
	return time.UnixMilli(max(from, p.since.UnixMilli()))
}

// selected returns the policies f selects, ordered by domain then policy.
func (t *Tracker) selected(f Filter) []*policy {
	var ps []*policy
	for _, p := range *t.policies.Load() {
		if f.match(p) {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b *policy) int {
		if c := cmp.Compare(a.key.Domain, b.key.Domain); c != 0 {
			return c
		}
		return cmp.Compare(a.key.Policy, b.key.Policy)
	})
	return ps
}
