package redis

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/deadline"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// Group commit. The requests of concurrent Evaluate calls that share a hash
// slot (every request outside a Redis Cluster) go to Redis together, as one
// run of the rate program: Redis pays the fixed cost of a script call (and
// the client that of a command) once per group instead of once per call.
// The program evaluates the calls in arrival order, each all or nothing as
// if it ran alone, so that grouping changes no decision.
//
// Natural batching, no timer: a call that finds fewer than GroupInFlight
// runs of its slot in progress and nobody waiting is sent at once, as a run
// of its own. Otherwise it waits in the slot's queue; a run that ends
// takes what has queued meanwhile (up to GroupMaxKeys keys and
// groupMaxBytes of arguments) as the next group. Under load a group is as
// large as what arrived during the previous run.
//
// Every run goes on in a goroutine of its own while its callers wait for it
// or for their deadline, whichever comes first: the client may block past
// a command's context (rueidis waits for a connection being redialled
// without it), and a caller must still answer by its policy's failure mode
// in time. A call whose deadline passes, or whose caller cancels it, while
// it waits leaves the queue and is Unavailable (limiter.CategoryDeadline):
// never sent. One whose deadline
// passes after its group was taken is Indeterminate and its result, when it
// comes, is ignored: it cannot be counted twice, because nothing is ever
// resent, and the program, which gets each call's deadline in Redis's
// clock, commits nothing for a call it runs after that deadline.

const (
	// DefaultGroupMaxKeys bounds the keys of one group (the limits of all
	// its calls).
	DefaultGroupMaxKeys = 512
	// MaxGroupMaxKeys bounds GroupMaxKeys.
	MaxGroupMaxKeys = 8192
	// DefaultGroupInFlight is how many runs of one slot may be in progress
	// at once: with two, Redis has the next group while the client reads
	// the reply of the previous one.
	DefaultGroupInFlight = 2
	// MaxGroupInFlight bounds GroupInFlight.
	MaxGroupInFlight = 64
	// groupMaxBytes bounds the keys and arguments of one group (a call's
	// limits alone may exceed it: a group holds at least one call).
	groupMaxBytes = 256 << 10
	// groupMaxQueue bounds the calls waiting for one slot; a call beyond it
	// is Unavailable (limiter.CategoryCapacity). The gRPC server's bounds
	// on connections and streams keep the queue far below it.
	groupMaxQueue = 1 << 16
)

// Group states (group.state): waiting in its slot's queue, then left
// (its caller gone, never sent) or taken into a run, which ends it
// finished (answered while its caller waited) or abandoned (its caller
// gone first: the run resolves group.late).
const (
	groupWaiting int32 = iota
	groupTaken
	groupLeft
	groupFinished
	groupAbandoned
)

// committer is one slot's queue of waiting groups.
type committer struct {
	slot    uint16
	mu      sync.Mutex
	queue   []*group
	running int // runs in progress or about to start
}

// committerOf returns slot's committer, made on first use.
func (s *Store) committerOf(slot uint16) *committer {
	i := 0
	if s.cluster {
		i = int(slot)
	}
	if c := s.committers[i].Load(); c != nil {
		return c
	}
	c := &committer{slot: slot}
	if s.committers[i].CompareAndSwap(nil, c) {
		return c
	}
	return s.committers[i].Load()
}

// commit evaluates g (the requests of one Evaluate call in one slot) in a
// group run and returns the group that holds their outcomes: g, or, when
// the call's deadline passed after g was taken into a run, a copy that
// says Indeterminate (the run may still write into g, which is then never
// reused: g.free stays false). The run never reads batch: a caller that
// has returned owns it again; what the run needs of it is copied into g.
func (s *Store) commit(ctx context.Context, batch []limiter.Request, roles []limiter.Role, keys []string, g *group) *group {
	g.ctx, g.roles, g.keys = ctx, roles, keys
	n := len(g.idx)
	g.policies, g.costs, g.bytes = grow(g.policies, n), grow(g.costs, n), 0
	g.leases, g.ats = grow(g.leases, n), grow(g.ats, n)
	for k, i := range g.idx {
		p := batch[i].Policy
		g.policies[k], g.costs[k] = p, batch[i].Cost
		g.leases[k], g.ats[k] = batch[i].Lease, batch[i].LeaseAt
		g.bytes += len(keys[i]) + len(p.ID()) + 64
	}
	if n > lua.MaxRequestKeys {
		// The program's group field counts a call's keys in 16 bits.
		g.fail(limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest,
			fmt.Errorf("redis store: not sent: %d limits in one call, above the %d one program run takes", n, lua.MaxRequestKeys)))
		return g
	}
	if s.groupMaxKeys == 1 {
		// Group commit off: every call runs alone, at once.
		g.state.Store(groupTaken)
		go s.runAlone(nil, g)
		return s.await(ctx, nil, batch, g)
	}
	c := s.committerOf(g.slot)
	c.mu.Lock()
	if c.running < s.inFlight && len(c.queue) == 0 {
		// Nobody waits: run at once.
		c.running++
		c.mu.Unlock()
		g.state.Store(groupTaken)
		go s.runAlone(c, g)
		return s.await(ctx, c, batch, g)
	}
	if len(c.queue) >= groupMaxQueue {
		c.mu.Unlock()
		g.fail(limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryCapacity,
			fmt.Errorf("redis store: not sent: %d calls already wait for this slot", groupMaxQueue)))
		return g
	}
	g.state.Store(groupWaiting)
	g.queued = time.Now()
	c.queue = append(c.queue, g)
	start := c.running < s.inFlight
	if start {
		c.running++
	}
	c.mu.Unlock()
	if start {
		go s.drain(c)
	}
	return s.await(ctx, c, batch, g)
}

// await waits until the run that takes g has answered, or ctx ends. A g
// still in c's queue then leaves it, unsent; a g already taken gets a copy
// that says Indeterminate (the run may still write into g), each error a
// limiter.Awaited that the run resolves with what its answer says, when it
// comes (the caller may act on it: see pkg/limiter/journal).
func (s *Store) await(ctx context.Context, c *committer, batch []limiter.Request, g *group) *group {
	// ctx may be a deadline.Wheel's (the store's Timeout, pkg/rls's
	// reserve), whose Done does not follow the caller's cancellation: a
	// call cancelled while it waits leaves the queue at once all the same.
	select {
	case <-g.done:
		return g
	case <-ctx.Done():
	case <-deadline.Cancelled(ctx):
	}
	if g.state.CompareAndSwap(groupWaiting, groupLeft) {
		// Never sent: out of the queue, so that nothing refers to g.
		c.mu.Lock()
		if i := slices.Index(c.queue, g); i >= 0 {
			c.queue = slices.Delete(c.queue, i, i+1)
		}
		c.mu.Unlock()
		g.fail(limiter.UnavailableOutcome(0, limiter.CategoryDeadline,
			fmt.Errorf("redis store: not sent: waited for a group run past the deadline: %w", ctx.Err())))
		return g
	}
	// Taken: sent, or about to be. The run may still write into g; it
	// resolves g.late when it ends, unless it ended first.
	answer := limiter.NewLateAnswer()
	g.late = answer
	if !g.state.CompareAndSwap(groupTaken, groupAbandoned) {
		// groupFinished: the answer is in, its signal on its way.
		<-g.done
		return g
	}
	late := &group{idx: g.idx, slot: g.slot}
	late.outs = make([]limiter.Outcome, len(g.idx))
	for k, i := range g.idx {
		late.outs[k] = limiter.IndeterminateOutcome(DefaultRetryAfter, answer.Awaited(k,
			fmt.Errorf("redis store: policy %s: no answer within the deadline: %w", batch[i].Policy.ID(), ctx.Err())))
	}
	return late
}

// runAlone runs g's call by itself; then, when c is not nil (group commit
// on), it hands what queued for c meanwhile to a drain, or ends the run.
func (s *Store) runAlone(c *committer, g *group) {
	g.queued = time.Time{}
	one := [1]*group{g}
	s.runGroup(one[:])
	if c != nil {
		s.next(c)
	}
}

// fail gives every request of g the outcome o; g was never sent.
func (g *group) fail(o limiter.Outcome) {
	g.outs = grow(g.outs, len(g.idx))
	for k := range g.idx {
		g.outs[k] = o
	}
	g.committed, g.free = false, true
}

// drain runs the groups that queue for c until none is left.
func (s *Store) drain(c *committer) {
	var buf []*group
	for {
		buf = s.take(c, buf[:0])
		if len(buf) == 0 {
			return
		}
		s.runGroup(buf)
		clear(buf)
	}
}

// take moves the waiting groups at the head of c's queue into dst, up to
// the group caps (at least one), and returns them. With none left it ends
// the run: c.running goes down by one.
func (s *Store) take(c *committer, dst []*group) []*group {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys, bytes, n := 0, 0, 0
	for _, g := range c.queue {
		if len(dst) > 0 && (keys+len(g.idx) > s.groupMaxKeys || bytes+g.bytes > groupMaxBytes) {
			break
		}
		n++
		if !g.state.CompareAndSwap(groupWaiting, groupTaken) {
			continue // left: its caller removes it
		}
		keys += len(g.idx)
		bytes += g.bytes
		dst = append(dst, g)
	}
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	if len(dst) == 0 {
		c.running--
	}
	return dst
}

// next, after a run of c alone, drains what queued meanwhile, or ends the
// run.
func (s *Store) next(c *committer) {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.running--
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	s.drain(c)
}
