package rls

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// oneAnswer holds every message of the most common answer, one descriptor
// with at most one limit and at most three headers (the X-RateLimit-*
// headers of an allowed call), in one allocation instead of one per
// message type. The response points into it, so it lives as long as the
// response.
type oneAnswer struct {
	resp       rlsv3.RateLimitResponse
	status     [1]rlsv3.RateLimitResponse_DescriptorStatus
	statusPtr  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	limit      [1]rlsv3.RateLimitResponse_RateLimit
	duration   [1]durationpb.Duration
	headers    [3]corev3.HeaderValue
	headerPtrs [3]*corev3.HeaderValue
}

// answerSpace is where respond builds one response: a oneAnswer when the
// call fits in one, else slices of the sizes the call needs.
type answerSpace struct {
	resp      *rlsv3.RateLimitResponse
	statuses  []rlsv3.RateLimitResponse_DescriptorStatus
	ptrs      []*rlsv3.RateLimitResponse_DescriptorStatus
	limits    []rlsv3.RateLimitResponse_RateLimit // length 0, capacity the limits
	durations []durationpb.Duration               // length 0, capacity the limits
	one       *oneAnswer                          // nil unless the call fits in one
}

// newAnswerSpace makes room for the answer to n descriptors with up to
// limited limits.
func newAnswerSpace(n, limited int) answerSpace {
	if n == 1 && limited <= 1 {
		one := new(oneAnswer)
		return answerSpace{resp: &one.resp, statuses: one.status[:], ptrs: one.statusPtr[:],
			limits: one.limit[:0], durations: one.duration[:0], one: one}
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

// headers returns nh header values and pointers to them: the oneAnswer's
// when it has room, else new ones.
func (a *answerSpace) headers(nh int) ([]corev3.HeaderValue, []*corev3.HeaderValue) {
	if a.one != nil && nh <= len(a.one.headers) {
		return a.one.headers[:nh], a.one.headerPtrs[:nh]
	}
	return make([]corev3.HeaderValue, nh), make([]*corev3.HeaderValue, nh)
}
