package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/redis/rueidis"
)

// SharedSecret makes replicas agree on one secret through Redis: it stores
// candidate under key unless the key already holds a value (SET NX, no
// expiry), then returns the value the key holds. Every replica that calls
// it with its own random candidate gets the first one stored. It opens its
// own short-lived connection from cfg and closes it.
//
// The value is returned as stored: the caller checks its length. A
// candidate of zero length is refused.
func SharedSecret(ctx context.Context, cfg Config, key string, candidate []byte) ([]byte, error) {
	if len(candidate) == 0 || key == "" {
		return nil, errors.New("redis store: shared secret: key and candidate must not be empty")
	}
	cfg, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	opt := clientOption(cfg)
	opt.DisableRetry = false // SET NX and GET are safe to retry
	type result struct {
		c   rueidis.Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := rueidis.NewClient(opt)
		ch <- result{c, err}
	}()
	var c rueidis.Client
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("redis store: shared secret: connecting to %v: %w", cfg.Addrs, r.err)
		}
		c = r.c
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("redis store: shared secret: %w", ctx.Err())
	}
	defer c.Close()
	// SET NX GET (Redis 7.0+) answers the value already stored, or nil
	// when this call stored candidate: one round trip, one decision.
	v, err := c.Do(ctx, c.B().Set().Key(key).Value(rueidis.BinaryString(candidate)).Nx().Get().Build()).AsBytes()
	switch {
	case rueidis.IsRedisNil(err):
		return bytes.Clone(candidate), nil
	case err != nil:
		return nil, fmt.Errorf("redis store: shared secret under %q: %w", key, err)
	}
	return v, nil
}
