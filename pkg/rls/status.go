package rls

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// statusKind says how one descriptor is answered.
type statusKind uint8

const (
	statusUnmatched statusKind = iota // OK, no current_limit
	statusReplaced                    // matched but replaced by another matched rule: OK, no current_limit
	statusNegative                    // is_negative_hits: not evaluated, OK
	statusUnlimited                   // OK, limit_remaining at its maximum
	statusNeverFits                   // zero limit or cost above max cost: OVER_LIMIT, store untouched
	statusStore                       // evaluated by the store: outcome in outs[batch]
)

// add appends the limiter request of a matched limit to batch and records
// its index and its role. The request is RoleQuota for a quota_mode rule;
// the role, decided here once for the whole call, is limiter.Request.EffectiveRole,
// which makes a shadow policy (a shadow_mode rule) RoleShadow.
func (ds *descStatus) add(batch *[]limiter.Request) {
	rule := ds.match.Rule
	mode := limiter.RoleOrdinary
	if rule.QuotaMode {
		mode = limiter.RoleQuota
	}
	ds.batch = len(*batch)
	*batch = append(*batch, limiter.Request{Policy: rule.Policy, Subject: ds.match.Subject, Cost: ds.cost, Role: mode, Tag: ds.match.Tag})
	ds.role = (*batch)[ds.batch].EffectiveRole()
}

// descStatus is the status of one descriptor while the call is answered:
// how it is answered (kind) and what the answer needs.
type descStatus struct {
	kind     statusKind
	override bool // matched through a request-supplied limit override
	match    descriptors.Match
	cost     int64
	batch    int
	// Filled while building statuses.
	over      bool         // the limit (or the fail-closed fallback) denies
	blocked   bool         // over because the subject is in the penalty box
	reported  bool         // reported OVER_LIMIT to Envoy
	fellBack  bool         // the store failed and the failure mode answered
	role      limiter.Role // the limit's role in the batch (statusStore and statusNeverFits)
	remaining uint32
	reset     time.Duration
	retry     time.Duration
}

// scratch holds the reusable buffers of one call.
type scratch struct {
	descs   []descStatus
	batch   []limiter.Request // the store's requests, then the never-fits ones
	outs    []limiter.Outcome // one per batch element
	checks  []limiter.Request // the store's requests resent as checks
	entries []descriptors.Entry
	buf     []byte
	local   localBatch
	// storeFailed: a limit of the call was answered by its failure mode.
	storeFailed bool
}

func (s *Server) getScratch(n int) *scratch {
	sc := s.scratch.Get().(*scratch)
	if cap(sc.descs) < n {
		sc.descs = make([]descStatus, n)
	}
	sc.descs = sc.descs[:n]
	sc.batch = sc.batch[:0]
	sc.storeFailed = false
	return sc
}

func (s *Server) putScratch(sc *scratch) {
	// Drop references to rules and policies so that an old snapshot can be
	// collected after a reload.
	clear(sc.descs)
	clear(sc.batch)
	clear(sc.outs)
	clear(sc.checks)
	clear(sc.entries)
	s.scratch.Put(sc)
}

// markReplaced drops every matched rule whose name another matched rule
// lists in its replaces. n <= MaxDescriptors, so the quadratic scan is cheap
// and allocation-free.
func markReplaced(descs []descStatus) {
	for j := range descs {
		rj := descs[j].match.Rule
		if rj == nil || len(rj.Replaces) == 0 || descs[j].kind == statusUnmatched {
			continue
		}
		for _, name := range rj.Replaces {
			if name == "" {
				continue
			}
			for i := range descs {
				ri := descs[i].match.Rule
				if i == j || ri == nil || ri.Name != name {
					continue
				}
				if descs[i].kind == statusStore || descs[i].kind == statusUnlimited {
					descs[i].kind = statusReplaced
				}
			}
		}
	}
}
