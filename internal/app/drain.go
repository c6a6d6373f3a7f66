package app

import (
	"context"
	"net/http"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// drain takes the process out of rotation and stops within the drain time:
// readiness and gRPC health go false, the gRPC server stops accepting and
// finishes in-flight calls (cut off at --drain-timeout), then the admin
// server closes.
func (s *server) drain(gs *grpc.Server, admin *http.Server) {
	s.draining.Store(true)
	s.setServing(false)
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(s.opts.DrainTimeout)
	defer timer.Stop()
	select {
	case <-done:
		s.log.Info("drained: every in-flight call finished")
	case <-timer.C:
		s.log.Warn("drain timeout: cancelling the calls still in flight", zap.Duration("drain_timeout", s.opts.DrainTimeout))
		gs.Stop()
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := admin.Shutdown(ctx); err != nil {
		_ = admin.Close()
	}
}

func (s *server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
}

// streamWorkers is the number of gRPC stream workers: the concurrency at
// which the standard load runs are measured (docs/performance.md).
const streamWorkers = 64
