package rlqs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// maxLimit is the largest limit a bucket is assigned from: a charge twin
// records up to twice it, within the stores' exact integers.
const maxLimit = 1 << 51

// checkBucket checks a BucketId a proxy sent and returns its canonical
// key (the map's entries sorted, length-prefixed: the stream's name for
// the bucket; never leaves the stream). The error names bounds, never
// values.
func checkBucket(id *rlqsv3.BucketId) (string, error) {
	m := id.GetBucket()
	switch {
	case len(m) == 0:
		return "", fmt.Errorf("a bucket_id without entries")
	case len(m) > maxEntries:
		return "", fmt.Errorf("a bucket_id of %d entries, above the bound of %d", len(m), maxEntries)
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || len(k) > maxEntryBytes || len(v) > maxEntryBytes {
			return "", fmt.Errorf("a bucket_id entry whose key is empty or whose key or value is over %d bytes", maxEntryBytes)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		v := m[k]
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return b.String(), nil
}

// Refusal returns why RLQS cannot assign quotas for the rule r, "" when
// it can: a quota is a rate a proxy enforces alone, so a limit that
// holds leases (concurrency), reservations or a penalty box, or one too
// large to charge exactly, has none. `validate` shows it; a bucket
// matching such a rule is assigned by the rule's failure mode.
func Refusal(r *descriptors.Rule) string {
	if r == nil || r.Unlimited || r.Policy == nil {
		return ""
	}
	limits := r.Limits
	if len(limits) == 0 {
		limits = []*descriptors.Rule{r}
	}
	for _, l := range limits {
		p := l.Policy
		switch {
		case p == nil:
		case p.Leases():
			return "a concurrency limit counts requests in flight, which a proxy's quota cannot"
		case p.Reserve().On():
			return "a reserve is settled per request, which a proxy's quota cannot"
		case p.Penalty().On():
			return "a penalty box blocks a subject after an offence, which a proxy's quota cannot"
		case p.Limit() > maxLimit:
			return fmt.Sprintf("a limit above %d cannot be charged exactly", int64(maxLimit))
		}
	}
	return ""
}

// chargeTwin is p recording every charge (limiter.ChargeAlways): the
// usage a proxy reports already happened. It keys the same state as p
// (the stores key states by policy ID, revision, algorithm and subject,
// not by how a limit charges), so the RLS path and the reports share one
// budget.
func chargeTwin(p *limiter.Policy) (*limiter.Policy, error) {
	if p.ChargeAlways() {
		return p, nil
	}
	spec := p.Spec()
	spec.Charge = limiter.ChargeAlways
	spec.MaxCost = 0
	twin, err := limiter.NewPolicy(spec)
	if err != nil {
		return nil, fmt.Errorf("rlqs: the charging twin of policy %s: %w", p.ID(), err)
	}
	return twin, nil
}
