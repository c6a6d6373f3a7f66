package rls

import (
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

func TestCustomHeaderNames(t *testing.T) {
	store := &fakeStore{now: fakeNow}
	fr := &fakeRules{domain: "d", rules: map[string]*descriptors.Rule{"user": fakeRule("per-user", 2, descriptors.UnitMinute)}}
	h := newHarness(t, func() Rules { return fr }, store, limitertest.NewClock(fakeNow), func(c *Config) {
		c.HeaderNames = HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
	})
	hd := headers(h.call(t, request("d", desc("user", "alice"))))
	if hd["RateLimit-Limit"] != "2, 2;w=60" || hd["RateLimit-Remaining"] != "1" || hd["RateLimit-Reset"] != "50" {
		t.Errorf("headers %v, want RateLimit-Limit, -Remaining and -Reset", hd)
	}
	if _, ok := hd[HeaderLimit]; ok {
		t.Errorf("headers %v: the default name is written too", hd)
	}
}

func TestHeaderNamesRefused(t *testing.T) {
	for _, n := range []HeaderNames{
		{Limit: "Rate Limit"}, {Remaining: "a:b"}, {Reset: strings.Repeat("x", 129)},
		{Limit: "X-A", Remaining: "x-a"},
	} {
		if _, err := n.withDefaults(); err == nil {
			t.Errorf("%+v accepted", n)
		}
	}
	n, err := HeaderNames{Reset: "Reset-In"}.withDefaults()
	if err != nil || n.Limit != HeaderLimit || n.Remaining != HeaderRemaining || n.Reset != "Reset-In" {
		t.Errorf("defaults: %+v, %v", n, err)
	}
}
