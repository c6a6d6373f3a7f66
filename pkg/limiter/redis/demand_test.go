package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// demandSwapper is SwapDemands, as the Store and its connector offer it.
type demandSwapper interface {
	SwapDemands(ctx context.Context, replica string, ttl time.Duration, batch []DemandSwap) error
}

// swap runs one SwapDemands of replica over aggregates aggs, each with its
// demands mine[i], and returns each one's Others, sorted, and the error.
func swap(t testing.TB, s demandSwapper, replica string, ttl time.Duration, aggs []DemandSwap, mine ...[]int64) ([][]int64, error) {
	t.Helper()
	batch := slices.Clone(aggs)
	for i := range batch {
		batch[i].Mine = mine[i]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.SwapDemands(ctx, replica, ttl, batch)
	others := make([][]int64, len(batch))
	for i, d := range batch {
		others[i] = slices.Sorted(slices.Values(d.Others))
	}
	return others, err
}

// mustSwap is swap, which must succeed.
func mustSwap(t testing.TB, s demandSwapper, replica string, ttl time.Duration, aggs []DemandSwap, mine ...[]int64) [][]int64 {
	t.Helper()
	others, err := swap(t, s, replica, ttl, aggs, mine...)
	if err != nil {
		t.Fatalf("%s: SwapDemands: %v", replica, err)
	}
	return others
}

// wantOthers fails t unless got holds want, aggregate by aggregate.
func wantOthers(t testing.TB, step string, got [][]int64, want ...[]int64) {
	t.Helper()
	for i := range want {
		if w := slices.Sorted(slices.Values(want[i])); !slices.Equal(got[i], w) {
			t.Errorf("%s: aggregate %d: others %v, want %v", step, i, got[i], w)
		}
	}
}

// entry packs a demand hash's value as demand-v1.lua writes it.
func entry(expiresAtMs float64, demands ...int64) string {
	b := binary.BigEndian.AppendUint64(nil, math.Float64bits(expiresAtMs))
	for _, d := range demands {
		b = binary.BigEndian.AppendUint64(b, uint64(d))
	}
	return string(b)
}

// TestSwapDemands: replicas, two stores on one Redis, see each other's
// live demands of each aggregate and never their own; aggregates are kept
// apart; the hash lives as long as its latest entry; the run goes on when
// Redis has lost the program.
func TestSwapDemands(t *testing.T) {
	e := newEnv(t)
	other := newStore(t, Config{Addrs: []string{e.srv.Addr()}})
	prefix := limitertest.Prefix()
	aggs := []DemandSwap{
		{Policy: fixed(t, prefix+".a", 10, time.Second), Subject: subjectOf(prefix + "10.0.0.7")},
		{Policy: fixed(t, prefix+".a", 10, time.Second), Subject: subjectOf(prefix + "10.0.0.8")},
		{Policy: fixed(t, prefix+".b", 10, time.Second), Subject: subjectOf(prefix + "10.0.0.7"), Tag: limiter.Tag{1, 2}},
	}
	const ttl = time.Minute
	unknown := int64(math.MaxInt64)

	wantOthers(t, "A alone", mustSwap(t, e.store, "A", ttl, aggs, []int64{1000, unknown}, []int64{7}, nil), nil, nil, nil)
	wantOthers(t, "B after A", mustSwap(t, other, "B", ttl, aggs, []int64{500}, nil, []int64{3, 4}),
		[]int64{1000, unknown}, []int64{7}, nil)
	wantOthers(t, "A again", mustSwap(t, e.store, "A", ttl, aggs, []int64{2000}, nil, []int64{9}),
		[]int64{500}, nil, []int64{3, 4})
	wantOthers(t, "C", mustSwap(t, other, "C", ttl, aggs, nil, nil, nil),
		[]int64{500, 2000}, nil, []int64{3, 4, 9})

	// One field per replica, the key's expiry its entries'.
	key := string(DemandKey(nil, aggs[0].Policy, aggs[0].Subject, aggs[0].Tag))
	if n := e.do("HLEN", key).(int64); n != 3 {
		t.Errorf("HLEN %d, want 3 (A, B, C)", n)
	}
	if pttl := e.do("PTTL", key).(int64); pttl <= 0 || pttl > ttl.Milliseconds() {
		t.Errorf("PTTL %d, want within (0, %d]", pttl, ttl.Milliseconds())
	}

	// A server that lost the program (a restart, SCRIPT FLUSH) is sent it.
	e.do("SCRIPT", "FLUSH")
	wantOthers(t, "after SCRIPT FLUSH", mustSwap(t, e.store, "A", ttl, aggs, []int64{2000}, nil, []int64{9}),
		[]int64{500}, nil, []int64{3, 4})
	assertPrivateKeys(t, e.srv.Addr(), []string{"10.0.0.7", "10.0.0.8"})
}

// TestSwapDemandsExpire: a replica that stops publishing leaves the
// exchange when its entry's ttl has passed: the others no longer see its
// demands, its field is deleted, and the hash expires with the last entry.
func TestSwapDemandsExpire(t *testing.T) {
	e := newEnv(t)
	agg := []DemandSwap{{Policy: fixed(t, limitertest.Prefix()+".exp", 10, time.Second), Subject: subjectOf("expire")}}
	key := string(DemandKey(nil, agg[0].Policy, agg[0].Subject, agg[0].Tag))
	const short = 300 * time.Millisecond
	mustSwap(t, e.store, "dies", short, agg, []int64{42})
	wantOthers(t, "while it lives", mustSwap(t, e.store, "lives", time.Minute, agg, []int64{1}), []int64{42})
	polltest.Eventually(t, 5*time.Second, 20*time.Millisecond, "the dead replica's demand expires", func() error {
		if got := mustSwap(t, e.store, "lives", time.Minute, agg, []int64{1}); len(got[0]) != 0 {
			return fmt.Errorf("others %v", got[0])
		}
		return nil
	})
	if v := e.do("HEXISTS", key, "dies").(int64); v != 0 {
		t.Error("the expired field is still in the hash")
	}
	// The hash alone: it expires after the last entry's ttl.
	mustSwap(t, e.store, "lives", short, agg, []int64{1})
	polltest.Eventually(t, 5*time.Second, 20*time.Millisecond, "the hash expires", func() error {
		if n := e.do("EXISTS", key).(int64); n != 0 {
			return errors.New("it still exists")
		}
		return nil
	})
}

// TestSwapDemandsMalformed: an entry demand-v1.lua does not write (a short
// or ragged value, an expiry that is not an integer or lies further ahead
// than any ttl) is not read and is deleted; a key of another type fails
// its aggregate alone, as do arguments out of bounds; more than
// lua.MaxDemandReplicas replicas are refused, with nothing written.
func TestSwapDemandsMalformed(t *testing.T) {
	e := newEnv(t)
	prefix := limitertest.Prefix()
	aggs := []DemandSwap{
		{Policy: fixed(t, prefix+".m", 10, time.Second), Subject: subjectOf("malformed")},
		{Policy: fixed(t, prefix+".m", 10, time.Second), Subject: subjectOf("string")},
		{Policy: fixed(t, prefix+".m", 10, time.Second), Subject: subjectOf("good")},
	}
	key := func(i int) string { return string(DemandKey(nil, aggs[i].Policy, aggs[i].Subject, aggs[i].Tag)) }
	now := float64(e.serverNow())
	far := now + float64(lua.MaxDemandTTL.Milliseconds()) + 60_000
	e.do("HSET", key(0), "short", "1234567", "ragged", entry(now+60_000, 5)+"x", "fraction", entry(now+60_000.5, 6),
		"nan", entry(math.NaN(), 7), "far", entry(far, 8), "expired", entry(now-1, 9), "good", entry(now+60_000, 10))
	e.do("PEXPIRE", key(0), "60000")
	e.do("SET", key(1), "not a hash", "PX", "60000")
	e.do("HSET", key(2), "good", entry(now+60_000, 11))
	e.do("PEXPIRE", key(2), "60000")

	others, err := swap(t, e.store, "me", time.Minute, aggs, []int64{1}, []int64{2}, []int64{3})
	if err == nil || !strings.Contains(err.Error(), "1 of 3") || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("error %v, want the string key's aggregate alone refused", err)
	}
	wantOthers(t, "malformed entries", others, []int64{10}, nil, []int64{11})
	fields := e.do("HKEYS", key(0)).([]any)
	if got := fmt.Sprint(slices.Sorted(slices.Values(strs(fields)))); got != "[good me]" {
		t.Errorf("fields left %s, want [good me]", got)
	}

	// Arguments out of bounds fail their aggregate alone, sending nothing.
	others, err = swap(t, e.store, "me", time.Minute, aggs[1:], make([]int64, lua.MaxDemands+1), []int64{3})
	if err == nil || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("1025 demands: %v", err)
	}
	wantOthers(t, "1025 demands", others, nil, []int64{11})
	if _, err := swap(t, e.store, "", time.Minute, aggs[2:], []int64{3}); err == nil {
		t.Error("an empty replica identity was accepted")
	}
	if _, err := swap(t, e.store, "me", 0, aggs[2:], []int64{3}); err == nil {
		t.Error("ttl 0 was accepted")
	}

	// 63 others and this replica: accepted; a 65th replica: refused, and
	// the hash unchanged.
	e.do("DEL", key(2))
	args := []string{"HSET", key(2)}
	for i := range lua.MaxDemandReplicas - 1 {
		args = append(args, "r"+strconv.Itoa(i), entry(now+60_000, int64(i)))
	}
	e.do(args...)
	e.do("PEXPIRE", key(2), "60000")
	others, err = swap(t, e.store, "me", time.Minute, aggs[2:], []int64{3})
	if err != nil || len(others[0]) != lua.MaxDemandReplicas-1 {
		t.Errorf("63 others: %d demands, %v", len(others[0]), err)
	}
	_, err = swap(t, e.store, "late", time.Minute, aggs[2:], []int64{4})
	if err == nil || !strings.Contains(err.Error(), "64 other replicas") {
		t.Errorf("a 65th replica: %v", err)
	}
	if n := e.do("HLEN", key(2)).(int64); n != lua.MaxDemandReplicas || e.do("HEXISTS", key(2), "late").(int64) != 0 {
		t.Errorf("after the refusal: %d fields", n)
	}
	// A hash of more fields than the program ever writes is not read.
	e.do("HSET", key(2), "extra", entry(now+60_000, 5))
	if _, err = swap(t, e.store, "me", time.Minute, aggs[2:], []int64{3}); err == nil || !strings.Contains(err.Error(), "more fields") {
		t.Errorf("65 fields: %v", err)
	}
}

func strs(a []any) []string {
	out := make([]string, len(a))
	for i, v := range a {
		out[i], _ = v.(string)
	}
	return out
}

// TestSwapDemandsDeadline: a call whose context has ended sends nothing
// and fails every aggregate; so does a closed store.
func TestSwapDemandsDeadline(t *testing.T) {
	e := newEnv(t)
	aggs := []DemandSwap{{Policy: fixed(t, limitertest.Prefix()+".dl", 10, time.Second), Subject: subjectOf("dl"), Mine: []int64{1}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.store.SwapDemands(ctx, "me", time.Second, aggs); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if n := e.do("EXISTS", string(DemandKey(nil, aggs[0].Policy, aggs[0].Subject, aggs[0].Tag))).(int64); n != 0 {
		t.Error("a cancelled call wrote its demands")
	}
	e.store.Close()
	if err := e.store.SwapDemands(context.Background(), "me", time.Second, aggs); !errors.Is(err, errClosed) {
		t.Errorf("closed: %v", err)
	}
}
