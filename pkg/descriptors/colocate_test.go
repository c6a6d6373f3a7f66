package descriptors

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

func TestColocate(t *testing.T) {
	s := mustLoad(t, "../../config/examples/07-hierarchical.yaml")
	match := func(entries ...string) Match {
		t.Helper()
		m, ok := s.Match("saas", e(entries...))
		if !ok {
			t.Fatalf("no match for %v", entries)
		}
		return m
	}
	tenant := match("tenant=acme")
	user := match("tenant=acme", "user=bob")
	other := match("tenant=acme", "user=eve")
	elsewhere := match("tenant=globex", "user=bob")
	if tenant.Rule.Colocate != "tenant" || tenant.Tag == (limiter.Tag{}) {
		t.Fatalf("tenant rule: colocate %q tag %x", tenant.Rule.Colocate, tenant.Tag)
	}
	if user.Tag != tenant.Tag || other.Tag != tenant.Tag {
		t.Fatal("a tenant's limits do not share its tag")
	}
	if elsewhere.Tag == tenant.Tag {
		t.Fatal("two tenants share a tag")
	}
	if user.Subject == other.Subject {
		t.Fatal("colocation changed the subjects")
	}
	// Three levels on the org.
	org := match("org=o1")
	key := match("org=o1", "project=p", "api_key=k")
	if key.Tag != org.Tag || match("org=o1", "project=p").Tag != org.Tag {
		t.Fatal("org levels do not share a tag")
	}
	// The tag is the physical key's hash tag, and carries no raw value.
	k1 := string(redis.StorageKey(nil, tenant.Rule.Policy, tenant.Subject, tenant.Tag))
	k2 := string(redis.StorageKey(nil, user.Rule.Policy, user.Subject, user.Tag))
	if k1[:23] != k2[:23] || !strings.Contains(k1, "{"+hex.EncodeToString(tenant.Tag[:])+"}") {
		t.Fatalf("keys %s and %s do not share the hash tag", k1, k2)
	}
	if strings.Contains(k1, "acme") || bytes.Contains(tenant.Tag[:], []byte("acme")) {
		t.Fatal("raw value in the key")
	}
	// Another secret: another tag.
	s2, err := Load("../../config/examples/07-hierarchical.yaml", Options{Secret: []byte("another-secret-of-16+ bytes")})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := s2.Match("saas", e("tenant=acme")); m.Tag == tenant.Tag {
		t.Fatal("the tag does not depend on the secret")
	}
	// Without colocate the tag is zero (derived from the subject).
	plain := mustLoad(t, "../../config/examples/03-shadow.yaml")
	if m, ok := plain.Match("shadow", e("service=search", "user=u")); !ok || m.Tag != (limiter.Tag{}) {
		t.Fatalf("no colocate: tag %x", m.Tag)
	}
}

func TestColocateErrors(t *testing.T) {
	_, err := Load(ruleFile(t, `domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: user
        colocate: org
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: x
    colocate: ""
    rate_limit: {unit: second, requests_per_unit: 1}
`), Options{Secret: testSecret})
	if err == nil || !strings.Contains(err.Error(), `rules.yaml:6`) || !strings.Contains(err.Error(), `colocate names "org"`) ||
		!strings.Contains(err.Error(), "colocate must name a descriptor key") {
		t.Fatalf("error %v", err)
	}
}
