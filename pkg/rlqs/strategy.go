package rlqs

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// maxFillSeconds bounds the fill interval a rate is given to keep its
// fraction.
const maxFillSeconds = 60

// strategyFor returns the RateLimitStrategy that admits rate (mrps) at a
// proxy, with bursts of up to burst requests: a DENY_ALL blanket for a
// rate of 0 or less, else a token bucket that never admits more than rate.
//
// Envoy's filter refills a token bucket continuously at tokens_per_fill
// per fill_interval, the interval read in whole seconds (truncated: a
// sub-second one divides by zero) and an unset tokens_per_fill read as 0.
// The fill is the pair (k seconds, floor(rate*k/1000) tokens), k from 1 to
// maxFillSeconds, that loses least of the rate (the shortest of equals):
// 2.5/s is 5 every 2 s, 0.97/s 58 every 60 s, where whole seconds would
// give 2/s and nothing. Below one token in maxFillSeconds, one token every
// ceil(1000/rate) seconds; tokens are capped at math.MaxUint32.
// max_tokens is max(1, burst), capped at math.MaxUint32: the filter's
// refill does not need it to hold a whole fill.
//
// Envoy keeps its running bucket when a new token bucket equals the old
// one, and compares max_tokens, tokens_per_fill and fill_interval.nanos
// only, not its seconds. So the fill interval carries its own number of
// seconds again as nanoseconds (2 s is sent as 2.000000002 s): two
// intervals of different seconds differ in nanos, and Envoy, which
// truncates to whole seconds, fills at exactly tokens/seconds. A client
// that reads the exact duration fills slower by a part in 10^9, never
// faster.
func strategyFor(rate int64, burst int64) *typev3.RateLimitStrategy {
	if rate <= 0 {
		return blanket(false)
	}
	tokens, seconds := int64(0), int64(1)
	if rate/1000 >= math.MaxUint32 {
		tokens = math.MaxUint32
	}
	for k := int64(1); k <= maxFillSeconds && tokens < math.MaxUint32; k++ {
		if t := rate/1000*k + rate%1000*k/1000; t >= 1 && t <= math.MaxUint32 && (tokens == 0 || t*seconds > tokens*k) {
			tokens, seconds = t, k
		}
	}
	if tokens == 0 {
		tokens, seconds = 1, (1000+rate-1)/rate
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{
			MaxTokens:     uint32(min(max(1, burst), math.MaxUint32)),
			TokensPerFill: wrapperspb.UInt32(uint32(tokens)),
			FillInterval:  &durationpb.Duration{Seconds: seconds, Nanos: int32(seconds)},
		},
	}}
}

// blanket returns the ALLOW_ALL (allow) or DENY_ALL blanket rule.
func blanket(allow bool) *typev3.RateLimitStrategy {
	rule := typev3.RateLimitStrategy_DENY_ALL
	if allow {
		rule = typev3.RateLimitStrategy_ALLOW_ALL
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
}

// strategyRate returns the steady rate (mrps) Envoy's filter admits under
// s, by the filter's own arithmetic: ALLOW_ALL math.MaxInt64, DENY_ALL 0,
// a token bucket tokens_per_fill (unset: 0) per fill interval truncated to
// whole seconds (rounded down; a sub-second interval, which the filter
// divides by zero, math.MaxInt64). The filter does not apply any other
// strategy (requests_per_time_unit is logged and skipped): those give -1.
func strategyRate(s *typev3.RateLimitStrategy) int64 {
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		if st.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL {
			return math.MaxInt64
		}
		return 0
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := st.TokenBucket
		tokens := int64(tb.GetTokensPerFill().GetValue())
		seconds := int64(tb.GetFillInterval().AsDuration() / time.Second)
		switch {
		case tokens == 0:
			return 0
		case seconds <= 0:
			return math.MaxInt64
		}
		return tokens * 1000 / seconds
	default:
		return -1
	}
}
