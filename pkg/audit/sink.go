package audit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Defaults and bounds of Config.
const (
	DefaultQueueSize    = 10_000
	maxQueueSize        = 1_000_000
	defaultBatchSize    = 256
	defaultWriteTimeout = 2 * time.Second
)

// Drop reasons, the reason label of envoy_rls_audit_dropped_total.
const (
	// DropQueueFull: the queue was full when the event was offered.
	dropQueueFull = "queue_full"
	// DropWriteFailed: the writer failed to write the event.
	dropWriteFailed = "write_failed"
	// DropShutdown: the sink closed before the event was written.
	dropShutdown = "shutdown"
)

// writer writes a batch of records. Write is called from one goroutine
// only; it returns how many of the records it wrote and why it did not
// write the others.
type writer interface {
	Write(ctx context.Context, records []Record) (n int, err error)
	Close() error
}

// Config configures a Sink.
type Config struct {
	// Writer receives the events. (Required)
	Writer writer
	// Metrics counts written, dropped and sampled-out events. (Required; see
	// NewMetrics)
	Metrics *metrics
	// QueueSize bounds the events waiting to be written; an event offered
	// to a full queue is dropped (DropQueueFull). (Optional, default
	// DefaultQueueSize, at most MaxQueueSize)
	QueueSize int
	// BatchSize is the most events one Write takes. (Optional, default
	// DefaultBatchSize)
	BatchSize int
	// WriteTimeout bounds one Write. (Optional, default
	// DefaultWriteTimeout)
	WriteTimeout time.Duration
	// Sample is the share of events kept, in (0, 1]; PolicySample overrides
	// it per policy ID. (Optional, default 1: every event)
	Sample       float64
	PolicySample map[string]float64
	// Rand returns a number in [0, 1) for sampling. (Optional, default
	// math/rand/v2's Float64)
	Rand func() float64
	// RecentSize is how many of the last denial events kept by sampling
	// Recent returns. (Optional, default DefaultRecentSize, at most
	// MaxRecentSize)
	RecentSize int
	// Logger receives write failures, sampled to one line per failure
	// streak. (Optional)
	Logger *zap.Logger
}

// Sink is the audit stream's queue and background writer. Offer is safe
// for concurrent use and never blocks.
type Sink struct {
	w            writer
	m            *metrics
	queue        chan Event
	batch        int
	writeTimeout time.Duration
	sample       float64
	policy       map[string]float64
	rand         func() float64
	log          *zap.Logger
	recent       *recent

	closed atomic.Bool
	stop   chan struct{} // closed by Close: drain and return
	done   chan struct{} // closed when the writer has returned
	drain  atomic.Int64  // the drain deadline, unix nanoseconds
	once   sync.Once
}

// New validates cfg and starts the sink's writer.
func New(cfg Config) (*Sink, error) {
	if cfg.Writer == nil {
		return nil, errors.New("audit: Config.Writer is required")
	}
	if cfg.Metrics == nil {
		return nil, errors.New("audit: Config.Metrics is required")
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.QueueSize < 1 || cfg.QueueSize > maxQueueSize {
		return nil, fmt.Errorf("audit: queue size %d is outside 1–%d", cfg.QueueSize, maxQueueSize)
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = defaultBatchSize
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = defaultWriteTimeout
	}
	if cfg.Sample == 0 {
		cfg.Sample = 1
	}
	if err := checkRate(cfg.Sample); err != nil {
		return nil, fmt.Errorf("audit: sample: %w", err)
	}
	for id, r := range cfg.PolicySample {
		if err := checkRate(r); err != nil {
			return nil, fmt.Errorf("audit: sample of policy %q: %w", id, err)
		}
	}
	if cfg.RecentSize == 0 {
		cfg.RecentSize = DefaultRecentSize
	}
	if cfg.RecentSize < 1 || cfg.RecentSize > maxRecentSize {
		return nil, fmt.Errorf("audit: recent size %d is outside 1–%d", cfg.RecentSize, maxRecentSize)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	s := &Sink{
		w:            cfg.Writer,
		m:            cfg.Metrics,
		queue:        make(chan Event, cfg.QueueSize),
		batch:        cfg.BatchSize,
		writeTimeout: cfg.WriteTimeout,
		sample:       cfg.Sample,
		policy:       cfg.PolicySample,
		rand:         cfg.Rand,
		log:          cfg.Logger.Named("audit"),
		recent:       newRecent(cfg.RecentSize),
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	go s.run()
	return s, nil
}

func checkRate(r float64) error {
	if !(r > 0 && r <= 1) {
		return fmt.Errorf("%v is not in (0, 1]", r)
	}
	return nil
}

// Offer queues e unless it is sampled out, the queue is full or the sink
// is closed. It never blocks.
func (s *Sink) Offer(e Event) {
	rate := s.sample
	if r, ok := s.policy[e.PolicyID]; ok {
		rate = r
	}
	if rate < 1 && s.rand() >= rate {
		s.m.sampledOut.Inc()
		return
	}
	s.recent.add(e)
	s.enqueue(e)
}

// offerUsage queues a usage record (e.Usage set): never sampled, not
// among Recent, dropped and counted like a denial when the queue is full.
// It never blocks.
func (s *Sink) offerUsage(e Event) {
	if e.Usage == nil {
		return
	}
	s.enqueue(e)
}

// Recent returns up to n of the last denial events kept by sampling,
// newest first: those the queue dropped too.
func (s *Sink) Recent(n int) []Record { return s.recent.last(n) }

// RecentSize is the most events Recent returns: the capacity of the
// recent view.
func (s *Sink) RecentSize() int { return len(s.recent.ring) }

// RecentLen is how many events the recent view holds now (at most
// RecentSize).
func (s *Sink) RecentLen() int { return s.recent.len() }

func (s *Sink) enqueue(e Event) {
	if s.closed.Load() {
		s.m.dropped(dropShutdown, 1)
		return
	}
	select {
	case s.queue <- e:
	default:
		s.m.dropped(dropQueueFull, 1)
	}
}

// Close stops taking events, writes what is queued until timeout, counts
// what is left as dropped (DropShutdown), closes the writer and returns.
// It returns within about timeout even when the writer hangs. Events
// offered while Close runs may be dropped uncounted: close the sink after
// the server has stopped answering.
func (s *Sink) Close(timeout time.Duration) error {
	var err error
	s.once.Do(func() {
		s.closed.Store(true)
		s.drain.Store(time.Now().Add(timeout).UnixNano())
		close(s.stop)
		t := time.NewTimer(timeout + time.Second)
		defer t.Stop()
		select {
		case <-s.done:
			err = s.w.Close()
		case <-t.C:
			err = errors.New("audit: the writer did not finish within the drain time")
		}
	})
	return err
}

// run is the writer: it takes batches from the queue and writes them until
// Close, then drains.
func (s *Sink) run() {
	defer close(s.done)
	buf := make([]Record, 0, s.batch)
	failing := false
	for {
		var e Event
		select {
		case e = <-s.queue:
		case <-s.stop:
			s.drainQueue(buf)
			return
		}
		buf = append(buf[:0], e.Record())
	fill:
		for len(buf) < s.batch {
			select {
			case e = <-s.queue:
				buf = append(buf, e.Record())
			default:
				break fill
			}
		}
		failing = s.write(context.Background(), buf, failing)
	}
}

// drainQueue writes what is queued until the drain deadline, then counts
// the rest as dropped.
func (s *Sink) drainQueue(buf []Record) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, s.drain.Load()))
	defer cancel()
	for ctx.Err() == nil {
		buf = buf[:0]
	fill:
		for len(buf) < s.batch {
			select {
			case e := <-s.queue:
				buf = append(buf, e.Record())
			default:
				break fill
			}
		}
		if len(buf) == 0 {
			return
		}
		s.write(ctx, buf, true)
	}
	if n := len(s.queue); n > 0 {
		s.m.dropped(dropShutdown, n)
	}
}

// write writes one batch and counts it; it logs the first failure of a
// streak and reports whether the batch failed.
func (s *Sink) write(parent context.Context, buf []Record, failing bool) bool {
	ctx, cancel := context.WithTimeout(parent, s.writeTimeout)
	n, err := s.w.Write(ctx, buf)
	cancel()
	n = min(max(n, 0), len(buf))
	s.m.written.Add(float64(n))
	if err == nil && n == len(buf) {
		if failing {
			s.log.Info("audit sink writing again")
		}
		return false
	}
	s.m.dropped(dropWriteFailed, len(buf)-n)
	if !failing {
		s.log.Warn("audit sink failed to write; dropping events until it writes again", zap.Int("dropped", len(buf)-n), zap.Error(err))
	}
	return true
}
