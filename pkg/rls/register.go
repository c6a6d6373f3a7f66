package rls

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Admission holds the calls served through Register while their request is
// received (the binary's receive guard implements it). It may cut a
// call whose request is late, also before the call's handler has started:
// gRPC then aborts the call and no handler ever runs. So a ShouldRateLimit
// call is counted once in calls_total by whichever sees it first: its
// handler, when Admit lets it, or else the admission, which counts a call it
// cuts before that with Metrics.CountCut. Implementations must be safe for
// concurrent use.
type Admission interface {
	// Admit is called, with the call's context, as its handler starts,
	// before the request is read. false: the call has been cut and counted
	// already; it is answered DEADLINE_EXCEEDED and not counted again.
	Admit(ctx context.Context) bool
	// Received is called, with the call's context, once its request has
	// been read and decoded, before it is evaluated: the receive bound ends
	// there.
	Received(ctx context.Context)
}

// CountCut counts a call that an Admission cut before its handler admitted
// it: calls_total with DEADLINE_EXCEEDED and call_duration_seconds (domain
// "unknown") over d, the time since the call arrived.
func (m *Metrics) CountCut(d time.Duration) {
	m.observeCall(unknownDomainLabel, codes.DeadlineExceeded, d)
}

// Register registers s as RateLimitService on r. Use it instead of
// rlsv3.RegisterRateLimitServiceServer: its method handler also counts, in
// calls_total and call_duration_seconds (domain "unknown"), the calls whose request never
// reaches ShouldRateLimit (the stream failed or was cut while the request
// was being read, the message was above the server's size limit, or it was
// not protobuf), and tells Config.Admission when a call starts and when its
// request has been read.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	r.RegisterService(&grpc.ServiceDesc{
		ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
		HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "ShouldRateLimit",
			Handler:    shouldRateLimitHandler,
		}},
		Streams:  []grpc.StreamDesc{},
		Metadata: rlsv3.RateLimitService_ServiceDesc.Metadata,
	}, s)
}

// shouldRateLimitHandler reads the request (dec receives and decodes it),
// then calls ShouldRateLimit through the server's interceptors, as the
// generated handler does.
func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Server)
	start := time.Since(s.epoch) // one clock read (see Server.epoch)
	counts := s.admission == nil || s.admission.Admit(ctx)
	in := new(rlsv3.RateLimitRequest)
	if err := dec(in); err != nil {
		// ShouldRateLimit counts every call it sees; this one it never will.
		if counts {
			s.metrics.observeCall(unknownDomainLabel, status.Code(err), time.Since(s.epoch)-start)
		}
		return nil, err
	}
	if !counts {
		// Cut, and counted, before it started; its request came all the same.
		return nil, status.Error(codes.DeadlineExceeded, "envoy-rls: the call was cut before its request was read")
	}
	if s.admission != nil {
		s.admission.Received(ctx)
	}
	if interceptor == nil {
		return s.ShouldRateLimit(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	})
}
