package app

import (
	"fmt"
	"net"
	"strings"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/options"
)

// listen opens the gRPC and admin listeners (both or neither).
func (s *server) listen() (grpcLis, adminLis net.Listener, err error) {
	network, addr := "tcp", s.opts.GRPCAddr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", p
	}
	grpcLis, err = net.Listen(network, addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: must be an address this process can listen on: %w", options.Label("grpc-addr", s.opts.Given), err)
	}
	adminLis, err = net.Listen("tcp", s.opts.AdminAddr)
	if err != nil {
		_ = grpcLis.Close()
		return nil, nil, fmt.Errorf("%s: must be an address this process can listen on: %w", options.Label("admin-addr", s.opts.Given), err)
	}
	return grpcLis, adminLis, nil
}

// logServing writes the "serving" line with the bound addresses. With the
// reference's environment and a level that hides info (its default, warn)
// the line is written at warn: the reference writes its "Listening for"
// lines at warn, so that a healthy start shows them.
func (s *server) logServing(grpcAddr, adminAddr, refAddr string) {
	o := s.opts
	fields := []zap.Field{zap.String("grpc_addr", grpcAddr), zap.String("admin_addr", adminAddr), zap.String("store", o.Store),
		zap.String("config", s.ruleOrigin()), zap.String("default_headers", o.DefaultHeaders), zap.String("readiness", o.Readiness)}
	if refAddr != "" {
		fields = append(fields, zap.String("reference_metrics_addr", refAddr), zap.String("reference_metrics_path", o.refmetrics.Path))
	}
	level := zap.InfoLevel
	if o.EnvCompat && !s.log.Core().Enabled(zap.InfoLevel) {
		level = zap.WarnLevel
	}
	s.log.Log(level, "serving", fields...)
}
