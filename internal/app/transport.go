package app

import (
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/grpcserve"
)

// Defaults of the --grpc-* limits (grpcserve's).
const (
	DefaultGRPCMaxConcurrentStreams         = grpcserve.DefaultMaxConcurrentStreams
	DefaultGRPCMaxConnections               = grpcserve.DefaultMaxConnections
	DefaultGRPCReceiveTimeout               = grpcserve.DefaultReceiveTimeout
	DefaultGRPCMaxIncompleteRequests        = grpcserve.DefaultMaxIncompleteRequests
	DefaultGRPCMaxRecvMsgSize               = grpcserve.DefaultMaxRecvMsgSize
	DefaultGRPCMaxConnectionIdle            = grpcserve.DefaultMaxConnectionIdle
	DefaultGRPCMaxConnectionAge             = grpcserve.DefaultMaxConnectionAge
	DefaultGRPCMaxConnectionAgeGrace        = grpcserve.DefaultMaxConnectionAgeGrace
	DefaultGRPCKeepaliveTime                = grpcserve.DefaultKeepaliveTime
	DefaultGRPCKeepaliveTimeout             = grpcserve.DefaultKeepaliveTimeout
	DefaultGRPCKeepaliveMinTime             = grpcserve.DefaultKeepaliveMinTime
	DefaultGRPCKeepalivePermitWithoutStream = grpcserve.DefaultKeepalivePermitWithoutStream
)

// Bounds of the --grpc-* limits.
const (
	// maxGRPCMaxConnections bounds --grpc-max-connections: past a million
	// connections the bound no longer bounds anything a process can hold.
	maxGRPCMaxConnections = 1 << 20
	// minGRPCMaxRecvMsgSize is the smallest --grpc-max-recv-msg-size: an
	// Envoy request with a few descriptors fits in 4 KiB.
	minGRPCMaxRecvMsgSize = 4 << 10
)

// transportFlags adds the --grpc-* limits to fs.
func transportFlags(fs *flag.FlagSet, o *grpcserve.Limits) {
	fs.IntVar(&o.MaxConcurrentStreams, "grpc-max-concurrent-streams", DefaultGRPCMaxConcurrentStreams, "calls one gRPC connection may have in flight; more are refused (REFUSED_STREAM) and Envoy opens another connection")
	fs.IntVar(&o.MaxConnections, "grpc-max-connections", DefaultGRPCMaxConnections, "open gRPC connections; one more is closed as soon as it is accepted")
	fs.DurationVar(&o.ReceiveTimeout, "grpc-receive-timeout", DefaultGRPCReceiveTimeout, "longest time from a call's headers to the end of its request; a call that has not sent its request by then is cut (DEADLINE_EXCEEDED)")
	fs.IntVar(&o.MaxIncompleteRequests, "grpc-max-incomplete-requests", DefaultGRPCMaxIncompleteRequests, "calls, over all gRPC connections, whose request has not fully arrived; one more is refused (RESOURCE_EXHAUSTED)")
	fs.IntVar(&o.MaxRecvMsgSize, "grpc-max-recv-msg-size", DefaultGRPCMaxRecvMsgSize, "largest request message in bytes; a larger one is refused (RESOURCE_EXHAUSTED)")
	fs.DurationVar(&o.MaxConnectionIdle, "grpc-max-connection-idle", DefaultGRPCMaxConnectionIdle, "close a gRPC connection without calls for this long (GOAWAY; 0: never)")
	fs.DurationVar(&o.MaxConnectionAge, "grpc-max-connection-age", DefaultGRPCMaxConnectionAge, "close every gRPC connection after this long, ±10 % (GOAWAY), so that clients spread over new replicas (0: never)")
	fs.DurationVar(&o.MaxConnectionAgeGrace, "grpc-max-connection-age-grace", DefaultGRPCMaxConnectionAgeGrace, "how long calls in flight may still take on a connection closed for its age")
	fs.DurationVar(&o.KeepaliveTime, "grpc-keepalive-time", DefaultGRPCKeepaliveTime, "ping a gRPC connection quiet for this long")
	fs.DurationVar(&o.KeepaliveTimeout, "grpc-keepalive-timeout", DefaultGRPCKeepaliveTimeout, "close a connection whose ping is not answered within this")
	fs.DurationVar(&o.KeepaliveMinTime, "grpc-keepalive-min-time", DefaultGRPCKeepaliveMinTime, "shortest interval between client pings; a client pinging more often is closed")
	fs.BoolVar(&o.KeepalivePermitWithoutStream, "grpc-keepalive-permit-without-stream", DefaultGRPCKeepalivePermitWithoutStream, "accept client pings on connections without calls in flight")
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

// checkTransport returns one error per --grpc-* value out of range.
func checkTransport(o *grpcserve.Limits, given map[string]given) error {
	r := refusals{given: given, accepts: transportAccepts}
	bad := r.check
	bad("grpc-max-concurrent-streams", o.MaxConcurrentStreams >= 1 && int64(o.MaxConcurrentStreams) <= math.MaxUint32)
	bad("grpc-max-connections", o.MaxConnections >= 1 && o.MaxConnections <= maxGRPCMaxConnections)
	bad("grpc-receive-timeout", o.ReceiveTimeout > 0)
	bad("grpc-max-incomplete-requests", o.MaxIncompleteRequests >= 1 && o.MaxIncompleteRequests <= maxGRPCMaxConnections)
	bad("grpc-max-recv-msg-size", o.MaxRecvMsgSize >= minGRPCMaxRecvMsgSize && o.MaxRecvMsgSize <= math.MaxInt32)
	bad("grpc-max-connection-idle", o.MaxConnectionIdle >= 0)
	bad("grpc-max-connection-age", o.MaxConnectionAge >= 0)
	bad("grpc-max-connection-age-grace", o.MaxConnectionAgeGrace >= 0)
	// gRPC raises a keepalive time or timeout below 1s to 1s.
	bad("grpc-keepalive-time", o.KeepaliveTime >= time.Second)
	bad("grpc-keepalive-timeout", o.KeepaliveTimeout >= time.Second)
	bad("grpc-keepalive-min-time", o.KeepaliveMinTime >= 0)
	return r.err()
}
