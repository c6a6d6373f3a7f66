// Package app is the envoy-rls command line (serve, validate, explain,
// digest, version, help) and serve assembled from the packages that do the
// work: its settings (options, compat), the rule source, the store, the
// servers (grpcserve, admin) and their observability (observe); signals,
// reloads and the graceful stop. cmd/envoy-rls only calls Run.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/internal/compat"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/refmetrics"
	"github.com/envoy-rls/envoy-rls/internal/statsd"
	"github.com/envoy-rls/envoy-rls/internal/store"
	"github.com/envoy-rls/envoy-rls/internal/tracing"
	"github.com/envoy-rls/envoy-rls/internal/xdsrules"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/rulefile"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// ErrFailed is returned (wrapped or as is) once the failure has already been
// reported to the user; main then exits 1 without printing it again. Every
// other error Run returns is for main to print, one "envoy-rls: " line per
// line of its text.
var ErrFailed = errors.New("envoy-rls: failed")

const usage = `envoy-rls: a global rate-limit service for Envoy and Istio.

Usage:
  envoy-rls serve --config PATH [flags]   serve RateLimitService over gRPC
  envoy-rls validate [--config] PATH      check rule files; exit 1 on problems
  envoy-rls explain --admin URL --token-file F --domain D --descriptor k=v
                                          why a descriptor is limited, its state (JSON)
  envoy-rls explain --config PATH --domain D --descriptor k=v
                                          the same from rule files (no state)
  envoy-rls digest --config PATH --domain D --descriptor k=v
                                          the subject digest and Redis key (HMAC secret)
  envoy-rls version [--output json]       print version, commit, Go version, build date
  envoy-rls help                          this text

Flags come from the command line or from the environment: every flag
--NAME also reads ENVOY_RLS_NAME (upper case, dashes as underscores), e.g.
ENVOY_RLS_GRPC_ADDR=:9081 for --grpc-addr. A flag on the command line wins
over its variable; an empty variable counts as unset. The HMAC secret
itself can be given as ENVOY_RLS_HMAC_SECRET.

Started as ratelimit (a link to this binary, /bin/ratelimit in the image),
or with "serve --env-compat", it serves with the environment variables of
envoyproxy/ratelimit (docs/migration.md).

"envoy-rls serve --help" lists the serve flags, their variables and
defaults. A bad value stops the binary at start with one line naming the
flag or variable, the value and what it accepts, and exit status 1.
`

const validateUsage = `Usage: envoy-rls validate [--config] PATH

Loads the rule file or directory PATH and prints the domains and policies
found, or every problem as file:line:column: reason (exit status 1).

Flags:
`

// commands is what run accepts, for the error on an unknown command.
const commands = "serve, validate, explain, digest, version or help"

// Run runs one envoy-rls command. ctx ends the serve command (main cancels
// it on SIGTERM/SIGINT); getenv reads the environment.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return run(ctx, args, getenv, stdout, stderr, hooks{})
}

// RunAs is Run for a binary started under the name argv0 (os.Args[0]):
// started as CompatName ("ratelimit", the reference service's binary), it
// serves with the reference's environment, as `serve --env-compat` with
// args as serve flags.
// version and help (and their dashed forms) are answered as such.
func RunAs(ctx context.Context, argv0 string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if filepath.Base(argv0) == options.CompatName && len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, compat.Usage())
		return nil
	}
	return Run(ctx, argsAs(argv0, args), getenv, stdout, stderr)
}

// argsAs is the command line of RunAs.
func argsAs(argv0 string, args []string) []string {
	if filepath.Base(argv0) != options.CompatName {
		return args
	}
	if len(args) > 0 && isVersion(args[0]) {
		return append([]string{"version"}, args[1:]...)
	}
	return append([]string{"serve", "--env-compat"}, args...)
}

func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "-help" || arg == "--help"
}

func isVersion(arg string) bool {
	return arg == "version" || arg == "-version" || arg == "--version"
}

// hooks let tests observe a running server.
type hooks struct {
	// listening is called once both listeners are bound.
	listening func(grpcAddr, adminAddr string)
	// wrapStore wraps the store (fault injection in tests).
	wrapStore func(limiter.Store) limiter.Store
	// reloadSignals replaces SIGHUP delivery.
	reloadSignals <-chan os.Signal
	// watcher is called with the rule watcher once the rules are loaded.
	watcher func(*rulefile.Watcher)
	// spanExporter replaces the OTLP exporter when tracing is on; spans
	// are exported as they end.
	spanExporter sdktrace.SpanExporter
	// secretRecheck, when positive, replaces compat.SharedSecretRecheck.
	secretRecheck time.Duration
	// stdout replaces the serve command's standard output (the audit
	// sink's stdout).
	stdout io.Writer
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, h hooks) error {
	if len(args) == 0 {
		return fmt.Errorf("a command is required: %s (\"envoy-rls help\" explains them)", commands)
	}
	switch args[0] {
	case "serve":
		return serveCommand(ctx, args[1:], getenv, stdout, stderr, h)
	case "validate":
		return validateCommand(ctx, args[1:], getenv, stdout, stderr)
	case "digest":
		return digestCommand(args[1:], getenv, stdout)
	case "explain":
		return explainCommand(ctx, args[1:], getenv, stdout)
	}
	switch {
	case isVersion(args[0]):
		return versionCommand(args[1:], stdout)
	case isHelp(args[0]):
		fmt.Fprint(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q: must be %s (\"envoy-rls help\" explains them)", args[0], commands)
}

// validateCommand loads the rule files and prints one problem per line
// (file:line:column: reason), or the domains and policies found. It
// returns when ctx ends (SIGTERM, SIGINT) even if the load has not.
func validateCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("envoy-rls validate", flag.ContinueOnError)
	var path string
	var lim options.RuleLimits
	fs.StringVar(&path, "config", "", "rule file or directory of rule files")
	options.AddRuleLimitFlags(fs, &lim)
	seen, err := options.Parse(fs, args, getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			options.PrintUsage(stdout, validateUsage, fs)
			return nil
		}
		return err
	}
	if errs := lim.Check(seen); len(errs) > 0 {
		return errors.Join(errs...)
	}
	if path == "" && fs.NArg() == 1 {
		path = fs.Arg(0)
	}
	if path == "" || fs.NArg() > 1 || fs.NArg() == 1 && path != fs.Arg(0) {
		return fmt.Errorf("validate takes exactly one rule path (got %d): envoy-rls validate [--config] PATH", fs.NArg()+min(len(path), 1))
	}
	type result struct {
		summary string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		summary, err := descriptors.Validate(path, lim.Limits(), rlqsNote)
		done <- result{summary, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		return fmt.Errorf("validate %s: stopped before the rules were read: %w", path, context.Cause(ctx))
	}
	if res.err != nil {
		var ce *descriptors.ConfigError
		switch {
		case errors.As(res.err, &ce):
			for _, p := range ce.Problems {
				fmt.Fprintln(stdout, p.String())
			}
			fmt.Fprintf(stderr, "%d problem(s) in %s\n", len(ce.Problems), path)
		case options.LimitMessage(res.err) != "":
			fmt.Fprintf(stdout, "%s: %s\n", path, options.LimitMessage(res.err))
		default:
			fmt.Fprintf(stdout, "%s: %v\n", path, res.err)
		}
		return fmt.Errorf("%w: invalid configuration", ErrFailed)
	}
	fmt.Fprint(stdout, res.summary)
	return nil
}

// rlqsNote is validate's line under a rule that RLQS assigns no quota.
func rlqsNote(r *descriptors.Rule) string {
	if why := rlqs.Refusal(r); why != "" {
		return "RLQS: no quota, its failure_mode answers (" + why + ")"
	}
	return ""
}

// rulesError reports rules that fail to load at start: every problem on a
// line of its own (file:line:column: reason), or the one error naming the
// --config value.
func rulesError(config string, err error) error {
	if msg := options.LimitMessage(err); msg != "" {
		return fmt.Errorf("%s: %s; nothing served", config, msg)
	}
	var ce *descriptors.ConfigError
	if !errors.As(err, &ce) {
		return fmt.Errorf("%s: must be a readable rule file or directory: %w", config, err)
	}
	errs := make([]error, 0, len(ce.Problems)+1)
	for _, p := range ce.Problems {
		errs = append(errs, errors.New(p.String()))
	}
	errs = append(errs, fmt.Errorf("%s: %d problem(s) in the rules; nothing served", config, len(ce.Problems)))
	return errors.Join(errs...)
}

// CheckServeArgs parses the arguments of `envoy-rls serve` (without the
// word serve) and the environment exactly as serve does, and runs the same
// option checks, without reading files or opening listeners. The chart tests
// feed it the container args that the chart renders.
func CheckServeArgs(args []string, getenv func(string) string) error {
	_, err := serveOptions(args, getenv, nil)
	return err
}

// settings are serve's: options' own, and the flags of the packages serve
// assembles (options.Group), each read by its package.
type settings struct {
	*options.Options
	tracing    tracing.Flags
	statsd     statsd.Flags
	refmetrics refmetrics.Flags
	audit      audit.Flags
	top        topk.Flags
	xds        xdsrules.Flags
	store      store.Flags
	rlqs       rlqs.Flags
}

// serveOptions parses and checks the serve flags, with the reference
// service's environment when asked for (internal/compat). The error is
// flag.ErrHelp after -h, after which help, when not nil, prints the help.
// Otherwise it holds one line per problem found.
func serveOptions(args []string, getenv func(string) string, help io.Writer) (*settings, error) {
	st := &settings{}
	st.tracing.Getenv = getenv
	// The groups in the order their problems are reported.
	o, fs, err := options.Serve(args, getenv, compat.Presets(getenv), &st.store, &st.xds, &st.statsd, &st.audit, &st.top, &st.refmetrics, &st.tracing, &st.rlqs)
	if errors.Is(err, flag.ErrHelp) && help != nil {
		options.PrintUsage(help, options.ServeUsage, fs)
	}
	st.Options = o
	st.store.RedisPassword = o.RedisPassword
	return st, err
}

func serveCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, h hooks) error {
	o, err := serveOptions(args, getenv, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	level, _ := zapcore.ParseLevel(o.LogLevel) // checked by options.Serve
	log := newLogger(level, stderr)
	defer func() { _ = log.Sync() }()
	if h.stdout == nil {
		h.stdout = stdout
	}
	// A start-up failure comes back as is, for main to print; a server
	// that fails later has been logged and comes back as ErrFailed.
	return serve(ctx, o, getenv, log, h)
}

// newLogger is the service's logger: JSON lines on w from level up, with
// RFC 3339 times and durations as text.
func newLogger(level zapcore.Level, w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w))))
}
