package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// jsonLines writes one JSON object per line to w, flushing after each
// batch.
type jsonLines struct {
	bw     *bufio.Writer
	closer io.Closer // nil: not closed (stdout)
}

// NewJSONLines writes to w; Close closes w when it is an io.Closer and
// closeIt is true.
func NewJSONLines(w io.Writer, closeIt bool) *jsonLines {
	j := &jsonLines{bw: bufio.NewWriter(w)}
	if c, ok := w.(io.Closer); ok && closeIt {
		j.closer = c
	}
	return j
}

// Write implements Writer.
func (j *jsonLines) Write(_ context.Context, records []Record) (int, error) {
	for i := range records {
		b, err := json.Marshal(&records[i])
		if err != nil {
			return 0, fmt.Errorf("audit: encoding an event: %w", err)
		}
		_, _ = j.bw.Write(b)
		_ = j.bw.WriteByte('\n')
	}
	if err := j.bw.Flush(); err != nil {
		return 0, fmt.Errorf("audit: writing events: %w", err)
	}
	return len(records), nil
}

// Close implements Writer.
func (j *jsonLines) Close() error {
	err := j.bw.Flush()
	if j.closer != nil {
		err = errors.Join(err, j.closer.Close())
	}
	return err
}

// redisStream appends events to a Redis Stream with XADD key MAXLEN ~ n *,
// one pipelined round trip per batch. It connects lazily through dial and,
// after a failed dial, tries again at most once per RedisRedialWait: the
// events of the batches meanwhile are dropped (DropWriteFailed).
type redisStream struct {
	dial     func() (rueidis.Client, error)
	key      string
	maxLen   string
	now      func() time.Time
	client   rueidis.Client
	nextDial time.Time
}

// redisRedialWait is the least time between two connection attempts of a
// redisStream.
const redisRedialWait = time.Second

// maxStreamLen bounds a redisStream's MAXLEN.
const maxStreamLen = 100_000_000

// newRedisStream appends to the stream key, trimmed to about maxLen
// entries (MAXLEN ~: Redis trims whole macro nodes, so the stream may hold
// somewhat more). now is the clock of the redial wait (nil: time.Now).
func newRedisStream(dial func() (rueidis.Client, error), key string, maxLen int64, now func() time.Time) (*redisStream, error) {
	if dial == nil {
		return nil, errors.New("audit: redis stream: no dial function")
	}
	if key == "" {
		return nil, errors.New("audit: redis stream: the key is empty")
	}
	if maxLen < 1 || maxLen > maxStreamLen {
		return nil, fmt.Errorf("audit: redis stream: MAXLEN %d is outside 1–%d", maxLen, maxStreamLen)
	}
	if now == nil {
		now = time.Now
	}
	return &redisStream{dial: dial, key: key, maxLen: strconv.FormatInt(maxLen, 10), now: now}, nil
}

// Write implements Writer.
func (r *redisStream) Write(ctx context.Context, records []Record) (int, error) {
	if r.client == nil {
		if t := r.now(); t.Before(r.nextDial) {
			return 0, errors.New("audit: redis stream: not connected")
		}
		c, err := r.dial()
		if err != nil {
			r.nextDial = r.now().Add(redisRedialWait)
			return 0, fmt.Errorf("audit: redis stream: connecting: %w", err)
		}
		r.client = c
	}
	c := r.client
	cmds := make(rueidis.Commands, len(records))
	for i := range records {
		fv := c.B().Xadd().Key(r.key).Maxlen().Almost().Threshold(r.maxLen).Id("*").FieldValue()
		for _, f := range records[i].fields() {
			fv = fv.FieldValue(f[0], f[1])
		}
		cmds[i] = fv.Build()
	}
	// Each XADD stands alone, so count the successes: a batch half written
	// when a connection breaks counts its failures as dropped.
	n := 0
	var first error
	for _, res := range c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		n++
	}
	if first != nil {
		return n, fmt.Errorf("audit: redis stream %q: XADD failed for %d of %d events: %w", r.key, len(records)-n, len(records), first)
	}
	return n, nil
}

// Close implements Writer.
func (r *redisStream) Close() error {
	if r.client != nil {
		r.client.Close()
		r.client = nil
	}
	return nil
}
