package rlqs

import (
	"context"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Demand is one aggregate's demands in an exchange: the rates (mrps,
// unknownDemand for a proxy that reported once) this replica's proxies
// want of one limit's subject, and the other replicas'.
type Demand struct {
	Policy  *limiter.Policy
	Subject limiter.SubjectDigest
	Tag     limiter.Tag
	// Mine are this replica's proxies' demands.
	Mine []int64
	// Others receives the demands the other live replicas published.
	Others []int64
}

// Exchange shares demands among the replicas that serve RLQS on one
// store, so that each divides a limit among every proxy reporting it.
type Exchange interface {
	// Swap publishes Mine of each Demand of batch for this replica, to
	// live for a few ticks, and sets each one's Others to what the other
	// replicas published and have not let expire. On an error, Others
	// are left empty: each replica then divides among its own proxies.
	Swap(ctx context.Context, batch []Demand) error
}

// alone is the Exchange of a replica with no other: it has nothing to
// share.
type alone struct{}

func (alone) Swap(context.Context, []Demand) error { return nil }
