package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// demandScript is demand-v1.lua, the exchange of RLQS demands.
var demandScript = newScript(lua.Demand().Source)

// DemandSwap is one aggregate of SwapDemands: one limit's subject.
type DemandSwap struct {
	Policy  *limiter.Policy
	Subject limiter.SubjectDigest
	Tag     limiter.Tag
	// Mine are this replica's demands: at most lua.MaxDemands, none
	// negative.
	Mine []int64
	// Others receives the demands the other live replicas published, in
	// no order.
	Others []int64
}

// SwapDemands publishes each aggregate's Mine under replica's identity (1
// to 64 bytes), to live for ttl (whole ms, at most lua.MaxDemandTTL), and
// sets its Others to what the other replicas published and have not let
// expire: one run of demand-v1.lua per aggregate, on its DemandKey, all
// in one pipeline (on a Cluster, one per node), within ctx's deadline or
// the store's timeout, whichever is sooner. At most lua.MaxDemandReplicas
// replicas share an aggregate: a replica beyond them is refused. An
// aggregate whose run fails keeps Others empty; the error names how many
// failed and the first cause.
func (s *Store) SwapDemands(ctx context.Context, replica string, ttl time.Duration, batch []DemandSwap) error {
	if s.closed.Load() {
		return errClosed
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	runs := make([]scriptRun, 0, len(batch))
	at := make([]int, 0, len(batch)) // batch index of each run
	var errs demandErrors
	for i := range batch {
		d := &batch[i]
		d.Others = d.Others[:0]
		if d.Policy == nil {
			errs.add(errors.New("no policy"))
			continue
		}
		args, err := lua.DemandArgs(replica, ttl, d.Mine)
		if err != nil {
			errs.add(err)
			continue
		}
		runs = append(runs, scriptRun{key: string(DemandKey(nil, d.Policy, d.Subject, d.Tag)), args: args})
		at = append(at, i)
	}
	var vals []lua.Value
	for j, r := range demandScript.runAll(ctx, s.client, runs) {
		msgs, err := r.ToArray()
		if err != nil {
			errs.add(err)
			continue
		}
		vals = replyValues(vals, msgs)
		d := &batch[at[j]]
		if d.Others, err = lua.ParseDemandReply(vals, d.Others); err != nil {
			errs.add(err)
		}
	}
	if errs.n > 0 {
		return fmt.Errorf("redis store: demands of %d of %d aggregates not exchanged: %w", errs.n, len(batch), errs.first)
	}
	return nil
}

// demandErrors counts the failed aggregates of SwapDemands and keeps the
// first cause: one run's error per aggregate would say the same thing
// thousands of times.
type demandErrors struct {
	n     int
	first error
}

func (e *demandErrors) add(err error) {
	if e.n == 0 {
		e.first = err
	}
	e.n++
}

// SwapDemands is Store.SwapDemands on the connected Store; before the
// connection it fails with the connection's error.
func (c *connector) SwapDemands(ctx context.Context, replica string, ttl time.Duration, batch []DemandSwap) error {
	if st := c.store.Load(); st != nil {
		return st.SwapDemands(ctx, replica, ttl, batch)
	}
	return fmt.Errorf("redis store not connected: %w", *c.cause.Load())
}
