package app

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/redact"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/xds"
)

// startXDS subscribes to the xDS server and, unless --force-start-without-
// initial-config, waits for the first valid version (at most
// --xds-initial-timeout). The source runs until s.rules.stop.
func (s *server) startXDS(ctx context.Context, opts descriptors.Options) (*xds.Source, error) {
	o := s.opts
	client, err := o.XDSConfig()
	if err != nil {
		return nil, err
	}
	log := s.log.With(zap.String("xds_server", redact.URLs(o.XDSServer)), zap.String("xds_node", o.XDSNodeID))
	if names := redact.Credentials(client.Headers); client.TLS == nil && len(names) > 0 {
		log.Warn(redact.MsgPlaintextCredentials, zap.String("to", "xds"), zap.Strings("headers", names))
	}
	if o.Config != "" {
		log.Warn("--config is not read with --config-source xds: the rules come from the xDS server", zap.String("config", o.Config))
	}
	var src *xds.Source
	client.OnState = func(st xds.State, err error) {
		switch v := src.Version(); {
		case st == xds.Connected:
			log.Info("xds stream open")
		case err == nil:
		case v == "":
			log.Warn("xds stream failed; reconnecting", zap.Error(err))
		default:
			log.Warn("xds stream failed; serving the rules in service and reconnecting", zap.Error(err), zap.String("version", v))
		}
	}
	src, err = xds.NewSource(xds.SourceConfig{Client: client, Rules: opts, OnReload: s.onReload, Metrics: s.reg})
	if err != nil {
		return nil, err
	}
	src.Start(ctx)
	if o.ForceStart {
		if err := src.ServeEmpty(); err != nil {
			src.Stop()
			return nil, err
		}
		log.Warn("starting without rules (--force-start-without-initial-config): every call is answered OK until the xDS server sends valid rules")
		return src, nil
	}
	log.Info("waiting for the first rules from the xds server", zap.Duration("timeout", o.XDSInitialWait))
	wait, cancel := context.WithTimeout(ctx, o.XDSInitialWait)
	defer cancel()
	if err := src.WaitFirst(wait); err != nil {
		src.Stop()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stopped while waiting for the first rules from the xDS server %s: %w", redact.URLs(o.XDSServer), ctx.Err())
		}
		return nil, fmt.Errorf("%s: no rules from the xDS server %s (node %q) within %v (%s): %v; nothing served (--force-start-without-initial-config starts without rules)",
			options.Label("config-source", o.Given), redact.URLs(o.XDSServer), o.XDSNodeID, o.XDSInitialWait, options.Label("xds-initial-timeout", o.Given), err)
	}
	return src, nil
}
