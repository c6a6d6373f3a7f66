package rls

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CountCut counts a call cut before its handler started (see
// Config.Claim): calls_total with DEADLINE_EXCEEDED and call_duration_seconds
// (domain "unknown") over d, the time since its stream arrived.
func (s *Server) CountCut(d time.Duration) {
	s.metrics.observeCall(UnknownDomainLabel, codes.DeadlineExceeded, d)
}

// Register registers s as RateLimitService on r. Use it instead of
// rlsv3.RegisterRateLimitServiceServer: its method handler also counts, in
// calls_total and call_duration_seconds (domain "unknown"), the calls whose request never
// reaches ShouldRateLimit (the stream failed or was cut while the request
// was being read, the message was above the server's size limit, or it was
// not protobuf), and tells Config.Received when a request has been read.
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
	start := time.Now()
	counts := s.claim == nil || s.claim(ctx)
	in := new(rlsv3.RateLimitRequest)
	if err := dec(in); err != nil {
		// ShouldRateLimit counts every call it sees; this one it never will.
		if counts {
			s.metrics.observeCall(UnknownDomainLabel, status.Code(err), time.Since(start))
		}
		return nil, err
	}
	if !counts {
		// Cut, and counted, before it started; its request came all the same.
		return nil, status.Error(codes.DeadlineExceeded, "envoy-rls: the call was cut before its request was read")
	}
	if s.received != nil {
		s.received(ctx)
	}
	if interceptor == nil {
		return s.ShouldRateLimit(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	})
}
