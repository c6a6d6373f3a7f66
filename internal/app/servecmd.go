package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/envoy-rls/envoy-rls/internal/observe"
)

// CheckServeArgs parses the arguments of `envoy-rls serve` (without the
// word serve) and the environment exactly as serve does, and runs the same
// option checks, without reading files or opening listeners. The chart tests
// feed it the container args that the chart renders.
func CheckServeArgs(args []string, getenv func(string) string) error {
	_, err := serveOptions(args, getenv, nil)
	return err
}

// serveOptions parses and checks the serve flags. The error is
// flag.ErrHelp after -h, after which help, when not nil, prints the help.
// Otherwise it holds one line per problem found.
func serveOptions(args []string, getenv func(string) string, help io.Writer) (Options, error) {
	var o Options
	fs := serveFlags(&o)
	var err error
	o.given, err = parseFlagsWith(fs, args, getenv, compatPresets(&o, getenv))
	var envErrs envErrors
	switch {
	case errors.Is(err, flag.ErrHelp):
		if help != nil {
			printUsage(help, serveUsage, fs)
		}
		return o, err
	case err != nil && !errors.As(err, &envErrs):
		// The command line did not parse: the values after the fault are
		// unknown, so nothing more can be checked.
		return o, err
	}
	var refused refusedError
	if errors.As(err, &refused) {
		return o, err
	}
	errs := []error{err}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("serve takes no arguments (got %q): the rules are --config PATH", fs.Args()))
	}
	errs = append(errs, o.check(), checkSecretSource(&o, getenv), observe.CheckTracing(o.tracingFlag(), getenv))
	return o, errors.Join(errs...)
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
