package rls

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// untilPeriodEnd is the time from now to the end of the calendar period
// holding now: a calendar window's reset when no store decided it.
func untilPeriodEnd(now time.Time, c *calendar.Calendar) time.Duration {
	_, end := c.Period(now.UnixMilli())
	return time.Duration(end-now.UnixMilli()) * time.Millisecond
}
