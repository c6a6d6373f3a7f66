package loadgen

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// FloorServer is the "do-nothing floor": a RateLimitService that answers OK
// at once, with no rules and no store, so a benchmark can measure what gRPC
// alone costs on a machine. The zero value is ready to use and it is safe
// for concurrent use.
type FloorServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

var _ rlsv3.RateLimitServiceServer = (*FloorServer)(nil)

// ShouldRateLimit answers OK, whatever the request.
func (*FloorServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}
