package helm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/options"
)

// statsdArgs are the rendered container's statsd flags.
func statsdArgs(t *testing.T, args ...string) []string {
	t.Helper()
	return containerArgs(t, func(a string) bool {
		return strings.HasPrefix(a, "--statsd-") || strings.HasPrefix(a, "--near-limit-ratio")
	}, args...)
}

// The statsd values default to the binary's defaults and to off; set, each
// reaches its flag (render runs the args through app.CheckServeArgs), and a
// restricted egress admits the statsd port.
func TestStatsd(t *testing.T) {
	v := deploytest.ChartValues(t)
	flush, err := time.ParseDuration(str(get(v, "statsd", "flushInterval")))
	if err != nil {
		t.Fatalf("statsd.flushInterval: %v", err)
	}
	checkDefaults(t, "statsd.", []valueDefault{
		{"addr", get(v, "statsd", "addr"), ""},
		{"protocol", get(v, "statsd", "protocol"), options.DefaultStatsdProtocol},
		{"flushInterval", flush, options.DefaultStatsdFlushInterval},
		{"nearLimitRatio", get(v, "statsd", "nearLimitRatio"), options.DefaultNearLimitRatio},
	})
	if got := statsdArgs(t); len(got) != 0 {
		t.Errorf("statsd flags rendered by default: %q", got)
	}
	got := statsdArgs(t, "--set", "statsd.addr=statsd-exporter:9125", "--set", "statsd.protocol=udp",
		"--set", "statsd.flushInterval=5s", "--set", "statsd.nearLimitRatio=0.9",
		"--set", "statsd.extraTags.zone=b", "--set", "statsd.extraTags.cluster=eu-1")
	want := []string{"--statsd-addr=statsd-exporter:9125", "--statsd-protocol=udp", "--statsd-flush-interval=5s",
		"--near-limit-ratio=0.9", "--statsd-extra-tags=cluster:eu-1,zone:b"}
	if !slices.Equal(got, want) {
		t.Errorf("rendered statsd args:\n got %q\nwant %q", got, want)
	}

	np := one(t, render(t, "--set", "statsd.addr=statsd-exporter:9125", "--set", "statsd.protocol=udp",
		"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.enabled=true"), "NetworkPolicy")
	found := false
	for _, rule := range list(get(np, "spec", "egress")) {
		for _, p := range list(get(rule, "ports")) {
			if fmt.Sprint(get(p, "port")) == "9125" && str(get(p, "protocol")) == "UDP" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("egress does not admit the statsd port 9125/UDP: %v", get(np, "spec", "egress"))
	}
}

// Values the schema refuses, named in helm's error.
func TestStatsdSchema(t *testing.T) {
	checkSchemaRefuses(t, []schemaRefusal{
		{"statsd.addr=statsd", "addr"},
		{"statsd.protocol=sctp", "protocol"},
		{"statsd.flushInterval=0s", "flushInterval"},
		{"statsd.flushInterval=10", "flushInterval"},
		{"statsd.nearLimitRatio=0", "nearLimitRatio"},
		{"statsd.nearLimitRatio=1.5", "nearLimitRatio"},
		{"statsd.extraTags.a=x\\,y", "extraTags"},
	})
}
