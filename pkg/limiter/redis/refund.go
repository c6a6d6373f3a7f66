package redis

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// refund gives back, per committed group, what its allowed requests took (a
// check, by the role it was sent with, took nothing; a charge keeps what it
// took, and a reserve its reservation, which expires charged at its
// estimate unless its holder settles it).
// It runs detached from ctx (a refund is worth finishing after the caller
// has gone), bounded by the store's Timeout, and waits for it at most until
// ctx is done.
func (s *Store) refund(ctx context.Context, batch []limiter.Request, roles []limiter.Role, keys []string, groups []*group) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	done := make(chan struct{})
	answered := make([]atomic.Bool, len(groups))
	go func() {
		defer close(done)
		defer cancel()
		var wg sync.WaitGroup
		for j, g := range groups {
			var gk, args []string
			var packed, times []byte
			var ends []int
			for k, i := range g.idx {
				d := &g.outs[k].Decision
				// A charge stays recorded (limiter.Request.Charges).
				if g.outs[k].Kind != limiter.Evaluated || !d.Allowed || !roles[i].Consumes() || batch[i].Charges() || batch[i].Reserves() {
					continue
				}
				gk = append(gk, keys[i])
				packed = lua.AppendRefundPacked(packed, batch[i].Policy, batch[i].Cost, g.replies[k].EffectiveNowMs)
				ends = append(ends, len(packed))
				times = lua.AppendRefundTime(times, g.replies[k].EffectiveNowMs)
			}
			if len(gk) == 0 {
				answered[j].Store(true)
				continue
			}
			start := 0
			for _, end := range ends {
				args = append(args, string(packed[start:end]))
				start = end
			}
			args = append(args, string(times))
			wg.Add(1)
			go func() {
				defer wg.Done()
				exec := func(ctx context.Context) error { return refundScript.Exec(ctx, s.client, gk, args).Error() }
				var err error
				if s.tracer != nil {
					err = s.refundTraced(rctx, len(gk), exec)
				} else {
					err = exec(rctx)
				}
				if err == nil {
					answered[j].Store(true)
				}
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	for j, g := range groups {
		g.refunded = answered[j].Load()
	}
}
