package helm_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/grpcserve"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/statsd"
	"github.com/envoy-rls/envoy-rls/internal/store"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// TestDefaultsMatchBinary: where the chart has a value for a serve flag,
// its default is the binary's, so installing the chart with no values runs
// envoy-rls as its own documentation describes. The values that turn a
// feature on (statsd.addr, audit.sink, audit.requestIdKey) default to off.
func TestDefaultsMatchBinary(t *testing.T) {
	v := deploytest.ChartValues(t)
	// Values in other units than the flag's.
	port := func(p any) any { return fmt.Sprintf(":%v", p) }
	convert := map[string]func(any) any{
		"drainTimeoutSeconds": func(s any) any { n, _ := s.(int); return time.Duration(n) * time.Second },
		"grpc.port":           port,
		"admin.port":          port,
	}
	for _, c := range []struct {
		value string
		want  any
	}{
		{"store", options.DefaultStore},
		{"logLevel", options.DefaultLogLevel},
		{"defaultHeaders", options.DefaultHeaders},
		{"readiness", options.DefaultReadiness},
		{"defaultFailureMode", options.DefaultFailureMode},
		{"localFallback.maxEntries", store.DefaultLocalFallbackMaxEntries},
		{"redis.mode", store.DefaultRedisMode},
		{"redis.poolSize", store.DefaultRedisPoolSize},
		{"redis.groupMaxKeys", store.DefaultRedisGroupKeys},
		{"redis.groupInFlight", store.DefaultRedisInFlight},
		{"redis.timeout", store.DefaultRedisTimeout},
		{"drainTimeoutSeconds", options.DefaultDrainTimeout},
		{"memory.maxEntries", 0}, // 0: the binary's automatic bound
		{"grpc.port", options.DefaultGRPCAddr},
		{"admin.port", options.DefaultAdminAddr},
		{"grpc.limits.maxConcurrentStreams", grpcserve.DefaultMaxConcurrentStreams},
		{"grpc.limits.maxConnections", grpcserve.DefaultMaxConnections},
		{"grpc.limits.firstCallTimeout", grpcserve.DefaultFirstCallTimeout},
		{"grpc.limits.receiveTimeout", grpcserve.DefaultReceiveTimeout},
		{"grpc.limits.maxIncompleteRequests", grpcserve.DefaultMaxIncompleteRequests},
		{"grpc.limits.maxRecvMsgSize", grpcserve.DefaultMaxRecvMsgSize},
		{"grpc.limits.maxConnectionIdle", grpcserve.DefaultMaxConnectionIdle},
		{"grpc.limits.maxConnectionAge", grpcserve.DefaultMaxConnectionAge},
		{"grpc.limits.maxConnectionAgeGrace", grpcserve.DefaultMaxConnectionAgeGrace},
		{"grpc.limits.keepaliveTime", grpcserve.DefaultKeepaliveTime},
		{"grpc.limits.keepaliveTimeout", grpcserve.DefaultKeepaliveTimeout},
		{"grpc.limits.keepaliveMinTime", grpcserve.DefaultKeepaliveMinTime},
		{"grpc.limits.keepalivePermitWithoutStream", grpcserve.DefaultKeepalivePermitWithoutStream},
		{"statsd.addr", ""},
		{"statsd.protocol", statsd.DefaultProtocol},
		{"statsd.flushInterval", statsd.DefaultFlushInterval},
		{"statsd.nearLimitRatio", statsd.DefaultNearLimitRatio},
		{"audit.sink", ""},
		{"audit.redisStream", audit.DefaultRedisStream},
		{"audit.redisMaxLen", audit.DefaultRedisMaxLen},
		{"audit.sample", audit.DefaultSample},
		{"audit.queueSize", audit.DefaultQueueSize},
		{"audit.requestIdKey", ""},
		{"rlqs.enabled", flagDefault(t, "rlqs")},
		// Unset: the binary's own default.
		{"rlqs.tick", ""},
		{"rlqs.assignmentTTL", ""},
		{"rlqs.abandonAfter", ""},
		{"rlqs.maxBucketsPerStream", 0},
		{"rlqs.maxAggregates", 0},
	} {
		got := get(v, strings.Split(c.value, ".")...)
		if f := convert[c.value]; f != nil {
			got = f(got)
		} else if _, isDuration := c.want.(time.Duration); isDuration {
			d, err := time.ParseDuration(str(got))
			if err != nil {
				t.Errorf("values.yaml %s: %v", c.value, err)
				continue
			}
			got = d
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("values.yaml %s defaults to %v; the binary's default is %v", c.value, got, c.want)
		}
	}
}

// flagDefault is the default of the RLQS flag name, as the binary defines it.
func flagDefault(t *testing.T, name string) string {
	t.Helper()
	var f rlqs.Flags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.Define(fs)
	fl := fs.Lookup(name)
	if fl == nil {
		t.Fatalf("no flag --%s", name)
	}
	return fl.DefValue
}

// containerArgs are the args of the rendered Deployment's containers that
// start with one of prefixes, in order.
func containerArgs(t *testing.T, prefixes []string, args ...string) []string {
	t.Helper()
	var out []string
	for _, c := range list(get(one(t, render(t, args...), "Deployment"), "spec", "template", "spec", "containers")) {
		for _, a := range toStrings(list(get(c, "args"))) {
			if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(a, p) }) {
				out = append(out, a)
			}
		}
	}
	return out
}

// TestValueFlags: the values of a feature that is off by default render
// none of its flags; set, each value reaches its flag, in order (render
// runs the args through the binary's own checks, app.CheckServeArgs).
func TestValueFlags(t *testing.T) {
	statsd := []string{"--statsd-", "--near-limit-ratio"}
	grpcLimits := []string{"--grpc-max-", "--grpc-first-call-", "--grpc-receive-", "--grpc-keepalive-"}
	audit := []string{"--audit-"}
	// The reference's LIMIT_*_HEADER settings and its secret-less
	// deployments.
	compat := []string{"--limit-header", "--remaining-header", "--reset-header", "--hmac-secret"}
	redis := []string{"--set", "store=redis", "--set", "redis.addr=redis:6379", "--set", "hmac.existingSecret=hmac"}
	rlqsFlags := []string{"--rlqs"}
	for _, tc := range []struct {
		name     string
		prefixes []string
		set      []string
		want     []string
	}{
		{"statsd off", statsd, nil, nil},
		{"statsd", statsd, []string{"--set", "statsd.addr=statsd-exporter:9125", "--set", "statsd.protocol=udp",
			"--set", "statsd.flushInterval=5s", "--set", "statsd.nearLimitRatio=0.9",
			"--set", "statsd.extraTags.zone=b", "--set", "statsd.extraTags.cluster=eu-1"},
			[]string{"--statsd-addr=statsd-exporter:9125", "--statsd-protocol=udp", "--statsd-flush-interval=5s",
				"--near-limit-ratio=0.9", "--statsd-extra-tags=cluster:eu-1,zone:b"}},
		{"gRPC limits", grpcLimits, []string{
			"--set", "grpc.limits.maxConcurrentStreams=250",
			"--set", "grpc.limits.maxConnections=5000",
			"--set", "grpc.limits.firstCallTimeout=0",
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
		}, []string{
			"--grpc-max-concurrent-streams=250", "--grpc-max-connections=5000", "--grpc-first-call-timeout=0", "--grpc-receive-timeout=2s",
			"--grpc-max-incomplete-requests=4096", "--grpc-max-recv-msg-size=1048576", "--grpc-max-connection-idle=0",
			"--grpc-max-connection-age=30m", "--grpc-max-connection-age-grace=1m", "--grpc-keepalive-time=1m",
			"--grpc-keepalive-timeout=10s", "--grpc-keepalive-min-time=10s", "--grpc-keepalive-permit-without-stream=false",
		}},
		{"audit off", audit, nil, nil},
		{"audit to Redis", audit, cat(redis, []string{"--set", "audit.sink=redis", "--set", "audit.redisStream=rls:audit", "--set", "audit.redisMaxLen=5000",
			"--set", "audit.sample=0.5", "--set", "audit.samplePolicy.edge/user=0.1", "--set", "audit.samplePolicy.edge/ip=1",
			"--set", "audit.queueSize=2000", "--set", "audit.requestIdKey=request_id"}),
			[]string{"--audit-sink=redis", "--audit-redis-stream=rls:audit", "--audit-redis-maxlen=5000", "--audit-sample=0.5",
				"--audit-sample-policy=edge/ip=1,edge/user=0.1", "--audit-queue-size=2000", "--audit-request-id-key=request_id"}},
		{"audit to stdout", audit, []string{"--set", "audit.sink=stdout"}, []string{"--audit-sink=stdout", "--audit-sample=1", "--audit-queue-size=10000"}},
		{"header names unset", compat, nil, nil},
		{"header names", compat, []string{"--set", "headerNames.limit=RateLimit-Limit", "--set", "headerNames.remaining=RateLimit-Remaining",
			"--set", "headerNames.reset=RateLimit-Reset"},
			[]string{"--limit-header=RateLimit-Limit", "--remaining-header=RateLimit-Remaining", "--reset-header=RateLimit-Reset"}},
		// RLQS is on by default: nothing rendered until a value is set.
		{"RLQS by default", rlqsFlags, nil, nil},
		{"RLQS off", rlqsFlags, []string{"--set", "rlqs.enabled=false", "--set", "rlqs.tick=500ms"}, []string{"--rlqs=false"}},
		{"RLQS tuned", rlqsFlags, []string{"--set", "rlqs.tick=500ms", "--set", "rlqs.assignmentTTL=30s", "--set", "rlqs.abandonAfter=10m",
			"--set", "rlqs.maxBucketsPerStream=500", "--set", "rlqs.maxAggregates=2000"},
			[]string{"--rlqs-tick=500ms", "--rlqs-assignment-ttl=30s", "--rlqs-abandon-after=10m", "--rlqs-max-buckets-per-stream=500", "--rlqs-max-aggregates=2000"}},
		{"HMAC secret shared through Redis", compat, cat(redisBase, []string{"--set", "hmac.redisKey=team-a:envoy-rls:hmac-secret"}),
			[]string{"--hmac-secret-redis-key=team-a:envoy-rls:hmac-secret"}},
	} {
		if got := containerArgs(t, tc.prefixes, tc.set...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: rendered %q args:\n got %q\nwant %q", tc.name, tc.prefixes, got, tc.want)
		}
	}
}

// TestSchemaCoversValues: values.schema.json describes every key of
// values.yaml (and nothing else), so that with additionalProperties false a
// typo is refused and no value escapes its type or range.
func TestSchemaCoversValues(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(chartFile(t, "values.schema.json"), &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("values.schema.json $schema %v: want draft-07", schema["$schema"])
	}
	values := deploytest.ChartValues(t)
	var walk func(v any, s map[string]any, path string)
	walk = func(v any, s map[string]any, path string) {
		props, hasProps := s["properties"].(map[string]any)
		m, isMap := v.(map[string]any)
		if !isMap || !hasProps {
			if s["type"] == nil && s["anyOf"] == nil && s["enum"] == nil {
				t.Errorf("schema %s: no type", path)
			}
			return
		}
		// false, or a schema every further key must meet (resource
		// quantities: extended resources have names of their own).
		if ap, ok := s["additionalProperties"]; !ok || ap == true {
			t.Errorf("schema %s: additionalProperties is not false, so a typo'd key passes", path)
		}
		for k, sub := range m {
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("values.yaml %s.%s: not in values.schema.json", path, k)
				continue
			}
			walk(sub, ps, path+"."+k)
		}
		for k := range props {
			if _, ok := m[k]; !ok && !(path == "" && k == "global") {
				t.Errorf("values.schema.json %s.%s: not in values.yaml", path, k)
			}
		}
	}
	walk(values, schema, "")
}

// TestSchema: values that would render a pod the binary refuses, or a
// manifest Kubernetes refuses, are stopped by values.schema.json at
// helm template/install; the values next to them pass, and their
// rendered args pass the binary's checks.
func TestSchema(t *testing.T) {
	redis := cat(redisBase, withHMAC)
	bad := []struct {
		args []string
		key  string // named in helm's schema error
	}{
		{[]string{"--set", "redis.timeout=50"}, "timeout"},
		{[]string{"--set-string", "redis.timeout=50"}, "timeout"},
		{[]string{"--set", "redis.timeout=0s"}, "timeout"},
		{[]string{"--set", "redis.timeout=0.0s"}, "timeout"},
		{[]string{"--set", "redis.timeout=2m"}, "timeout"},
		{[]string{"--set", "redis.timeout=61s"}, "timeout"},
		{[]string{"--set", "redis.timeout=100us"}, "timeout"},
		{[]string{"--set", "store=mongo"}, "store"},
		{[]string{"--set", "redis.mode=foo"}, "mode"},
		{[]string{"--set", "redis.poolSize=0"}, "poolSize"},
		{[]string{"--set", "redis.poolSize=257"}, "poolSize"},
		{[]string{"--set", "redis.groupMaxKeys=0"}, "groupMaxKeys"},
		{[]string{"--set", "redis.groupInFlight=65"}, "groupInFlight"},
		{[]string{"--set", "redsi.addr=redis:6379"}, "redsi"},
		{[]string{"--set", "redis.adr=redis:6379"}, "adr"},
		{[]string{"--set", "redis.addr=redis"}, "addr"},
		{[]string{"--set", "grpc.port=0"}, "port"},
		{[]string{"--set", "admin.port=70000"}, "port"},
		{[]string{"--set", "logLevel=verbose"}, "logLevel"},
		{[]string{"--set", "defaultHeaders=some"}, "defaultHeaders"},
		{[]string{"--set", "memory.maxEntries=-1"}, "maxEntries"},
		{[]string{"--set", "replicaCount=two"}, "replicaCount"},
		{[]string{"--set", "drainTimeoutSeconds=0"}, "drainTimeoutSeconds"},
		{[]string{"--set", "image.pullPolicy=Sometimes"}, "pullPolicy"},
		{[]string{"--set-string", "rules.files.rules\\.txt=domain: x"}, "rules.txt"},
		{[]string{"--set", "extraArgs[0]=debug"}, "extraArgs"},
		{[]string{"--set", "networkPolicy.egress.redisPorts[0]=0"}, "redisPorts"},
		{[]string{"--set", "startupProbe.failureThreshold=0"}, "failureThreshold"},
		{[]string{"--set", "service.type=External"}, "type"},
		{[]string{"--set", "autoscaling.targetCPUUtilizationPercentage=high"}, "targetCPUUtilizationPercentage"},
		{[]string{"--set", "podDisruptionBudget.maxUnavailable=lots"}, "maxUnavailable"},
		{[]string{"--set", "serviceMonitor.interval=30"}, "interval"},
		{[]string{"--set", "rulesCheck.enabled=yes please"}, "enabled"},
		{[]string{"--set", "statsd.addr=statsd"}, "addr"},
		{[]string{"--set", "statsd.protocol=sctp"}, "protocol"},
		{[]string{"--set", "statsd.flushInterval=0s"}, "flushInterval"},
		{[]string{"--set", "statsd.flushInterval=10"}, "flushInterval"},
		{[]string{"--set", "statsd.nearLimitRatio=0"}, "nearLimitRatio"},
		{[]string{"--set", "statsd.nearLimitRatio=1.5"}, "nearLimitRatio"},
		{[]string{"--set", "statsd.extraTags.a=x\\,y"}, "extraTags"},
		{[]string{"--set", "grpc.limits.maxConcurrentStreams=0"}, "maxConcurrentStreams"},
		{[]string{"--set", "grpc.limits.maxConnections=-1"}, "maxConnections"},
		{[]string{"--set", "grpc.limits.receiveTimeout=5"}, "receiveTimeout"},
		{[]string{"--set", "grpc.limits.receiveTimeout=0"}, "receiveTimeout"},
		{[]string{"--set", "grpc.limits.keepaliveTime=0s"}, "keepaliveTime"},
		{[]string{"--set", "grpc.limits.maxRecvMsgSize=100"}, "maxRecvMsgSize"},
		{[]string{"--set", "grpc.limits.maxConnectionAge=forever"}, "maxConnectionAge"},
		{[]string{"--set", "grpc.limits.maxConectionAge=5m"}, "maxConectionAge"},
		{[]string{"--set", "audit.sink=kafka"}, "sink"},
		{[]string{"--set", "audit.sink=file"}, "sink"},
		{[]string{"--set", "audit.redisMaxLen=0"}, "redisMaxLen"},
		{[]string{"--set", "audit.sample=0"}, "sample"},
		{[]string{"--set", "audit.sample=1.5"}, "sample"},
		{[]string{"--set", "audit.samplePolicy.p=2"}, "samplePolicy"},
		{[]string{"--set", "audit.queueSize=0"}, "queueSize"},
		{[]string{"--set", "headerNames.limit=X Limit"}, "limit"},
		{[]string{"--set", "headerNames.reset=X:Reset"}, "reset"},
		{[]string{"--set", "prometheusRule.runbookBaseURL=docs/runbook.md"}, "runbookBaseURL"},
		{[]string{"--set", "prometheusRule.runbookBaseURL=https://x/ops.md#top"}, "runbookBaseURL"},
		{[]string{"--set", "grafanaDashboard.label="}, "label"},
		{[]string{"--set", "grafanaDashboard.namespace=Monitoring"}, "namespace"},
		{[]string{"--set", "grafanaDashboard.extra=1"}, "extra"},
		{[]string{"--set", "rlqs.enabled=yes"}, "enabled"},
		{[]string{"--set", "rlqs.tick=1"}, "tick"},
		{[]string{"--set", "rlqs.tick=50ms"}, "tick"},
		{[]string{"--set", "rlqs.tick=20s"}, "tick"},
		{[]string{"--set", "rlqs.assignmentTTL=1500ms"}, "assignmentTTL"},
		{[]string{"--set", "rlqs.assignmentTTL=2m"}, "assignmentTTL"},
		{[]string{"--set", "rlqs.abandonAfter=500ms"}, "abandonAfter"},
		{[]string{"--set", "rlqs.maxBucketsPerStream=-1"}, "maxBucketsPerStream"},
		{[]string{"--set", "rlqs.maxAggregates=2000000"}, "maxAggregates"},
		{[]string{"--set", "rlqs.maxBuckets=10"}, "maxBuckets"},
	}
	for _, tc := range bad {
		t.Run("refuses "+strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := runHelm(t, append([]string{"template", "rls", deploytest.ChartDir(t)}, cat(redis, tc.args)...)...)
			if err == nil {
				t.Fatalf("helm template %v rendered; the schema must refuse it", tc.args)
			}
			if !strings.Contains(out, "schema") || !strings.Contains(out, tc.key) {
				t.Fatalf("helm template %v failed, but not on the schema naming %q:\n%s", tc.args, tc.key, out)
			}
		})
	}
	good := [][]string{
		{"--set", "redis.timeout=50ms"},
		{"--set", "redis.timeout=1ms"},
		{"--set", "redis.timeout=0.25s"},
		{"--set", "redis.timeout=2s"},
		{"--set", "redis.timeout=60000ms"},
		{"--set", "redis.timeout=1m"},
		{"--set", "redis.poolSize=256"},
		{"--set", "redis.mode=standalone", "--set", "redis.addr=redis:6379"},
		{"--set", "redis.mode=cluster"},
		{"--set", "redis.mode=sentinel", "--set", "redis.sentinelMaster=mymaster", "--set", "networkPolicy.egress.redisPorts[0]=26379"},
		{"--set", "logLevel=debug", "--set", "defaultHeaders=none", "--set", "extraArgs[0]=--local-cache=false"},
		{"--set", "podDisruptionBudget.maxUnavailable=25%", "--set", "autoscaling.enabled=true", "--set", "autoscaling.targetMemoryUtilizationPercentage=80"},
		{"--set", "service.type=LoadBalancer", "--set", "grpc.port=9081", "--set", "admin.port=9080"},
		// The edges of the RLQS ranges the schema holds, which the binary
		// must accept too (render checks the args with it).
		{"--set", "rlqs.tick=100ms", "--set", "rlqs.assignmentTTL=1s", "--set", "rlqs.abandonAfter=1s",
			"--set", "rlqs.maxBucketsPerStream=1000000", "--set", "rlqs.maxAggregates=1"},
		{"--set", "rlqs.tick=9999ms", "--set", "rlqs.assignmentTTL=60s"},
		{"--set", "rlqs.tick=10s", "--set", "rlqs.assignmentTTL=1m", "--set", "rlqs.abandonAfter=24h"},
		{"--set", "rlqs.tick=2.5s"},
	}
	for _, args := range good {
		t.Run("accepts "+strings.Join(args, " "), func(t *testing.T) {
			render(t, cat(redis, args)...)
		})
	}
	for _, args := range [][]string{
		{"--set", "memory.maxEntries=500000"},
		{"--set", "resources.limits.memory=null"},
		{"--set", "replicaCount=0"},
	} {
		t.Run("accepts "+strings.Join(args, " "), func(t *testing.T) {
			render(t, args...)
		})
	}
}
