package helm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/options"
)

// auditArgs are the rendered container's audit flags.
func auditArgs(t *testing.T, args ...string) []string {
	t.Helper()
	return containerArgs(t, func(a string) bool { return strings.HasPrefix(a, "--audit-") }, args...)
}

// The audit values default to the binary's defaults and to off; set, each
// reaches its flag (render runs the args through the binary's flag checks).
func TestAudit(t *testing.T) {
	v := deploytest.ChartValues(t)
	checkDefaults(t, "audit.", []valueDefault{
		{"sink", get(v, "audit", "sink"), ""},
		{"redisStream", get(v, "audit", "redisStream"), options.DefaultAuditRedisStream},
		{"redisMaxLen", get(v, "audit", "redisMaxLen"), options.DefaultAuditRedisMaxLen},
		{"sample", get(v, "audit", "sample"), options.DefaultAuditSample},
		{"queueSize", get(v, "audit", "queueSize"), options.DefaultAuditQueueSize},
		{"requestIdKey", get(v, "audit", "requestIdKey"), ""},
	})
	if got := auditArgs(t); len(got) != 0 {
		t.Errorf("audit flags rendered by default: %q", got)
	}
	redis := []string{"--set", "store=redis", "--set", "redis.addr=redis:6379", "--set", "hmac.existingSecret=hmac"}
	for _, tc := range []struct {
		set  []string
		want []string
	}{
		{append(slices.Clone(redis), "--set", "audit.sink=redis", "--set", "audit.redisStream=rls:audit", "--set", "audit.redisMaxLen=5000",
			"--set", "audit.sample=0.5", "--set", "audit.samplePolicy.edge/user=0.1", "--set", "audit.samplePolicy.edge/ip=1",
			"--set", "audit.queueSize=2000", "--set", "audit.requestIdKey=request_id"),
			[]string{"--audit-sink=redis", "--audit-redis-stream=rls:audit", "--audit-redis-maxlen=5000", "--audit-sample=0.5",
				"--audit-sample-policy=edge/ip=1,edge/user=0.1", "--audit-queue-size=2000", "--audit-request-id-key=request_id"}},
		{[]string{"--set", "audit.sink=stdout"}, []string{"--audit-sink=stdout", "--audit-sample=1", "--audit-queue-size=10000"}},
	} {
		if got := auditArgs(t, tc.set...); !slices.Equal(got, tc.want) {
			t.Errorf("%v: rendered audit args:\n got %q\nwant %q", tc.set, got, tc.want)
		}
	}
	out, err := runHelm(t, "template", "rls", deploytest.ChartDir(t), "--set", "audit.sink=redis")
	if err == nil || !strings.Contains(out+fmt.Sprint(err), "set store: redis") {
		t.Errorf("audit.sink=redis with the memory store rendered: %v\n%s", err, out)
	}
}

// Values the schema refuses, named in helm's error.
func TestAuditSchema(t *testing.T) {
	checkSchemaRefuses(t, []schemaRefusal{
		{"audit.sink=kafka", "sink"},
		{"audit.sink=file", "sink"},
		{"audit.redisMaxLen=0", "redisMaxLen"},
		{"audit.sample=0", "sample"},
		{"audit.sample=1.5", "sample"},
		{"audit.samplePolicy.p=2", "samplePolicy"},
		{"audit.queueSize=0", "queueSize"},
	})
}
