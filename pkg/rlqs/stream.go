package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// maxActionsPerResponse bounds the bucket actions of one response message.
const maxActionsPerResponse = 1000

// stream is one proxy's RLQS stream: the buckets it subscribed and the
// actions waiting to be sent to it.
type stream struct {
	svc    *Service
	domain string // set by the first report (under svc.mu)
	subs   map[string]*subscription

	// The outbox: the latest action per bucket (the tick never waits for
	// a slow stream), sent by the stream's handler.
	mu      sync.Mutex
	pending map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction
	notify  chan struct{}
	flushed chan struct{} // closed and replaced when pending empties
	done    chan struct{} // closed by end
	endOnce sync.Once

	// sent counts the actions sent (under mu).
	sent int

	// The report budget (the receiving goroutine's alone).
	tokens   float64
	tokensAt time.Time
}

func newStream(svc *Service) *stream {
	return &stream{svc: svc, subs: make(map[string]*subscription),
		pending: make(map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction),
		notify:  make(chan struct{}, 1), flushed: make(chan struct{}), done: make(chan struct{}),
		tokens: float64(svc.cfg.Limits.ReportBurst)}
}

// StreamRateLimitQuotas serves one proxy's stream: its reports subscribe
// buckets and add their usage; assignments are sent as the ticks revise
// them.
func (s *Service) StreamRateLimitQuotas(srv rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	st := newStream(s)
	if !s.addStream(st) {
		return status.Error(codes.Unavailable, "rlqs: the service is stopping")
	}
	defer s.removeStream(st)
	recvErr := make(chan error, 1)
	go func() { recvErr <- st.receive(srv) }()
	for {
		select {
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-st.notify:
			if err := st.send(srv); err != nil {
				return err
			}
		case <-st.done:
			if err := st.send(srv); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "rlqs: the service is stopping")
		case <-srv.Context().Done():
			return srv.Context().Err()
		}
	}
}

// receive reads the stream's reports until it ends or one breaks a rule.
func (st *stream) receive(srv rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	for {
		msg, err := srv.Recv()
		if err != nil {
			return err
		}
		if err := st.admit(st.svc.cfg.Clock.Now()); err != nil {
			return err
		}
		if err := st.svc.report(st, msg); err != nil {
			return err
		}
	}
}

// admit spends one of the stream's report tokens.
func (st *stream) admit(now time.Time) error {
	l := st.svc.cfg.Limits
	if !st.tokensAt.IsZero() {
		st.tokens = min(float64(l.ReportBurst), st.tokens+now.Sub(st.tokensAt).Seconds()*float64(l.ReportsPerSecond))
	}
	st.tokensAt = now
	if st.tokens < 1 {
		return status.Errorf(codes.ResourceExhausted, "rlqs: more than %d reports a second (burst %d) on one stream", l.ReportsPerSecond, l.ReportBurst)
	}
	st.tokens--
	return nil
}

// report checks one message and applies its usages.
func (s *Service) report(st *stream, msg *rlqsv3.RateLimitQuotaUsageReports) error {
	usages := msg.GetBucketQuotaUsages()
	if n := len(usages); n > s.cfg.Limits.UsagesPerReport {
		return status.Errorf(codes.InvalidArgument, "rlqs: %d bucket usages in one report, above the bound of %d", n, s.cfg.Limits.UsagesPerReport)
	}
	if len(msg.GetDomain()) > maxDomainBytes {
		return status.Errorf(codes.InvalidArgument, "rlqs: a domain over %d bytes", maxDomainBytes)
	}
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch d := msg.GetDomain(); {
	case st.domain == "" && d == "":
		return status.Error(codes.InvalidArgument, "rlqs: the stream's first report names no domain")
	case st.domain == "":
		st.domain = d
	case d != "" && d != st.domain:
		return status.Error(codes.InvalidArgument, "rlqs: a report names another domain than the stream's first")
	}
	for i, u := range usages {
		key, err := checkBucket(u.GetBucketId())
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "rlqs: usage %d: %v", i, err)
		}
		sub := st.subs[key]
		if sub == nil {
			if len(st.subs) >= s.cfg.Limits.BucketsPerStream {
				return status.Errorf(codes.ResourceExhausted, "rlqs: more than %d buckets on one stream", s.cfg.Limits.BucketsPerStream)
			}
			sub = s.subscribe(st, key, u.GetBucketId(), now)
		}
		sub.observe(now, u.GetTimeElapsed().AsDuration(), clampCount(u.GetNumRequestsAllowed()), clampCount(u.GetNumRequestsDenied()))
		s.reports++
	}
	return nil
}

// clampCount bounds a reported count to the stores' exact integers.
func clampCount(n uint64) int64 { return int64(min(n, 1<<53-1)) }

// enqueue makes a the next action sent for the bucket key, replacing one
// not sent yet.
func (st *stream) enqueue(key string, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	st.mu.Lock()
	st.pending[key] = a
	st.mu.Unlock()
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// send sends the pending actions, maxActionsPerResponse a message.
func (st *stream) send(srv rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	for {
		st.mu.Lock()
		resp := &rlqsv3.RateLimitQuotaResponse{}
		for k, a := range st.pending {
			if len(resp.BucketAction) == maxActionsPerResponse {
				break
			}
			resp.BucketAction = append(resp.BucketAction, a)
			delete(st.pending, k)
		}
		if len(resp.BucketAction) == 0 {
			close(st.flushed)
			st.flushed = make(chan struct{})
			st.mu.Unlock()
			return nil
		}
		st.mu.Unlock()
		if err := srv.Send(resp); err != nil {
			return fmt.Errorf("rlqs: sending assignments: %w", err)
		}
		st.mu.Lock()
		st.sent += len(resp.BucketAction)
		st.mu.Unlock()
	}
}

// expireAll enqueues, for every bucket the stream subscribed, its current
// assignment with a time to live of 0.
func (st *stream) expireAll() {
	st.svc.mu.Lock()
	defer st.svc.mu.Unlock()
	for key, sub := range st.subs {
		st.enqueue(key, sub.action(sub.sentStrategy(), 0))
	}
}

// waitFlushed waits until the outbox has been sent, or ctx ends.
func (st *stream) waitFlushed(ctx context.Context) {
	st.mu.Lock()
	if len(st.pending) == 0 {
		st.mu.Unlock()
		return
	}
	ch := st.flushed
	st.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// end ends the stream's handler.
func (st *stream) end() { st.endOnce.Do(func() { close(st.done) }) }

func (s *Service) addStream(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.streams[st] = struct{}{}
	s.cfg.Metrics.streamOpened()
	return true
}

// removeStream drops the stream and its subscriptions.
func (s *Service) removeStream(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, sub := range st.subs {
		sub.unbind()
		delete(st.subs, key)
	}
	delete(s.streams, st)
	s.cfg.Metrics.streamClosed()
}

// ttlOf is an assignment's time to live as the filter reads it: whole
// seconds.
func ttlOf(d time.Duration) *durationpb.Duration {
	return &durationpb.Duration{Seconds: int64(d / time.Second)}
}
