package xdsrules

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/redact"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/xds"
)

// StartConfig is what Start takes besides the flags.
type StartConfig struct {
	// Rules compile each version. (Required)
	Rules descriptors.Options
	// OnReload is told of every load attempt. (Optional)
	OnReload func(descriptors.ReloadResult)
	// Registerer takes the source's metrics. (Required)
	Registerer prometheus.Registerer
	// Log receives the stream's state changes. (Required)
	Log *zap.Logger
	// Label names a flag as the user set it, for errors. (Required)
	Label func(flag string) string
	// Config is --config, which the xDS source does not read: a warning
	// says so when it is set.
	Config string
}

// Start subscribes to the xDS server of the checked f and, unless
// --force-start-without-initial-config, waits for the first valid version
// (at most --xds-initial-timeout). The source runs until its Stop.
func Start(ctx context.Context, f *Flags, c StartConfig) (*xds.Source, error) {
	client, err := f.clientConfig()
	if err != nil {
		return nil, err
	}
	log := c.Log.With(zap.String("xds_server", redact.URLs(f.Server)), zap.String("xds_node", f.NodeID))
	if names := redact.Credentials(client.Headers); client.TLS == nil && len(names) > 0 {
		log.Warn(redact.MsgPlaintextCredentials, zap.String("to", "xds"), zap.Strings("headers", names))
	}
	if c.Config != "" {
		log.Warn("--config is not read with --config-source xds: the rules come from the xDS server", zap.String("config", c.Config))
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
	src, err = xds.NewSource(xds.SourceConfig{Client: client, Rules: c.Rules, OnReload: c.OnReload, Metrics: c.Registerer})
	if err != nil {
		return nil, err
	}
	src.Start(ctx)
	if f.ForceStart {
		if err := src.ServeEmpty(); err != nil {
			src.Stop()
			return nil, err
		}
		log.Warn("starting without rules (--force-start-without-initial-config): every call is answered OK until the xDS server sends valid rules")
		return src, nil
	}
	log.Info("waiting for the first rules from the xds server", zap.Duration("timeout", f.InitialWait))
	wait, cancel := context.WithTimeout(ctx, f.InitialWait)
	defer cancel()
	if err := src.WaitFirst(wait); err != nil {
		src.Stop()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stopped while waiting for the first rules from the xDS server %s: %w", redact.URLs(f.Server), ctx.Err())
		}
		return nil, fmt.Errorf("%s: no rules from the xDS server %s (node %q) within %v (%s): %v; nothing served (--force-start-without-initial-config starts without rules)",
			c.Label("config-source"), redact.URLs(f.Server), f.NodeID, f.InitialWait, c.Label("xds-initial-timeout"), err)
	}
	return src, nil
}
