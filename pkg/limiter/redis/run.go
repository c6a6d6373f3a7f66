package redis

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// run sends one group's batch program and fills g.outs. The call runs in
// the caller's goroutine: rueidis returns by ctx's deadline (the command
// then is Indeterminate). It reports whether every command it built has
// been answered (so g's buffers are free again).
func (s *Store) run(ctx context.Context, batch []limiter.Request, roles []limiter.Role, keys []string, g *group) bool {
	if s.tracer != nil {
		return s.runTraced(ctx, batch, roles, keys, g)
	}
	return s.runProgram(ctx, batch, roles, keys, g)
}

// runProgram is run without a span.
func (s *Store) runProgram(ctx context.Context, batch []limiter.Request, roles []limiter.Role, keys []string, g *group) (done bool) {
	n := len(g.idx)
	g.outs = grow(g.outs, n)
	g.replies = grow(g.replies, n)
	g.gk = grow(g.gk, n)
	g.policies = grow(g.policies, n)
	abuf := g.abuf[:0]
	for k, i := range g.idx {
		r := &batch[i]
		g.gk[k] = keys[i]
		g.policies[k] = r.Policy
		abuf = lua.AppendBatchPacked(abuf, r.Policy, r.Cost, roles[i])
	}
	// The deadline in Redis's clock, when the offset is known: a program
	// that runs after the caller has given up commits nothing.
	off := &s.offsets[0]
	if s.cluster {
		off = &s.offsets[g.slot]
	}
	var dlEnd int
	if dl, ok := ctx.Deadline(); ok {
		if ms, ok := off.redisDeadline(s.local.ms(dl)); ok {
			abuf = lua.AppendBatchDeadline(abuf, ms)
			dlEnd = len(abuf)
		}
	}
	g.abuf = abuf
	args := g.args[:0]
	for k, i := range g.idx {
		p := abuf[k*lua.BatchPacked : (k+1)*lua.BatchPacked]
		args = append(args, batch[i].Policy.ID(), unsafe.String(&p[0], len(p)))
	}
	if dlEnd > 0 {
		start := n * lua.BatchPacked
		args = append(args, unsafe.String(&abuf[start], dlEnd-start))
	}
	g.args = args
	if err := ctx.Err(); err != nil {
		for k, i := range g.idx {
			g.outs[k] = limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("redis store: policy %s: not sent: %w", batch[i].Policy.ID(), err))
		}
		return true
	}
	res := batchScript.Exec(ctx, s.client, g.gk, args)
	err := res.Error()
	done = err == nil
	if err == nil {
		var msgs []rueidis.RedisMessage
		msgs, err = res.ToArray()
		if err != nil {
			err = fmt.Errorf("%w: reply is not an array: %w", lua.ErrMalformedReply, err)
		} else {
			g.vals = replyValues(g.vals, msgs)
			g.committed, err = lua.ParseBatchReply(g.policies, g.vals, g.replies)
			if err == nil {
				off.sample(s.local.ms(time.Now()), g.replies[0].ServerNowMs)
			} else if expired, ok := err.(*lua.ExpiredError); ok {
				off.sample(s.local.ms(time.Now()), expired.ServerNowMs)
			}
		}
	}
	if err != nil {
		g.committed = false
		for k, i := range g.idx {
			p := batch[i].Policy
			if errors.Is(err, lua.ErrExpired) {
				// Known not committed, like a call not sent in time.
				g.outs[k] = limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("redis store: policy %s: %w", p.ID(), err))
			} else if errors.Is(err, lua.ErrMalformedReply) {
				g.outs[k] = limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("redis store: policy %s: %w", p.ID(), err))
			} else {
				g.outs[k] = classify(p, err)
			}
		}
		return done
	}
	g.answered = true
	for k, i := range g.idx {
		g.outs[k] = limiter.OutcomeFromReply(batch[i].Policy, g.replies[k], limiter.SourceRedis)
	}
	return true
}

// replyValues converts the batch program's reply into the values
// lua.ParseBatchReply reads, reusing vals.
func replyValues(vals []lua.Value, msgs []rueidis.RedisMessage) []lua.Value {
	vals = grow(vals, len(msgs))
	for j := range msgs {
		m := &msgs[j]
		vals[j] = lua.Value{}
		if m.IsInt64() {
			vals[j].Int, _ = m.ToInt64()
			vals[j].IsInt = true
		} else if v, err := m.ToString(); err == nil {
			vals[j].Str = v
		} else {
			vals[j].Str = "\x00not a string" // ParseBatchReply refuses it
		}
	}
	return vals
}

// finish turns a group's outcomes into the batch's: an allowed request
// consumed when consumed is true and it was not a check; otherwise it is
// reported before its cost.
func (s *Store) finish(batch []limiter.Request, roles []limiter.Role, out []limiter.Outcome, g *group, consumed bool) {
	for k, i := range g.idx {
		o := g.outs[k]
		if o.Kind == limiter.Evaluated && o.Decision.Allowed {
			if consumed && roles[i].Consumes() {
				o.Decision.Consumed = true
			} else if g.committed && roles[i].Consumes() {
				// Taken, then given back: report it before its cost. (The
				// reset point stays the one after the cost: later or equal,
				// never earlier than the truth.)
				o.Decision.Remaining = min(o.Decision.Remaining+batch[i].Cost, o.Decision.Limit)
			}
		}
		out[i] = o
	}
}
