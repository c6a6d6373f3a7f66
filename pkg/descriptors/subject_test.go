package descriptors

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

func subjectLoad(t testing.TB, secret []byte) *Snapshot {
	t.Helper()
	s, err := Load("testdata/rules", Options{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSubjectEncodingIsInjective(t *testing.T) {
	s := subjectLoad(t, testSecret)
	cases := [][2][]Entry{
		{{{"a", "bc"}}, {{"ab", "c"}}},
		{{{"a", "b"}, {"c", "d"}}, {{"a", "b\x00\x00\x00\x01c"}, {"", "d"}}},
		{{{"a", ""}, {"b", ""}}, {{"a", ""}}},
		{{{"k", "v"}}, {{"k", "v "}}},
		{{{"k", "x"}}, {{"k", "X"}}},
	}
	for i, c := range cases {
		a := s.subject("p", c[0], nil)
		b := s.subject("p", c[1], nil)
		if a == b {
			t.Errorf("case %d: %v and %v share a subject", i, c[0], c[1])
		}
	}
	if s.subject("p1", e("k=v"), nil) == s.subject("p2", e("k=v"), nil) {
		t.Errorf("policy ID not part of the subject")
	}
	if s.subject("p", e("k=v"), nil) != s.subject("p", e("k=v"), nil) {
		t.Errorf("subject is not deterministic")
	}
}

func TestSubjectDependsOnSecret(t *testing.T) {
	a := subjectLoad(t, testSecret)
	b := subjectLoad(t, []byte("another-secret-of-enough-length"))
	ma, _ := a.Match("ref", e("remote_address=10.0.0.1"))
	mb, _ := b.Match("ref", e("remote_address=10.0.0.1"))
	if ma.Subject == mb.Subject {
		t.Errorf("different secrets give one subject")
	}
	if _, err := Load("testdata/rules", Options{Secret: []byte("short")}); err != ErrSecret {
		t.Errorf("short secret: err = %v", err)
	}
}

func TestSubjectPerValueAndShared(t *testing.T) {
	s := loadRules(t)
	m1, _ := s.Match("ref", e("remote_address=10.0.0.1"))
	m2, _ := s.Match("ref", e("remote_address=10.0.0.2"))
	if m1.Subject == m2.Subject {
		t.Errorf("key-only rule: two values share a subject")
	}
	w1, _ := s.Match("wild", e("path=/files/a"))
	w2, _ := s.Match("wild", e("path=/files/b"))
	if w1.Subject == w2.Subject {
		t.Errorf("wildcard without share_threshold: two values share a subject")
	}
	s1, _ := s.Match("wild", e("api_key=team-a-1"))
	s2, _ := s.Match("wild", e("api_key=team-a-2"))
	if s1.Subject != s2.Subject {
		t.Errorf("share_threshold: values do not share a subject")
	}
	// The shared subject is not the subject of the literal pattern value
	// (encoded with another tag).
	if lit := s.subject(s1.Rule.Policy.ID(), e("api_key=team-a-*"), nil); lit == s1.Subject {
		t.Errorf("shared subject equals the subject of a literal value")
	}
}

// TestStorageKeyPrivacy checks that the physical key built from a match
// carries no raw value and spreads subjects over hash tags.
func TestStorageKeyPrivacy(t *testing.T) {
	s := loadRules(t)
	secretValues := []string{"10.0.0.1", "2061111111", "bkthomps", "user-a", "team-a-1"}
	reqs := [][]Entry{
		e("remote_address=10.0.0.1"),
		e("message_type=marketing", "to_number=2061111111"),
		e("key_1=value_1", "user=bkthomps"),
		e("service=auth", "user=user-a"),
	}
	tags := map[string]bool{}
	keys := map[string]bool{}
	for _, r := range reqs {
		m, ok := s.Match("ref", r)
		if !ok {
			t.Fatalf("no match for %v", r)
		}
		k := redis.StorageKey(nil, m.Rule.Policy, m.Subject, limiter.Tag{})
		for _, v := range secretValues {
			if bytes.Contains(k, []byte(v)) || bytes.Contains(k, []byte(hex.EncodeToString([]byte(v)))) {
				t.Errorf("key %q contains raw value %q", k, v)
			}
		}
		if !bytes.HasPrefix(k, []byte("rate:{")) || !bytes.Contains(k, []byte("}:state:")) {
			t.Errorf("key %q lacks the expected shape", k)
		}
		tag := string(k[:bytes.IndexByte(k, '}')])
		tags[tag] = true
		keys[string(k)] = true
	}
	if len(tags) != len(reqs) || len(keys) != len(reqs) {
		t.Errorf("keys or tags collide: %d tags, %d keys for %d requests", len(tags), len(keys), len(reqs))
	}
	// A new revision rolls the key; the subject stays.
	a := writeAndMatch(t, "revision: 1")
	b := writeAndMatch(t, "revision: 2")
	if a.Subject != b.Subject {
		t.Errorf("revision changed the subject")
	}
	if bytes.Equal(redis.StorageKey(nil, a.Rule.Policy, a.Subject, limiter.Tag{}), redis.StorageKey(nil, b.Rule.Policy, b.Subject, limiter.Tag{})) {
		t.Errorf("revision did not roll the key")
	}
	c := writeAndMatch(t, "algorithm: sliding_window")
	if bytes.Equal(redis.StorageKey(nil, a.Rule.Policy, a.Subject, limiter.Tag{}), redis.StorageKey(nil, c.Rule.Policy, c.Subject, limiter.Tag{})) {
		t.Errorf("algorithm did not roll the key")
	}
}

func writeAndMatch(t *testing.T, ext string) Match {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir+"/r.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5, "+ext+"}\n")
	s := mustLoad(t, dir)
	m, ok := s.Match("d", e("user=alice"))
	if !ok {
		t.Fatal("no match")
	}
	return m
}

// matchInputs are the descriptors of testdata/rules that the allocation
// test and the benchmark match: each kind of rule, and a miss.
var matchInputs = []struct {
	name, domain string
	entries      []Entry
}{
	{"exact", "ref", e("database=users")},
	{"key-only", "ref", e("remote_address=10.11.12.13")},
	{"nested-2", "ref", e("message_type=marketing", "to_number=2061111111")},
	{"wildcard-middle", "wild", e("path=/a123/b456/c")},
	{"wildcard-share", "wild", e("api_key=team-a-1")},
	{"long-value", "ref", e("remote_address=" + strings.Repeat("x", 1024))},
	{"miss", "ref", e("nope=x")},
}

func TestMatchAllocations(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts are not meaningful under -race or -cover")
	}
	s := loadRules(t)
	for _, tc := range matchInputs {
		n := testing.AllocsPerRun(200, func() { s.Match(tc.domain, tc.entries) })
		if n > 0 {
			t.Errorf("Match(%v) allocates %.1f times per call", tc.entries, n)
		}
	}
	ov := e("a=b")
	n := testing.AllocsPerRun(200, func() { s.Override("ref", ov, 5, UnitSecond, 1) })
	if n > 0 {
		t.Errorf("cached Override allocates %.1f times per call", n)
	}
}

func BenchmarkMatch(b *testing.B) {
	s := loadRules(b)
	for _, c := range matchInputs {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s.Match(c.domain, c.entries)
				}
			})
		})
	}
	b.Run("override-cached", func(b *testing.B) {
		b.ReportAllocs()
		ents := e("generic_key=x", "user=alice")
		for b.Loop() {
			s.Override("ref", ents, 10, UnitMinute, 0)
		}
	})
}

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

// TestWithSecret: a snapshot keyed again with another secret matches as
// one compiled with that secret — subjects, colocation tags, configuration
// digests — and leaves the original as it was.
func TestWithSecret(t *testing.T) {
	const path = "../../config/examples/07-hierarchical.yaml"
	other := []byte("another-secret-of-16+ bytes")
	placeholder := mustLoad(t, path)
	compiled, err := Load(path, Options{Secret: other})
	if err != nil {
		t.Fatal(err)
	}
	rekeyed, err := placeholder.WithSecret(other)
	if err != nil {
		t.Fatal(err)
	}
	for _, entries := range [][]string{{"tenant=acme"}, {"tenant=acme", "user=bob"}, {"org=o1", "project=p", "api_key=k"}} {
		want, ok := compiled.Match("saas", e(entries...))
		if !ok {
			t.Fatalf("%v: no match", entries)
		}
		got, _ := rekeyed.Match("saas", e(entries...))
		before, _ := placeholder.Match("saas", e(entries...))
		if got.Subject != want.Subject || got.Tag != want.Tag {
			t.Errorf("%v: rekeyed subject %x tag %x, want those of a compile with the secret: %x %x", entries, got.Subject, got.Tag, want.Subject, want.Tag)
		}
		if before.Subject == want.Subject {
			t.Errorf("%v: the original snapshot's subject changed with the rekeyed one", entries)
		}
		if got.Rule.Policy != before.Rule.Policy {
			t.Errorf("%v: the rekeyed snapshot compiled its rules again", entries)
		}
	}
	// Configuration digests, on rules that hold values.
	valued, err := subjectLoad(t, testSecret).WithSecret(other)
	if err != nil {
		t.Fatal(err)
	}
	got, want := fmt.Sprint(valued.DomainsDigested()), fmt.Sprint(subjectLoad(t, other).DomainsDigested())
	if got != want || !strings.Contains(got, "hmac:") {
		t.Errorf("configuration digests:\n got %v\nwant %v", got, want)
	}
	if rekeyed.Fingerprint() != placeholder.Fingerprint() {
		t.Error("the rekeyed snapshot's fingerprint changed: its input did not")
	}
	if _, err := placeholder.WithSecret([]byte("short")); err != ErrSecret {
		t.Errorf("short secret: %v, want ErrSecret", err)
	}
}
