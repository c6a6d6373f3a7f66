package statsd

import (
	"sync"
	"time"

	"github.com/cactus/go-statsd-client/v5/statsd"
	"go.uber.org/zap"
)

// failures counts the sends that failed since it was last taken, and keeps
// the first error among them. The library's buffered sender sends in the
// background and drops the errors of its sends; recordingSender keeps them
// here, so that Flush can log them, one warning per interval.
type failures struct {
	mu    sync.Mutex
	n     int
	first error
}

func (f *failures) add(err error) {
	f.mu.Lock()
	if f.n == 0 {
		f.first = err
	}
	f.n++
	f.mu.Unlock()
}

// take returns the failures recorded since the last take and forgets them.
func (f *failures) take() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.n, f.first
	f.n, f.first = 0, nil
	return n, err
}

// recordingSender is a statsd.Sender whose failed sends are recorded in f.
type recordingSender struct {
	statsd.Sender
	f *failures
}

func (r recordingSender) Send(data []byte) (int, error) {
	n, err := r.Sender.Send(data)
	if err != nil {
		r.f.add(err)
	}
	return n, err
}

// send hands the lines and timings to the client; it returns how many it
// refused and the first error.
func (s *Sink) send(lines []line, timings []time.Duration) (int, error) {
	var errs []error
	for _, l := range lines {
		if err := s.client.Inc(l.name, int64(l.value), 1); err != nil {
			errs = append(errs, err)
		}
	}
	name := ResponseTimeStat + s.suffix
	for _, d := range timings {
		if err := s.client.TimingDuration(name, d, 1); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return 0, nil
	}
	return len(errs), errs[0]
}

// warnFailed logs failed sends, if any, in one line.
func (s *Sink) warnFailed(failed int, first error) {
	if failed > 0 {
		s.log.Warn("statsd send failed; those stats are dropped", zap.String("addr", s.cfg.Addr), zap.String("protocol", s.protocol()), zap.Int("failed_sends", failed), zap.Error(first))
	}
}

func (s *Sink) protocol() string {
	if s.cfg.Protocol == "tcp" {
		return "tcp"
	}
	return "udp"
}

// newClient makes the statsd client: the library's buffered sender over a
// UDP sender that resolves the address again every 30 s, or over a TCP
// connection; the sends of either are recorded in s.failed.
func (s *Sink) newClient() (statsd.Statter, error) {
	var base statsd.Sender = &tcpSender{addr: s.cfg.Addr}
	if s.protocol() == "udp" {
		var err error
		if base, err = statsd.NewResolvingSimpleSender(s.cfg.Addr, resolveEvery); err != nil {
			return nil, err
		}
	}
	b, err := statsd.NewBufferedSenderWithSender(recordingSender{Sender: base, f: &s.failed}, senderFlush, packetBytes)
	if err != nil {
		_ = base.Close()
		return nil, err
	}
	return statsd.NewClientWithSender(b, "", 0)
}
