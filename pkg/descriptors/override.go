package descriptors

import (
	"encoding/binary"
	"strings"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// overrideCacheSize bounds the override rules a snapshot keeps. Past it,
// Override still answers, building the rule for each call.
const overrideCacheSize = 1024

// maxOverrideKey bounds the cache key of one override; longer descriptors
// are answered without caching.
const maxOverrideKey = 1024

type overrideCache struct {
	mu sync.RWMutex
	m  map[string]*Rule
}

// Override answers a descriptor that carries its own limit (the reference's
// RateLimitOverride): for a known domain, a fixed window of requestsPerUnit
// per unit × multiplier (0 counts as 1), keyed by all the descriptor's entries, never in shadow mode. It
// returns false when the domain is unknown, the unit is not valid or there
// are no entries.
//
// The policy ID is derived from the domain, the unit and the entry keys
// (never the values), so overrides of one descriptor with different numbers
// share a counter, as in the reference. Every override policy of a domain
// has the group (limiter.PolicySpec.Group) "<domain>:override": the keys are
// request data, so stores and metrics see the class, not each policy.
func (s *Snapshot) Override(domain string, entries []Entry, requestsPerUnit uint32, unit Unit, multiplier uint32) (Match, bool) {
	multiplier = max(multiplier, 1)
	if s == nil || len(entries) == 0 || unit.Duration() == 0 {
		return Match{}, false
	}
	if _, ok := s.domains[domain]; !ok {
		return Match{}, false
	}
	var kb [256]byte
	key := overrideKey(kb[:0], domain, entries, requestsPerUnit, unit, multiplier)
	var r *Rule
	if len(key) <= maxOverrideKey {
		s.overrides.mu.RLock()
		r = s.overrides.m[string(key)]
		s.overrides.mu.RUnlock()
	}
	if r == nil {
		var err error
		r, err = newOverrideRule(domain, entries, requestsPerUnit, unit, multiplier, s.overrideCharge)
		if err != nil {
			return Match{}, false
		}
		if len(key) <= maxOverrideKey {
			s.overrides.mu.Lock()
			if prev := s.overrides.m[string(key)]; prev != nil {
				r = prev
			} else if len(s.overrides.m) < overrideCacheSize {
				s.overrides.m[string(key)] = r
			}
			s.overrides.mu.Unlock()
		}
	}
	return Match{Rule: r, Subject: s.subject(r.Policy.ID(), entries, nil)}, true
}

func overrideKey(b []byte, domain string, entries []Entry, rpu uint32, unit Unit, multiplier uint32) []byte {
	b = append(b, byte(unit))
	b = binary.BigEndian.AppendUint32(b, multiplier)
	b = binary.BigEndian.AppendUint32(b, rpu)
	b = appendField(b, domain)
	for _, e := range entries {
		b = appendField(b, e.Key)
	}
	return b
}

func newOverrideRule(domain string, entries []Entry, rpu uint32, unit Unit, multiplier uint32, charge limiter.Charge) (*Rule, error) {
	p, err := limiter.NewPolicy(limiter.PolicySpec{
		ID:        overrideID(domain, unit, multiplier, entries),
		Group:     overrideGroup(domain),
		Algorithm: limiter.FixedWindow,
		Params:    limiter.FixedWindowParams{Limit: int64(rpu), Window: unit.Duration() * time.Duration(multiplier)},
		Charge:    charge,
	})
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('/')
		b.WriteString(e.Key)
	}
	b.WriteString(" (override)")
	return &Rule{
		Policy:          p,
		Unit:            unit,
		UnitMultiplier:  multiplier,
		RequestsPerUnit: rpu,
		Path:            b.String(),
		Domain:          domain,
	}, nil
}
