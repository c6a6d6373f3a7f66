package redis

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// runScratch is the working memory of one group run: the command's keys
// and arguments (strings that point into abuf and into the calls' key
// buffers, see scratch). It goes back to the pool only when the command
// was answered.
type runScratch struct {
	keys, args []string
	abuf, hdr  []byte
}

// runGroup sends one run of the rate program for the groups gs (taken from
// c's queue, in order) and gives each its outcomes, then signals it. A
// group whose call has left gets them all the same, and resolves its
// late answer with them (see await).
func (s *Store) runGroup(gs []*group) {
	if s.metrics != nil {
		s.metrics.observe(gs)
	}
	if s.tracer != nil {
		s.runTraced(gs)
	} else {
		s.runProgram(gs[0].ctx, gs)
	}
	for _, g := range gs {
		if !g.state.CompareAndSwap(groupTaken, groupFinished) {
			// groupAbandoned: await set g.late before.
			g.late.Resolve(g.outs)
		}
		g.done <- struct{}{}
	}
}

// runProgram is runGroup's program run, without a span; first is the
// context of the first call (or of a span made for the run).
func (s *Store) runProgram(first context.Context, gs []*group) {
	rs, _ := s.runs.Get().(*runScratch)
	if rs == nil {
		rs = new(runScratch)
	}
	// The deadline in Redis's clock, when the offset is known: a program
	// that runs a call after its caller has given up commits nothing for
	// it.
	off := &s.offsets[0]
	if s.cluster {
		off = &s.offsets[gs[0].slot]
	}
	keys, args, abuf, hdr := rs.keys[:0], rs.args[:0], rs.abuf[:0], rs.hdr[:0]
	var latest time.Time
	calNow := int64(-1)
	charges := false
	for _, g := range gs {
		n := len(g.idx)
		g.outs = grow(g.outs, n)
		g.replies = grow(g.replies, n)
		for k, i := range g.idx {
			keys = append(keys, g.keys[i])
			p := g.policies[k]
			abuf = lua.AppendRequestPacked(abuf, p, g.costs[k], g.roles[i], g.leases[k], g.ats[k], s.calendarNow(off, &calNow, p))
			r := limiter.Request{Policy: p, Role: g.roles[i], Lease: g.leases[k]}
			charges = charges || r.Charges()
		}
		var dlMs int64
		if dl, ok := g.ctx.Deadline(); ok {
			if ms, ok := off.redisDeadline(s.local.ms(dl)); ok {
				dlMs = ms
			}
			if dl.After(latest) {
				latest = dl
			}
		}
		hdr = lua.AppendGroupEntry(hdr, n, dlMs)
	}
	// abuf may have moved while it grew: the strings point into it once
	// it is complete.
	pos := 0
	for _, g := range gs {
		for k := range g.idx {
			n := lua.BatchPackedLen(g.policies[k])
			p := abuf[pos : pos+n]
			args = append(args, unsafe.String(&p[0], len(p)))
			pos += n
		}
	}
	args = append(args, unsafe.String(&hdr[0], len(hdr)))
	rs.keys, rs.args, rs.abuf, rs.hdr = keys, args, abuf, hdr

	// One call alone is sent under its own context; a group under the
	// latest of its calls' deadlines (each call also waits on its own).
	ctx := first
	var now time.Time
	if len(gs) > 1 || charges {
		now = time.Now()
		if latest.IsZero() {
			// Evaluate gives every call a deadline; this is a bound all the same.
			latest = now.Add(s.timeout)
		}
	}
	if len(gs) > 1 {
		ctx = s.deadlines.Context(context.Background(), now, latest)
	}
	if err := ctx.Err(); err != nil {
		answerNotSent(gs, err)
		s.putRun(rs)
		return
	}
	// A run that carries a charge (limiter.Request.Charges), once sent,
	// waits for its answer past its calls' deadlines, as long as the
	// connection waits for one (answerWait): its caller cannot send the
	// charge again, and learns from the late answer whether its program
	// applied it (await), so that an answer Redis was late to write is not
	// taken for a lost one. Other runs end at their calls' deadline, so
	// that the calls queued behind them are sent.
	if charges {
		wait := context.Background()
		if s.tracer != nil {
			wait = context.WithoutCancel(ctx) // the run's span
		}
		ctx = s.deadlines.Context(wait, now, latest.Add(s.answerWait))
	}
	res := s.execBatch(ctx, keys, args)
	err := res.Error()
	var msgs []rueidis.RedisMessage
	if err == nil {
		msgs, err = res.ToArray()
		if err != nil {
			err = fmt.Errorf("%w: reply is not an array: %w", lua.ErrMalformedReply, err)
		} else if len(msgs) != len(gs) {
			err = fmt.Errorf("%w: %d replies for a group of %d calls", lua.ErrMalformedReply, len(msgs), len(gs))
		}
	}
	if err != nil {
		// The whole run failed: every call of it alike.
		answered := res.Error() == nil
		for _, g := range gs {
			g.committed, g.free = false, answered
			for k := range g.idx {
				g.outs[k] = failedOutcome(g.policies[k], err)
			}
		}
		if answered {
			s.putRun(rs)
		}
		return
	}
	answered := s.local.ms(time.Now())
	for j, g := range gs {
		g.free = true
		s.parseCall(off, answered, g, &msgs[j])
	}
	s.putRun(rs)
}

// answerNotSent answers every call of gs whose run was not sent, its context
// having ended (err).
func answerNotSent(gs []*group, err error) {
	for _, g := range gs {
		for k := range g.idx {
			g.outs[k] = limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("redis store: policy %s: not sent: %w", g.policies[k].ID(), err))
		}
		g.committed, g.free = false, true
	}
}

// putRun returns rs to the pool, without references into callers' buffers.
func (s *Store) putRun(rs *runScratch) {
	clear(rs.keys)
	clear(rs.args)
	rs.keys, rs.args, rs.abuf, rs.hdr = rs.keys[:0], rs.args[:0], rs.abuf[:0], rs.hdr[:0]
	s.runs.Put(rs)
}

// parseCall reads one call's element of the group's reply into g.
func (s *Store) parseCall(off *clockOffset, now int64, g *group, m *rueidis.RedisMessage) {
	vals, err := m.ToArray()
	if err != nil {
		err = fmt.Errorf("%w: a call's reply is not an array: %w", lua.ErrMalformedReply, err)
	} else {
		g.vals = replyValues(g.vals, vals)
		g.committed, err = lua.ParseBatchReplyV2(g.policies, g.vals, g.replies)
		if err == nil {
			off.sample(now, g.replies[0].ServerNowMs)
		} else if expired, ok := err.(*lua.ExpiredError); ok {
			off.sample(now, expired.ServerNowMs)
		}
	}
	if err != nil {
		g.committed = false
		for k := range g.idx {
			g.outs[k] = failedOutcome(g.policies[k], err)
		}
		return
	}
	g.answered = true
	for k := range g.idx {
		g.outs[k] = algorithm.OutcomeFromReply(g.policies[k], g.replies[k], limiter.SourceRedis)
	}
}

// failedOutcome is the outcome of a request of a call that got no
// decision: expired (known not committed), a malformed reply, a request
// that failed in the program, or the run's error.
func failedOutcome(p *limiter.Policy, err error) limiter.Outcome {
	var failed *lua.FailedError
	switch {
	case errors.Is(err, lua.ErrExpired):
		return limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("redis store: policy %s: %w", p.ID(), err))
	case errors.Is(err, lua.ErrMalformedReply):
		return limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("redis store: policy %s: %w", p.ID(), err))
	case errors.As(err, &failed):
		return classifyText(p, failed.Msg, err)
	}
	return classify(p, err)
}

// replyValues converts the batch program's reply into the values
// lua.ParseBatchReplyV2 reads, reusing vals.
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
			vals[j].Str = "\x00not a string" // ParseBatchReplyV2 refuses it
		}
	}
	return vals
}

// finish turns a group's outcomes into the batch's: an allowed request
// consumed when consumed is true and it was not a check; otherwise it is
// reported before its cost. A charge consumed whatever it answered; a
// reserve its slot committed holds its reservation (never refunded).
func (s *Store) finish(batch []limiter.Request, roles []limiter.Role, out []limiter.Outcome, g *group, consumed bool) {
	for k, i := range g.idx {
		o := g.outs[k]
		if o.Kind == limiter.Evaluated && batch[i].Charges() && roles[i].Consumes() {
			// Recorded whatever the batch decided (the program writes it).
			o.Decision.Consumed = true
		} else if o.Kind == limiter.Evaluated && !o.Decision.HoldAt.IsZero() {
			o.Decision.Consumed = true
		} else if o.Kind == limiter.Evaluated && o.Decision.Allowed {
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
