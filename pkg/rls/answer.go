package rls

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// answerCore holds every message but the headers of the answer to one
// descriptor with at most one limit: the most common answer, built in one
// allocation (with its headers, see oneAnswer and oneDenial) instead of
// one per message type. The response points into it, so it lives as long
// as the response.
type answerCore struct {
	resp      rlsv3.RateLimitResponse
	status    [1]rlsv3.RateLimitResponse_DescriptorStatus
	statusPtr [1]*rlsv3.RateLimitResponse_DescriptorStatus
	limit     [1]rlsv3.RateLimitResponse_RateLimit
	duration  [1]durationpb.Duration
}

// oneAnswer is an answer to one descriptor that allows it: at most three
// headers (X-RateLimit-*).
type oneAnswer struct {
	answerCore
	headers    [3]corev3.HeaderValue
	headerPtrs [3]*corev3.HeaderValue
}

// oneDenial is an answer to one descriptor that may deny it: at most five
// headers (X-RateLimit-*, Retry-After, Content-Type).
type oneDenial struct {
	answerCore
	headers    [5]corev3.HeaderValue
	headerPtrs [5]*corev3.HeaderValue
}

// answerSpace is where respond builds one response: an answerCore and its
// headers when the call fits in one, else slices of the sizes the call
// needs.
type answerSpace struct {
	resp      *rlsv3.RateLimitResponse
	statuses  []rlsv3.RateLimitResponse_DescriptorStatus
	ptrs      []*rlsv3.RateLimitResponse_DescriptorStatus
	limits    []rlsv3.RateLimitResponse_RateLimit // length 0, capacity the limits
	durations []durationpb.Duration               // length 0, capacity the limits
	// headerRoom and headerPtrs are the headers of the answerCore, nil
	// when the call does not fit in one.
	headerRoom []corev3.HeaderValue
	headerPtrs []*corev3.HeaderValue
}

// newAnswerSpace makes room for the answer to n descriptors with up to
// limited limits; denies tells whether a limit denied (room for the
// headers of a denial).
func newAnswerSpace(n, limited int, denies bool) answerSpace {
	if n == 1 && limited <= 1 {
		var core *answerCore
		var a answerSpace
		if denies {
			one := new(oneDenial)
			core, a.headerRoom, a.headerPtrs = &one.answerCore, one.headers[:], one.headerPtrs[:]
		} else {
			one := new(oneAnswer)
			core, a.headerRoom, a.headerPtrs = &one.answerCore, one.headers[:], one.headerPtrs[:]
		}
		a.resp, a.statuses, a.ptrs = &core.resp, core.status[:], core.statusPtr[:]
		a.limits, a.durations = core.limit[:0], core.duration[:0]
		return a
	}
	a := answerSpace{
		resp:     new(rlsv3.RateLimitResponse),
		statuses: make([]rlsv3.RateLimitResponse_DescriptorStatus, n),
		ptrs:     make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
	}
	if limited > 0 {
		a.limits = make([]rlsv3.RateLimitResponse_RateLimit, 0, limited)
		a.durations = make([]durationpb.Duration, 0, limited)
	}
	return a
}

// headers returns nh header values and pointers to them: the answer
// core's when it has room, else new ones.
func (a *answerSpace) headers(nh int) ([]corev3.HeaderValue, []*corev3.HeaderValue) {
	if nh <= len(a.headerRoom) {
		return a.headerRoom[:nh], a.headerPtrs[:nh]
	}
	return make([]corev3.HeaderValue, nh), make([]*corev3.HeaderValue, nh)
}
