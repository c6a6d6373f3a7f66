package redis

import (
	"fmt"
	"strings"

	"github.com/redis/rueidis"
)

// NewClient opens a rueidis client of its own from cfg, named name, for
// commands that are not limit decisions (the audit stream's XADDs, the
// shared HMAC secret's keys): the same addresses, mode (standalone, Sentinel
// or cluster), credentials and TLS as the store, on separate connections so
// that they never queue behind decisions. Only read-only commands are
// retried after a network error, never a write. It dials before returning,
// bounded by cfg's dial timeout per connection. The caller closes it.
func NewClient(cfg Config, name string) (rueidis.Client, error) {
	cfg, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	opt := clientOption(cfg)
	opt.ClientName, opt.DisableRetry = name, false
	// One connection per node is plenty for a background writer.
	opt.PipelineMultiplex = 0
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis: connecting to %s (%s mode): %w", strings.Join(cfg.Addrs, ","), cfg.Mode, err)
	}
	return c, nil
}
