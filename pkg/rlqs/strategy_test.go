package rlqs

import (
	"math"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestStrategyFor(t *testing.T) {
	for _, tc := range []struct {
		rate, burst int64
		// want: a DENY_ALL blanket when deny, else the token bucket.
		deny              bool
		tokens, maxTokens uint32
		seconds           int64 // the fill interval as Envoy reads it
		admits            int64 // strategyRate
	}{
		{rate: 0, burst: 5, deny: true},
		{rate: -3, burst: 5, deny: true},
		{rate: 1, burst: 0, tokens: 1, maxTokens: 1, seconds: 1000, admits: 1},
		{rate: 3, burst: 0, tokens: 1, maxTokens: 1, seconds: 334, admits: 2},
		{rate: 33, burst: 0, tokens: 1, maxTokens: 1, seconds: 31, admits: 32},
		{rate: 500, burst: 0, tokens: 1, maxTokens: 1, seconds: 2, admits: 500},
		{rate: 999, burst: 0, tokens: 59, maxTokens: 1, seconds: 60, admits: 983},
		{rate: 1000, burst: 0, tokens: 1, maxTokens: 1, seconds: 1, admits: 1000},
		{rate: 1500, burst: 1, tokens: 3, maxTokens: 1, seconds: 2, admits: 1500},
		{rate: 1500, burst: 20, tokens: 3, maxTokens: 20, seconds: 2, admits: 1500},
		{rate: 2999, burst: 1, tokens: 179, maxTokens: 1, seconds: 60, admits: 2983},
		{rate: 3000, burst: 1, tokens: 3, maxTokens: 1, seconds: 1, admits: 3000},
		{rate: 10_000, burst: 3, tokens: 10, maxTokens: 3, seconds: 1, admits: 10_000},
		{rate: 1_000_000_000, burst: 1_000_000, tokens: 1_000_000, maxTokens: 1_000_000, seconds: 1, admits: 1_000_000_000},
		{rate: 1_000_000_000, burst: 1 << 40, tokens: 1_000_000, maxTokens: math.MaxUint32, seconds: 1, admits: 1_000_000_000},
		{rate: math.MaxInt64, burst: 0, tokens: math.MaxUint32, maxTokens: 1, seconds: 1, admits: math.MaxUint32 * 1000},
	} {
		s := strategyFor(tc.rate, tc.burst)
		if err := s.ValidateAll(); err != nil {
			t.Errorf("strategyFor(%d, %d) = %v: %v", tc.rate, tc.burst, s, err)
		}
		if tc.deny {
			if !proto.Equal(s, blanket(false)) {
				t.Errorf("strategyFor(%d, %d) = %v, want DENY_ALL", tc.rate, tc.burst, s)
			}
			if got := strategyRate(s); got != 0 {
				t.Errorf("strategyRate(%v) = %d, want 0", s, got)
			}
			continue
		}
		tb := s.GetTokenBucket()
		if tb == nil {
			t.Fatalf("strategyFor(%d, %d) = %v, want a token bucket", tc.rate, tc.burst, s)
		}
		// Envoy reads the interval truncated to whole seconds.
		seconds := int64(tb.GetFillInterval().AsDuration() / time.Second)
		if tb.GetTokensPerFill() == nil || tb.GetTokensPerFill().GetValue() != tc.tokens || tb.GetMaxTokens() != tc.maxTokens || seconds != tc.seconds {
			t.Errorf("strategyFor(%d, %d) = %v, want %d tokens every %d s, at most %d", tc.rate, tc.burst, tb, tc.tokens, tc.seconds, tc.maxTokens)
		}
		got := strategyRate(s)
		if got != tc.admits {
			t.Errorf("strategyRate(strategyFor(%d, %d)) = %d, want %d", tc.rate, tc.burst, got, tc.admits)
		}
	}
}

// Every rate gets a strategy Envoy accepts that admits at most the rate:
// within 5 % of it from 0.2 requests a second (one token in 5 s), at least
// half of it below.
func TestStrategyForNeverAdmitsMore(t *testing.T) {
	rates := []int64{math.MaxInt64, math.MaxUint32 * 1000, math.MaxUint32*1000 + 999}
	for r := int64(1); r <= 5000; r++ {
		rates = append(rates, r)
	}
	for _, r := range rates {
		s := strategyFor(r, 0)
		if err := s.ValidateAll(); err != nil {
			t.Fatalf("strategyFor(%d, 0) = %v: %v", r, s, err)
		}
		got := strategyRate(s)
		if got > r {
			t.Fatalf("strategyFor(%d, 0) admits %d mrps, more than asked", r, got)
		}
		if r <= math.MaxUint32*1000 && (got*2 < r || r >= 200 && (r-got)*20 > r) {
			t.Fatalf("strategyFor(%d, 0) admits %d mrps, too far below", r, got)
		}
	}
}

// Envoy keeps its running bucket when the new token bucket equals the old
// one by max_tokens, tokens_per_fill and fill_interval.nanos, not seconds:
// any two strategies that admit different rates must differ there.
func TestStrategyForDiffersWhereEnvoyLooks(t *testing.T) {
	type envoyKey struct {
		maxTokens, tokens uint32
		nanos             int32
	}
	for _, burst := range []int64{0, 1, 2, 5} {
		seen := map[envoyKey]int64{}
		for r := int64(1); r <= 5000; r++ {
			tb := strategyFor(r, burst).GetTokenBucket()
			k := envoyKey{tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().GetNanos()}
			got := strategyRate(strategyFor(r, burst))
			if prev, ok := seen[k]; ok && prev != got {
				t.Fatalf("burst %d: rates %d and %d mrps look equal to Envoy (%+v)", burst, prev, got, k)
			}
			seen[k] = got
		}
	}
}

func TestStrategyRate(t *testing.T) {
	bucket := func(tokens *wrapperspb.UInt32Value, interval *durationpb.Duration) *typev3.RateLimitStrategy {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
			TokenBucket: &typev3.TokenBucket{MaxTokens: 10, TokensPerFill: tokens, FillInterval: interval}}}
	}
	for _, tc := range []struct {
		name string
		s    *typev3.RateLimitStrategy
		want int64
	}{
		{"allow all", blanket(true), math.MaxInt64},
		{"deny all", blanket(false), 0},
		{"7 every 2 s", bucket(wrapperspb.UInt32(7), durationpb.New(2*time.Second)), 3500},
		{"interval truncated to whole seconds", bucket(wrapperspb.UInt32(7), durationpb.New(2900*time.Millisecond)), 3500},
		{"unset tokens per fill reads 0", bucket(nil, durationpb.New(time.Second)), 0},
		{"sub-second interval divides by zero", bucket(wrapperspb.UInt32(1), durationpb.New(500*time.Millisecond)), math.MaxInt64},
		{"requests per time unit is not applied", &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
			RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 5, TimeUnit: typev3.RateLimitUnit_SECOND}}}, -1},
		{"no strategy", &typev3.RateLimitStrategy{}, -1},
		{"nil", nil, -1},
	} {
		if got := strategyRate(tc.s); got != tc.want {
			t.Errorf("%s: strategyRate = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestBlanket(t *testing.T) {
	for _, allow := range []bool{true, false} {
		s := blanket(allow)
		want := typev3.RateLimitStrategy_DENY_ALL
		if allow {
			want = typev3.RateLimitStrategy_ALLOW_ALL
		}
		if _, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok || s.GetBlanketRule() != want {
			t.Errorf("blanket(%v) = %v, want %v", allow, s, want)
		}
		if err := s.ValidateAll(); err != nil {
			t.Errorf("blanket(%v): %v", allow, err)
		}
	}
}
