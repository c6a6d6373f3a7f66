package helm_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/grpcserve"
)

// grpcArgs are the rendered container's --grpc-* limit flags.
func grpcArgs(t *testing.T, args ...string) []string {
	t.Helper()
	return containerArgs(t, func(a string) bool {
		return strings.HasPrefix(a, "--grpc-") && !strings.HasPrefix(a, "--grpc-addr")
	}, args...)
}

// The chart's grpc.limits defaults are the binary's, and every value
// reaches its flag (render passes the args through app.CheckServeArgs).
func TestGRPCLimits(t *testing.T) {
	v := deploytest.ChartValues(t)
	dur := func(key string) time.Duration {
		d, err := time.ParseDuration(str(get(v, "grpc", "limits", key)))
		if err != nil {
			t.Fatalf("grpc.limits.%s: %v", key, err)
		}
		return d
	}
	checkDefaults(t, "grpc.limits.", []valueDefault{
		{"maxConcurrentStreams", get(v, "grpc", "limits", "maxConcurrentStreams"), grpcserve.DefaultMaxConcurrentStreams},
		{"maxConnections", get(v, "grpc", "limits", "maxConnections"), grpcserve.DefaultMaxConnections},
		{"receiveTimeout", dur("receiveTimeout"), grpcserve.DefaultReceiveTimeout},
		{"maxIncompleteRequests", get(v, "grpc", "limits", "maxIncompleteRequests"), grpcserve.DefaultMaxIncompleteRequests},
		{"maxRecvMsgSize", get(v, "grpc", "limits", "maxRecvMsgSize"), grpcserve.DefaultMaxRecvMsgSize},
		{"maxConnectionIdle", dur("maxConnectionIdle"), grpcserve.DefaultMaxConnectionIdle},
		{"maxConnectionAge", dur("maxConnectionAge"), grpcserve.DefaultMaxConnectionAge},
		{"maxConnectionAgeGrace", dur("maxConnectionAgeGrace"), grpcserve.DefaultMaxConnectionAgeGrace},
		{"keepaliveTime", dur("keepaliveTime"), grpcserve.DefaultKeepaliveTime},
		{"keepaliveTimeout", dur("keepaliveTimeout"), grpcserve.DefaultKeepaliveTimeout},
		{"keepaliveMinTime", dur("keepaliveMinTime"), grpcserve.DefaultKeepaliveMinTime},
		{"keepalivePermitWithoutStream", get(v, "grpc", "limits", "keepalivePermitWithoutStream"), grpcserve.DefaultKeepalivePermitWithoutStream},
	})

	got := grpcArgs(t,
		"--set", "grpc.limits.maxConcurrentStreams=250",
		"--set", "grpc.limits.maxConnections=5000",
		"--set", "grpc.limits.receiveTimeout=2s",
		"--set", "grpc.limits.maxIncompleteRequests=4096",
		"--set", "grpc.limits.maxRecvMsgSize=1048576",
		"--set", "grpc.limits.maxConnectionIdle=0",
		"--set", "grpc.limits.maxConnectionAge=30m",
		"--set", "grpc.limits.maxConnectionAgeGrace=1m",
		"--set", "grpc.limits.keepaliveTime=1m",
		"--set", "grpc.limits.keepaliveTimeout=10s",
		"--set", "grpc.limits.keepaliveMinTime=10s",
		"--set", "grpc.limits.keepalivePermitWithoutStream=false",
	)
	want := []string{
		"--grpc-max-concurrent-streams=250", "--grpc-max-connections=5000", "--grpc-receive-timeout=2s",
		"--grpc-max-incomplete-requests=4096", "--grpc-max-recv-msg-size=1048576", "--grpc-max-connection-idle=0",
		"--grpc-max-connection-age=30m", "--grpc-max-connection-age-grace=1m", "--grpc-keepalive-time=1m",
		"--grpc-keepalive-timeout=10s", "--grpc-keepalive-min-time=10s", "--grpc-keepalive-permit-without-stream=false",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rendered --grpc-* args:\n got %q\nwant %q", got, want)
	}
}

// Values the schema refuses, named in helm's error.
func TestGRPCLimitsSchema(t *testing.T) {
	checkSchemaRefuses(t, []schemaRefusal{
		{"grpc.limits.maxConcurrentStreams=0", "maxConcurrentStreams"},
		{"grpc.limits.maxConnections=-1", "maxConnections"},
		{"grpc.limits.receiveTimeout=5", "receiveTimeout"},
		{"grpc.limits.receiveTimeout=0", "receiveTimeout"},
		{"grpc.limits.keepaliveTime=0s", "keepaliveTime"},
		{"grpc.limits.maxRecvMsgSize=100", "maxRecvMsgSize"},
		{"grpc.limits.maxConnectionAge=forever", "maxConnectionAge"},
		{"grpc.limits.maxConectionAge=5m", "maxConectionAge"},
	})
}
