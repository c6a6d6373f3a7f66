package app

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/envoy-rls/envoy-rls/internal/compat"
	"github.com/envoy-rls/envoy-rls/internal/options"
)

// CheckServeArgs parses the arguments of `envoy-rls serve` (without the
// word serve) and the environment exactly as serve does, and runs the same
// option checks, without reading files or opening listeners. The chart tests
// feed it the container args that the chart renders.
func CheckServeArgs(args []string, getenv func(string) string) error {
	_, err := serveOptions(args, getenv, nil)
	return err
}

// serveOpts are serve's settings: the options and the rule source's
// (--config-source and the xDS flags, xds.go).
type serveOpts struct {
	*options.Options
	xdsOptions
	// given is Options.Given, by the name xds.go reads.
	given map[string]given
}

// serveOptions parses and checks the serve flags, with the reference
// service's environment when asked for (internal/compat). The error is
// flag.ErrHelp after -h, after which help, when not nil, prints the help.
// Otherwise it holds one line per problem found.
func serveOptions(args []string, getenv func(string) string, help io.Writer) (serveOpts, error) {
	var so serveOpts
	o, fs, err := options.Serve(args, getenv, compat.Presets(getenv), &so.xdsOptions)
	so.Options, so.given = o, o.Given
	if errors.Is(err, flag.ErrHelp) && help != nil {
		options.PrintUsage(help, options.ServeUsage, fs)
	}
	return so, err
}

func serveCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, h hooks) error {
	o, err := serveOptions(args, getenv, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log, err := newLogger(o.LogLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if h.stdout == nil {
		h.stdout = stdout
	}
	// A start-up failure comes back as is, for main to print; a server
	// that fails later has been logged and comes back as ErrFailed.
	return serve(ctx, o, getenv, log, h)
}
