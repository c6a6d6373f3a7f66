package app

import (
	"flag"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Defaults of the --grpc-* limits: what one connection, one stream and the
// whole listener may hold (docs/operations.md, "Limits on connections and
// streams", gives the memory they bound).
const (
	// DefaultGRPCMaxConcurrentStreams is the SETTINGS_MAX_CONCURRENT_STREAMS
	// each connection announces; a stream beyond it is refused
	// (RST_STREAM REFUSED_STREAM). Envoy opens another connection when its
	// connections are full.
	DefaultGRPCMaxConcurrentStreams = 100
	// DefaultGRPCMaxConnections bounds the open gRPC connections; one
	// beyond it is closed as soon as it is accepted.
	DefaultGRPCMaxConnections = 1000
	// DefaultGRPCReceiveTimeout bounds the time from a call's headers to
	// the end of its request message.
	DefaultGRPCReceiveTimeout = 5 * time.Second
	// DefaultGRPCMaxIncompleteRequests bounds the calls, over all
	// connections, whose request has not fully arrived: a call spends
	// microseconds there, so the bound is far above what Envoy reaches,
	// and it caps what slow requests can hold (with the message size).
	DefaultGRPCMaxIncompleteRequests = 1024
	// DefaultGRPCMaxRecvMsgSize is the largest request read: Envoy's
	// requests take a few hundred bytes to a few KiB. Every incomplete
	// request may hold up to this much.
	DefaultGRPCMaxRecvMsgSize = 256 << 10
	// DefaultGRPCMaxConnectionIdle closes a connection without a call for
	// that long (GOAWAY); the client reconnects when it needs to.
	DefaultGRPCMaxConnectionIdle = 5 * time.Minute
	// DefaultGRPCMaxConnectionAge closes every connection after that long
	// (GOAWAY, with gRPC's ±10 % jitter), so that Envoy's connections spread
	// over the replicas an autoscaler adds.
	DefaultGRPCMaxConnectionAge = 5 * time.Minute
	// DefaultGRPCMaxConnectionAgeGrace is how long calls in flight on a
	// connection closed for its age may still take.
	DefaultGRPCMaxConnectionAgeGrace = 30 * time.Second
	// DefaultGRPCKeepaliveTime and DefaultGRPCKeepaliveTimeout: the server
	// pings a connection quiet for that long and closes it when the ping is
	// not answered in time (a peer that vanished).
	DefaultGRPCKeepaliveTime    = 2 * time.Minute
	DefaultGRPCKeepaliveTimeout = 20 * time.Second
	// DefaultGRPCKeepaliveMinTime is the shortest interval between client
	// pings the server accepts; a client pinging more often is closed
	// ("too many pings"). Envoy may be configured to ping every few seconds.
	DefaultGRPCKeepaliveMinTime = 5 * time.Second
	// DefaultGRPCKeepalivePermitWithoutStream lets clients ping
	// connections without calls in flight (Envoy's idle connections).
	DefaultGRPCKeepalivePermitWithoutStream = true
	// grpcHandshakeTimeout bounds a new connection's HTTP/2 preface and
	// settings exchange (grpc.ConnectionTimeout; plain HTTP/2, no TLS).
	grpcHandshakeTimeout = 10 * time.Second
	// maxGRPCMaxConnections bounds --grpc-max-connections: past a million
	// connections the bound no longer bounds anything a process can hold.
	maxGRPCMaxConnections = 1 << 20
	// minGRPCMaxRecvMsgSize is the smallest --grpc-max-recv-msg-size: an
	// Envoy request with a few descriptors fits in 4 KiB.
	minGRPCMaxRecvMsgSize = 4 << 10
)

// transportOptions are the --grpc-* limits (part of Options).
type transportOptions struct {
	GRPCMaxConcurrentStreams         int
	GRPCMaxConnections               int
	GRPCReceiveTimeout               time.Duration
	GRPCMaxIncompleteRequests        int
	GRPCMaxRecvMsgSize               int
	GRPCMaxConnectionIdle            time.Duration
	GRPCMaxConnectionAge             time.Duration
	GRPCMaxConnectionAgeGrace        time.Duration
	GRPCKeepaliveTime                time.Duration
	GRPCKeepaliveTimeout             time.Duration
	GRPCKeepaliveMinTime             time.Duration
	GRPCKeepalivePermitWithoutStream bool
}

// transportFlags adds the --grpc-* limits to fs.
func transportFlags(fs *flag.FlagSet, o *transportOptions) {
	fs.IntVar(&o.GRPCMaxConcurrentStreams, "grpc-max-concurrent-streams", DefaultGRPCMaxConcurrentStreams, "calls one gRPC connection may have in flight; more are refused (REFUSED_STREAM) and Envoy opens another connection")
	fs.IntVar(&o.GRPCMaxConnections, "grpc-max-connections", DefaultGRPCMaxConnections, "open gRPC connections; one more is closed as soon as it is accepted")
	fs.DurationVar(&o.GRPCReceiveTimeout, "grpc-receive-timeout", DefaultGRPCReceiveTimeout, "longest time from a call's headers to the end of its request; a call that has not sent its request by then is cut (DEADLINE_EXCEEDED)")
	fs.IntVar(&o.GRPCMaxIncompleteRequests, "grpc-max-incomplete-requests", DefaultGRPCMaxIncompleteRequests, "calls, over all gRPC connections, whose request has not fully arrived; one more is refused (RESOURCE_EXHAUSTED)")
	fs.IntVar(&o.GRPCMaxRecvMsgSize, "grpc-max-recv-msg-size", DefaultGRPCMaxRecvMsgSize, "largest request message in bytes; a larger one is refused (RESOURCE_EXHAUSTED)")
	fs.DurationVar(&o.GRPCMaxConnectionIdle, "grpc-max-connection-idle", DefaultGRPCMaxConnectionIdle, "close a gRPC connection without calls for this long (GOAWAY; 0: never)")
	fs.DurationVar(&o.GRPCMaxConnectionAge, "grpc-max-connection-age", DefaultGRPCMaxConnectionAge, "close every gRPC connection after this long, ±10 % (GOAWAY), so that clients spread over new replicas (0: never)")
	fs.DurationVar(&o.GRPCMaxConnectionAgeGrace, "grpc-max-connection-age-grace", DefaultGRPCMaxConnectionAgeGrace, "how long calls in flight may still take on a connection closed for its age")
	fs.DurationVar(&o.GRPCKeepaliveTime, "grpc-keepalive-time", DefaultGRPCKeepaliveTime, "ping a gRPC connection quiet for this long")
	fs.DurationVar(&o.GRPCKeepaliveTimeout, "grpc-keepalive-timeout", DefaultGRPCKeepaliveTimeout, "close a connection whose ping is not answered within this")
	fs.DurationVar(&o.GRPCKeepaliveMinTime, "grpc-keepalive-min-time", DefaultGRPCKeepaliveMinTime, "shortest interval between client pings; a client pinging more often is closed")
	fs.BoolVar(&o.GRPCKeepalivePermitWithoutStream, "grpc-keepalive-permit-without-stream", DefaultGRPCKeepalivePermitWithoutStream, "accept client pings on connections without calls in flight")
}

// transportAccepts says what each --grpc-* limit takes, as errors put it
// after "must be". Read only.
var transportAccepts = map[string]string{
	"grpc-max-concurrent-streams":   fmt.Sprintf("an integer between 1 and %d", math.MaxUint32),
	"grpc-max-connections":          fmt.Sprintf("an integer between 1 and %d", maxGRPCMaxConnections),
	"grpc-receive-timeout":          "a positive duration such as 5s",
	"grpc-max-incomplete-requests":  fmt.Sprintf("an integer between 1 and %d", maxGRPCMaxConnections),
	"grpc-max-recv-msg-size":        fmt.Sprintf("a size in bytes between %d and %d", minGRPCMaxRecvMsgSize, math.MaxInt32),
	"grpc-max-connection-idle":      "0 (never) or a positive duration such as 5m",
	"grpc-max-connection-age":       "0 (never) or a positive duration such as 5m",
	"grpc-max-connection-age-grace": "0 or a positive duration such as 30s",
	"grpc-keepalive-time":           "a duration of at least 1s",
	"grpc-keepalive-timeout":        "a duration of at least 1s",
	"grpc-keepalive-min-time":       "0 or a positive duration such as 5s",
}

// check returns one error per --grpc-* value out of range.
func (o *transportOptions) check(given map[string]given) error {
	r := refusals{given: given, accepts: transportAccepts}
	bad := r.check
	bad("grpc-max-concurrent-streams", o.GRPCMaxConcurrentStreams >= 1 && int64(o.GRPCMaxConcurrentStreams) <= math.MaxUint32)
	bad("grpc-max-connections", o.GRPCMaxConnections >= 1 && o.GRPCMaxConnections <= maxGRPCMaxConnections)
	bad("grpc-receive-timeout", o.GRPCReceiveTimeout > 0)
	bad("grpc-max-incomplete-requests", o.GRPCMaxIncompleteRequests >= 1 && o.GRPCMaxIncompleteRequests <= maxGRPCMaxConnections)
	bad("grpc-max-recv-msg-size", o.GRPCMaxRecvMsgSize >= minGRPCMaxRecvMsgSize && o.GRPCMaxRecvMsgSize <= math.MaxInt32)
	bad("grpc-max-connection-idle", o.GRPCMaxConnectionIdle >= 0)
	bad("grpc-max-connection-age", o.GRPCMaxConnectionAge >= 0)
	bad("grpc-max-connection-age-grace", o.GRPCMaxConnectionAgeGrace >= 0)
	// gRPC raises a keepalive time or timeout below 1s to 1s.
	bad("grpc-keepalive-time", o.GRPCKeepaliveTime >= time.Second)
	bad("grpc-keepalive-timeout", o.GRPCKeepaliveTimeout >= time.Second)
	bad("grpc-keepalive-min-time", o.GRPCKeepaliveMinTime >= 0)
	return r.err()
}

// grpcServerOptions are the server options that apply the limits. A zero
// idle or age is gRPC's "never".
func (o *transportOptions) grpcServerOptions(rt *receiveGuard) []grpc.ServerOption {
	never := func(d time.Duration) time.Duration {
		if d == 0 {
			return time.Duration(math.MaxInt64)
		}
		return d
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(o.GRPCMaxConcurrentStreams)),
		grpc.MaxRecvMsgSize(o.GRPCMaxRecvMsgSize),
		grpc.ConnectionTimeout(grpcHandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             o.GRPCKeepaliveMinTime,
			PermitWithoutStream: o.GRPCKeepalivePermitWithoutStream,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     never(o.GRPCMaxConnectionIdle),
			MaxConnectionAge:      never(o.GRPCMaxConnectionAge),
			MaxConnectionAgeGrace: never(o.GRPCMaxConnectionAgeGrace),
			Time:                  o.GRPCKeepaliveTime,
			Timeout:               o.GRPCKeepaliveTimeout,
		}),
		grpc.InTapHandle(rt.tap),
		grpc.ChainStreamInterceptor(rt.streamInterceptor),
		grpc.ForceServerCodecV2(rls.Codec{}),
	}
}
