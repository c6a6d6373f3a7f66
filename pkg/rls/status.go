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
	statusNeverFits                   // zero limit, cost above max cost, or a refused override: OVER_LIMIT, store untouched
	statusStore                       // evaluated by the store: outcome in outs[batch]
	statusRequestID                   // carries the call's request id (Config.RequestIDKey): OK, never matched
	statusNoLease                     // a release whose marker names no lease of this limit: OK, nothing given back
)

// add appends the limiter request of a matched limit to batch and records
// its index and its role (limiter.RoleOf a quota_mode rule, or of a probe:
// an explicit hits_addend of 0). The role the batch rule applies is
// limiter.Request.EffectiveRole, which makes a shadow policy (a
// shadow_mode rule) RoleShadow, and a probe of one RoleCheck. ds.role is
// how the limit is reported, so a shadow probe is recorded as RoleShadow.
func (ds *descStatus) add(batch *[]limiter.Request) {
	rule := ds.match.Rule
	ds.batch = len(*batch)
	*batch = append(*batch, limiter.Request{Policy: rule.Policy, Subject: ds.match.Subject, Cost: ds.cost,
		Role: limiter.RoleOf(rule.QuotaMode, ds.probe), Tag: ds.match.Tag})
	if ds.release {
		// A release never blocks and is always answered OK. A settle of a
		// reservation keeps its role: it records usage whatever its batch
		// decides (limiter.Request.Charges), and the batch rule never lets
		// it block.
		r := &(*batch)[ds.batch]
		r.Lease, r.LeaseAt, r.LocalLease = limiter.LeaseRelease, ds.leaseAt, ds.localLease
		if !rule.Policy.Reserve().On() {
			r.Role = limiter.RoleCheck
		}
	}
	ds.role = (*batch)[ds.batch].EffectiveRole()
	if ds.probe && ds.role == limiter.RoleCheck {
		ds.role = limiter.RoleShadow
	}
}

// descStatus is the status of one limit of a descriptor while the call is
// answered (one per descriptor, or one per limit of a descriptor with
// rate_limits): how it is answered (kind) and what the answer needs.
type descStatus struct {
	desc     int // the descriptor's index in the request
	kind     statusKind
	override bool // matched through a request-supplied limit override
	match    descriptors.Match
	cost     int64
	probe    bool // an explicit per-descriptor hits_addend of 0 (see hitsFor)
	release  bool // gives back leases of a concurrency limit (matchRelease)
	// marker is a release's marker (matchRelease), and leaseAt and
	// localLease what it names for this limit (markerKeys.leaseOf).
	marker     string
	leaseAt    int64
	localLease bool
	// refusedWait, when not 0, marks an override refused beyond
	// Config.MaxOverridePolicies (statusNeverFits) and is its retry hint.
	refusedWait time.Duration
	batch       int
	// Filled while building statuses.
	over      bool         // the limit (or the fail-closed fallback) denies
	blocked   bool         // over because the subject is in the penalty box
	reported  bool         // reported OVER_LIMIT to Envoy
	result    result       // how it is counted (statusStore and statusNeverFits)
	role      limiter.Role // how the limit is reported (statusStore and statusNeverFits; see add)
	remaining uint32
	reset     time.Duration
	retry     time.Duration
	current   int // index of its current_limit in the response's limits, -1 for none
	// failedOver: the store failed and a failure mode answered; fallback
	// is the mode that answered (limiter.Decision.Fallback): local when
	// the local limiter decided, closed when a local policy's local
	// limiter could not decide either.
	failedOver bool
	fallback   limiter.FailureMode
}

// fellBack reports whether a failure mode answered without knowing the
// limit's state (open or closed): not a decision of the local limiter.
func (ds *descStatus) fellBack() bool { return ds.failedOver && ds.fallback != limiter.FailLocal }

// scratch holds the reusable buffers of one call.
type scratch struct {
	descs   []descStatus      // descriptor order; several per descriptor with rate_limits
	batch   []limiter.Request // the store's requests, then the never-fits ones
	outs    []limiter.Outcome // one per batch element
	pending limiter.Pending   // the store's requests when never-fits ones follow
	entries []descriptors.Entry
	buf     []byte
	// metrics are the children of the call's domain label.
	metrics *domainMetrics
	// storeFailed: a limit of the call was answered by its failure mode.
	storeFailed bool
	// requestID is the value of the call's request id descriptor
	// (Config.RequestIDKey), bounded, or empty.
	requestID string
}

func (s *Server) getScratch() *scratch {
	sc := s.scratch.Get().(*scratch)
	sc.descs = sc.descs[:0]
	sc.batch = sc.batch[:0]
	sc.storeFailed = false
	sc.requestID = ""
	return sc
}

func (s *Server) putScratch(sc *scratch) {
	// Drop references to rules and policies so that an old snapshot can be
	// collected after a reload.
	clear(sc.descs)
	clear(sc.batch)
	clear(sc.outs)
	sc.pending.Release()
	clear(sc.entries)
	sc.metrics = nil
	s.scratch.Put(sc)
}

// markReplaced drops every matched rule whose name another matched rule
// lists in its replaces. n <= MaxDescriptors × MaxLimitsPerDescriptor, so the quadratic scan is cheap
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
