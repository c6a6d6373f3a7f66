package redis

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// calendarNow is the time a calendar window's neighbouring periods are
// computed around (lua.AppendBatchPacked): this process's clock plus the
// estimate of how far the node's clock is ahead (clockOffset; none before
// the first reply), read once per program run into *memo (negative until
// then). Redis then picks, with its own TIME, the period that holds it;
// an estimate off by less than a period is harmless. 0, unread, for a
// policy without a calendar.
func (s *Store) calendarNow(off *clockOffset, memo *int64, p *limiter.Policy) int64 {
	if p.Calendar() == nil {
		return 0
	}
	if *memo < 0 {
		d, _ := off.estimate()
		*memo = s.local.ms(time.Now()) + d
	}
	return *memo
}
