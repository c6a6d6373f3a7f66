package app

import (
	"context"
	"time"
)

// every calls fn with the tick's time every d until ctx is done.
func every(ctx context.Context, d time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fn(now)
		}
	}
}
