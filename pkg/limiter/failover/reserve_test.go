package failover

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/deadline"
)

func TestStoreContextKeepsAReserve(t *testing.T) {
	w := deadline.New(0)
	now := time.Now()
	for _, tc := range []struct {
		left, reserve time.Duration
	}{
		{5 * time.Millisecond, minAnswerReserve},
		{100 * time.Millisecond, 20 * time.Millisecond},
		{10 * time.Second, maxAnswerReserve},
		// Far deadlines are cut to MaxStoreWait (the reserve is moot then).
		{time.Hour, time.Hour - maxStoreWait},
	} {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(tc.left))
		sctx := storeContext(ctx, w, now)
		got, _ := sctx.Deadline()
		if want := now.Add(tc.left - tc.reserve); !got.Equal(want) {
			t.Errorf("%v left: store deadline %v, want %v", tc.left, got.Sub(now), want.Sub(now))
		}
		cancel()
	}
	// No deadline: the store gets the caller's context as it is.
	bg := context.Background()
	if sctx := storeContext(bg, w, now); sctx != bg {
		t.Fatal("a context without deadline was replaced")
	}
}
