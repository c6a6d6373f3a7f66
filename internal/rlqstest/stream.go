package rlqstest

import (
	"context"
	"fmt"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// stream is one open RLQS stream. Only the loop goroutine sends on it; its
// own goroutine receives.
type stream struct {
	c      grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	cancel context.CancelFunc
}

// Start runs the proxy's loop (Envoy's main thread: opening the stream,
// sending reports, a report tick every Interval) until Stop or until ctx is
// done. Later calls do nothing.
func (p *Proxy) Start(ctx context.Context) {
	p.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(ctx)
		p.mu.Lock()
		p.started, p.cancel = true, cancel
		p.mu.Unlock()
		p.wg.Add(1)
		go p.run(ctx)
	})
}

// Stop ends the loop and the stream, closes the connections and waits for
// the proxy's goroutines.
func (p *Proxy) Stop() {
	p.mu.Lock()
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
}

// Tick runs one report tick now, as the Interval timer does, and returns
// when it is done; it does nothing when the proxy is not running. Tests
// with an injected clock tick by hand.
func (p *Proxy) Tick() {
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if !started {
		return
	}
	done := make(chan struct{})
	select {
	case p.ticks <- done:
	case <-p.stopped:
		return
	}
	select {
	case <-done:
	case <-p.stopped:
	}
}

func (p *Proxy) run(ctx context.Context) {
	defer p.wg.Done()
	defer close(p.stopped)
	defer p.closeConns()
	defer func() {
		p.mu.Lock()
		s := p.stream
		p.stream = nil
		p.mu.Unlock()
		if s != nil {
			s.cancel()
		}
	}()
	ticker := time.NewTicker(p.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			p.sendPending(ctx)
		case <-ticker.C:
			p.tick(ctx)
		case done := <-p.ticks:
			p.tick(ctx)
			close(done)
		}
	}
}

// sendPending sends the immediate reports of new buckets. The first one
// ever opens the stream; later ones are dropped when there is none.
func (p *Proxy) sendPending(ctx context.Context) {
	p.mu.Lock()
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	for _, r := range pending {
		if !p.triedOpen {
			p.triedOpen = true
			p.open(ctx)
		}
		p.send(r)
	}
}

// tick reports every bucket, opening a stream first when there is none.
func (p *Proxy) tick(ctx context.Context) {
	p.sendPending(ctx)
	p.mu.Lock()
	if !p.reporting {
		p.mu.Unlock()
		return
	}
	now := p.clock.Now()
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: p.domain}
	for _, bk := range p.buckets {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, bk.usage(now))
	}
	open := p.stream != nil
	p.mu.Unlock()
	if !open && !p.open(ctx) {
		p.mu.Lock()
		p.stats.ReportsDropped++
		p.mu.Unlock()
		return
	}
	p.send(r)
}

// open opens a stream on the target that last worked, else on the next
// ones in turn, and reports whether one opened.
func (p *Proxy) open(ctx context.Context) bool {
	for i := range p.targets {
		idx := (p.next + i) % len(p.targets)
		err := p.openOn(ctx, idx)
		if err == nil {
			p.next = idx
			return true
		}
		p.mu.Lock()
		p.stats.OpenFailures++
		p.stats.OpenError = err.Error()
		p.mu.Unlock()
	}
	return false
}

func (p *Proxy) openOn(ctx context.Context, idx int) error {
	if p.conns == nil {
		p.conns = make([]*grpc.ClientConn, len(p.targets))
	}
	target := p.targets[idx]
	if p.conns[idx] == nil {
		opts := p.dialOpts
		if len(opts) == 0 {
			opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		}
		conn, err := grpc.NewClient(target, opts...)
		if err != nil {
			return fmt.Errorf("rlqstest: client for %s: %w", target, err)
		}
		p.conns[idx] = conn
	}
	sctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(p.openTimeout, cancel)
	c, err := rlqsv3.NewRateLimitQuotaServiceClient(p.conns[idx]).StreamRateLimitQuotas(sctx)
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("not open within %v", p.openTimeout)
	}
	if err != nil {
		cancel()
		return fmt.Errorf("rlqstest: open stream to %s: %w", target, err)
	}
	s := &stream{c: c, cancel: cancel}
	p.mu.Lock()
	p.stream = s
	p.stats.StreamsOpened++
	p.mu.Unlock()
	p.wg.Add(1)
	go p.recv(s)
	return nil
}

// send sends r on the stream, or drops it when there is none.
func (p *Proxy) send(r *rlqsv3.RateLimitQuotaUsageReports) {
	p.mu.Lock()
	s := p.stream
	p.mu.Unlock()
	sent := false
	if s != nil {
		if sent = s.c.Send(r) == nil; !sent {
			p.ended(s)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sent {
		p.stats.ReportsSent++
	} else {
		p.stats.ReportsDropped++
	}
}

// recv applies s's responses until it ends.
func (p *Proxy) recv(s *stream) {
	defer p.wg.Done()
	for {
		resp, err := s.c.Recv()
		if err != nil {
			p.ended(s)
			return
		}
		p.apply(resp)
	}
}

// ended drops s: the next tick opens another stream.
func (p *Proxy) ended(s *stream) {
	s.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stream == s {
		p.stream = nil
		p.stats.StreamsClosed++
	}
}

func (p *Proxy) closeConns() {
	for _, c := range p.conns {
		if c != nil {
			_ = c.Close()
		}
	}
}
