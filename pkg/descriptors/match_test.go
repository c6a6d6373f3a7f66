package descriptors

import (
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func TestMatchTable(t *testing.T) {
	s := loadRules(t)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		path    string // "" = no match
		id      string // "" = do not check ("-" = unlimited, no policy)
		rpu     uint32
	}{
		// reference.yaml
		{"value-specific", "ref", e("database=users"), "ref/database=users", "ref/database:users", 500},
		{"unit upper case", "ref", e("database=default"), "ref/database=default", "ref/database:default", 500},
		{"no key-only rule for database", "ref", e("database=other"), "", "", 0},
		{"nested per value", "ref", e("message_type=marketing", "to_number=2061111111"), "ref/message_type=marketing/to_number", "ref/message_type:marketing/to_number", 5},
		{"nested placeholder has no limit", "ref", e("message_type=marketing"), "", "", 0},
		{"nested unknown value", "ref", e("message_type=other", "to_number=1"), "", "", 0},
		{"top-level key-only", "ref", e("to_number=2061111111"), "ref/to_number", "ref/to_number", 100},
		{"key-only", "ref", e("remote_address=50.0.0.1"), "ref/remote_address", "ref/remote_address", 10},
		{"exact beats key-only, zero limit", "ref", e("remote_address=50.0.0.5"), "ref/remote_address=50.0.0.5", "ref/remote_address:50.0.0.5", 0},
		{"empty value uses key-only", "ref", e("remote_address="), "ref/remote_address", "ref/remote_address", 10},
		{"unlimited", "ref", e("ldap=x"), "ref/ldap", "-", 0},
		{"minute", "ref", e("azure=x"), "ref/azure", "ref/azure", 100},
		{"shadow", "ref", e("service=auth", "user=user-a"), "ref/service/user=user-a", "ref/service/user:user-a", 10},
		{"not shadow", "ref", e("service=auth", "user=user-b"), "ref/service/user=user-b", "ref/service/user:user-b", 20},
		{"named rule ID by name", "ref", e("key_1=value_1", "user=bkthomps"), "ref/key_1=value_1/user=bkthomps", "ref:specific_limit", 5},
		{"replacing rule", "ref", e("key_2=value_2", "user=bkthomps"), "ref/key_2=value_2/user=bkthomps", "ref/key_2:value_2/user:bkthomps", 10},
		{"detailed_metric", "ref", e("key1=anything"), "ref/key1", "ref/key1", 10},
		{"value_to_metric", "ref", e("key1=value1"), "ref/key1=value1", "ref/key1:value1", 20},
		{"depth must match: too many entries", "ref", e("database=users", "x=y"), "", "", 0},
		{"level one rule with children, one entry", "ref", e("tenant=t1"), "ref/tenant", "ref/tenant", 1000},
		{"level one rule with children, two entries", "ref", e("tenant=t1", "route=/login"), "ref/tenant/route=/login", "", 5},
		{"child does not match", "ref", e("tenant=t1", "route=/other"), "", "", 0},
		{"unknown key", "ref", e("nope=x"), "", "", 0},
		{"unknown domain", "nope", e("database=users"), "", "", 0},
		{"no entries", "ref", nil, "", "", 0},

		// wildcards.yaml
		{"trailing wildcard", "wild", e("path=/files/a/b.txt"), "wild/path=/files/*", "", 1},
		{"exact beats wildcard", "wild", e("path=/files/exact"), "wild/path=/files/exact", "", 4},
		{"first wildcard in file order wins", "wild", e("path=/files/x.png"), "wild/path=/files/*", "", 1},
		{"leading wildcard", "wild", e("path=/img/x.png"), "wild/path=*.png", "", 2},
		{"middle wildcards", "wild", e("path=/a1/b2/c"), "wild/path=/a*/b*/c", "", 3},
		{"middle wildcards, empty stars", "wild", e("path=/a/b/c"), "wild/path=/a*/b*/c", "", 3},
		{"middle wildcards, no match falls back to key-only", "wild", e("path=/a1/c"), "wild/path", "wild/path", 5},
		{"prefix and suffix must not overlap", "wild", e("path=.png"), "wild/path=*.png", "", 2},
		{"lone star", "wild", e("method=GET"), "wild/method=*", "", 6},
		{"lone star, empty value", "wild", e("method="), "wild/method=*", "", 6},
		{"share_threshold", "wild", e("api_key=team-a-1"), "wild/api_key=team-a-*", "", 7},
		{"wildcard without share", "wild", e("api_key=team-b-1"), "wild/api_key=team-b-*", "", 8},
		{"wildcard no match", "wild", e("api_key=team-c-1"), "", "", 0},
		{"nested under wildcard", "wild", e("cluster=eu-west", "user=u1"), "wild/cluster=eu-*/user", "", 9},
		{"nested under wildcard, no match", "wild", e("cluster=us-east", "user=u1"), "", "", 0},

		// extensions.yaml
		{"named policy", "ext", e("route=/login"), "ext/route=/login", "ext/route:_login--", 10},
		{"named policy reused", "ext", e("route=/signup"), "ext/route=/signup", "", 10},
		{"token bucket policy", "ext", e("route=/upload"), "ext/route=/upload", "", 100},
		{"every extension", "ext", e("route=/search"), "ext/route=/search", "ext:search", 1000},
		{"lossy key", "ext", e("User-Agent=Bad Bot/1.0"), "ext/User-Agent=Bad Bot/1.0", "ext/user-agent:bad_bot_1.0--", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := s.Match(tt.domain, tt.entries)
			if tt.path == "" {
				if ok {
					t.Fatalf("Match = %q, want no match", m.Rule.Path)
				}
				return
			}
			if !ok {
				t.Fatalf("no match, want %q", tt.path)
			}
			if m.Rule.Path != tt.path {
				t.Fatalf("Path = %q, want %q", m.Rule.Path, tt.path)
			}
			if m.Rule.RequestsPerUnit != tt.rpu {
				t.Errorf("RequestsPerUnit = %d, want %d", m.Rule.RequestsPerUnit, tt.rpu)
			}
			switch {
			case tt.id == "-":
				if m.Rule.Policy != nil || !m.Rule.Unlimited {
					t.Errorf("want an unlimited rule without policy")
				}
				if m.Subject != (limiter.SubjectDigest{}) {
					t.Errorf("unlimited rule has a subject")
				}
				return
			case strings.HasSuffix(tt.id, "--"):
				if !strings.HasPrefix(m.Rule.Policy.ID(), tt.id) || len(m.Rule.Policy.ID()) != len(tt.id)+idHashHex {
					t.Errorf("policy ID = %q, want %q + %d hex digits", m.Rule.Policy.ID(), tt.id, idHashHex)
				}
			case tt.id != "":
				if m.Rule.Policy.ID() != tt.id {
					t.Errorf("policy ID = %q, want %q", m.Rule.Policy.ID(), tt.id)
				}
			}
			if m.Rule.Policy == nil {
				t.Fatalf("limited rule without policy")
			}
			if m.Rule.Policy.Limit() != int64(tt.rpu) && m.Rule.Policy.Algorithm() != limiter.TokenBucket {
				t.Errorf("policy limit = %d, want %d", m.Rule.Policy.Limit(), tt.rpu)
			}
			if m.Subject == (limiter.SubjectDigest{}) {
				t.Errorf("zero subject")
			}
		})
	}
}

func TestRuleFlagsAndExtensions(t *testing.T) {
	s := loadRules(t)
	get := func(domain string, entries []Entry) *Rule {
		t.Helper()
		m, ok := s.Match(domain, entries)
		if !ok {
			t.Fatalf("no match for %v", entries)
		}
		return m.Rule
	}
	if r := get("ref", e("service=a", "user=user-a")); !r.ShadowMode || !r.Policy.Shadow() {
		t.Errorf("shadow_mode not set on rule or policy")
	}
	if r := get("ref", e("service=a", "user=user-b")); r.ShadowMode || r.Policy.Shadow() {
		t.Errorf("shadow_mode set on a plain rule")
	}
	if r := get("ref", e("key_2=value_2", "user=bkthomps")); len(r.Replaces) != 1 || r.Replaces[0] != "specific_limit" {
		t.Errorf("Replaces = %v", r.Replaces)
	}
	if r := get("ref", e("key_1=value_1", "user=bkthomps")); r.Name != "specific_limit" {
		t.Errorf("Name = %q", r.Name)
	}
	if r := get("ref", e("key1=x")); !r.DetailedMetric || r.ValueToMetric {
		t.Errorf("detailed_metric/value_to_metric = %v/%v", r.DetailedMetric, r.ValueToMetric)
	}
	if r := get("ref", e("key1=value1")); r.DetailedMetric || !r.ValueToMetric {
		t.Errorf("detailed_metric/value_to_metric = %v/%v", r.DetailedMetric, r.ValueToMetric)
	}
	if r := get("ref", e("database=users")); r.Unit != UnitSecond || r.Window() != time.Second || r.Policy.Algorithm() != limiter.FixedWindow ||
		r.Policy.FailureMode() != limiter.FailClosed || r.Policy.Revision() != 1 || r.Headers != HeadersDefault || r.Source != "testdata/rules/reference.yaml:6" {
		t.Errorf("reference defaults wrong: %+v", r)
	}
	if r := get("wild", e("api_key=team-a-x")); !r.ShareThreshold {
		t.Errorf("share_threshold not set")
	}

	login := get("ext", e("route=/login"))
	if login.PolicyName != "login" || login.Unit != UnitMinute || login.UnitMultiplier != 5 || login.Window() != 5*time.Minute ||
		login.Policy.Algorithm() != limiter.SlidingWindow || login.Policy.FailureMode() != limiter.FailOpen ||
		login.Headers != HeadersRetryAfter || login.Policy.WindowMillis() != 300_000 {
		t.Errorf("named policy login wrong: %+v", login)
	}
	signup := get("ext", e("route=/signup"))
	if !signup.QuotaMode || signup.Policy.ID() == login.Policy.ID() {
		t.Errorf("reused policy: quota %v, ids %q %q", signup.QuotaMode, signup.Policy.ID(), login.Policy.ID())
	}
	up := get("ext", e("route=/upload"))
	if prm, ok := up.Policy.Params().(limiter.TokenBucketParams); !ok || prm.Capacity != 300 || prm.RefillAmount != 100 || prm.RefillPeriod != time.Second || up.Burst != 300 {
		t.Errorf("token bucket params = %#v", up.Policy.Params())
	}
	tb := get("ext", e("route=/tb-default"))
	if prm, ok := tb.Policy.Params().(limiter.TokenBucketParams); !ok || prm.Capacity != 20 || prm.RefillAmount != 20 {
		t.Errorf("token bucket default burst = %#v", tb.Policy.Params())
	}
	search := get("ext", e("route=/search"))
	if search.Policy.Revision() != 3 || search.Headers != HeadersNone || search.Unit != UnitHour ||
		search.Metadata["owner"] != "search-team" || search.Metadata["ticket"] != 42 {
		t.Errorf("search rule wrong: %+v", search)
	}
	for route, want := range map[string]time.Duration{"/week": 7 * 24 * time.Hour, "/month": 30 * 24 * time.Hour, "/year": 365 * 24 * time.Hour} {
		if r := get("ext", e("route="+route)); r.Window() != want || r.Policy.WindowMillis() != want.Milliseconds() {
			t.Errorf("%s window = %v", route, r.Window())
		}
	}
	if r := get("ext", e("route=/year")); r.Headers != HeadersFull {
		t.Errorf("headers full not parsed")
	}
	g := get("ext", e("route=/gcra"))
	if prm, ok := g.Policy.Params().(limiter.GCRAParams); !ok || prm.Burst != 25 || prm.Limit != 10 || prm.Period != time.Second ||
		g.Burst != 25 || g.Policy.Limit() != 25 {
		t.Errorf("gcra params = %#v, limit %d", g.Policy.Params(), g.Policy.Limit())
	}
	gd := get("ext", e("route=/gcra-default"))
	if prm, ok := gd.Policy.Params().(limiter.GCRAParams); !ok || prm.Burst != 3 || prm.Limit != 3 || prm.Period != time.Minute {
		t.Errorf("gcra default burst = %#v", gd.Policy.Params())
	}
	zb := get("ext", e("route=/zero-bucket"))
	if zb.Policy.Limit() != 0 || zb.Policy.Algorithm() != limiter.TokenBucket {
		t.Errorf("zero token bucket: limit %d", zb.Policy.Limit())
	}
}

func TestPolicyIDStableAcrossLimitChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(rpu, mult string) *Snapshot {
		t.Helper()
		writeFile(t, dir+"/a.yaml", "domain: d\ndescriptors:\n  - key: k\n    value: V/1\n    rate_limit: {unit: minute, requests_per_unit: "+rpu+", unit_multiplier: "+mult+"}\n")
		s := mustLoad(t, dir)
		return s
	}
	a, _ := write("10", "1").Match("d", e("k=V/1"))
	b, _ := write("99", "7").Match("d", e("k=V/1"))
	if a.Rule.Policy.ID() != b.Rule.Policy.ID() {
		t.Errorf("ID changed with the limit: %q -> %q", a.Rule.Policy.ID(), b.Rule.Policy.ID())
	}
	if a.Subject != b.Subject {
		t.Errorf("subject changed with the limit")
	}
}

func TestPolicyIDsAreValidAndDistinct(t *testing.T) {
	s := loadRules(t)
	seen := map[string]string{}
	for _, d := range s.order {
		for _, r := range d.rules {
			if r.Policy == nil {
				continue
			}
			id := r.Policy.ID()
			if prev, dup := seen[id]; dup {
				t.Errorf("ID %q shared by %s and %s", id, prev, r.Path)
			}
			seen[id] = r.Path
		}
	}
}

func TestIDDerivation(t *testing.T) {
	long := strings.Repeat("k", 200)
	tests := []struct {
		name string
		got  string
		want string // prefix when ending in "--"
	}{
		{"clean path", pathID("d", []pathSeg{{"a", ""}, {"b", "c"}}), "d/a/b:c"},
		{"upper case is lossy", pathID("d", []pathSeg{{"A", ""}}), "d/a--"},
		{"slash in value is lossy", pathID("d", []pathSeg{{"a", "b/c"}}), "d/a:b_c--"},
		{"clean name", nameID("d", "n"), "d:n"},
		{"colon in name is lossy", nameID("d", "n:x"), "d:n_x--"},
		{"override", overrideID("d", UnitMinute, 1, e("a=secret", "b=x")), "d:override:minute/a/b"},
		{"override with multiplier", overrideID("d", UnitSecond, 30, e("a=secret")), "d:override:secondx30/a"},
		{"override group", overrideGroup("d"), "d:override"},
		{"override group of a lossy domain", overrideGroup("D.x"), "d.x:override--"},
		{"too long", pathID("d", []pathSeg{{long, ""}}), "d/" + long[:limiter.MaxPolicyIDLength-idSuffixLen-2] + "--"},
	}
	for _, tt := range tests {
		if strings.HasSuffix(tt.want, "--") {
			if !strings.HasPrefix(tt.got, tt.want) || len(tt.got) != len(tt.want)+idHashHex {
				t.Errorf("%s: %q, want %q + hash", tt.name, tt.got, tt.want)
			}
		} else if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
		if _, err := limiter.NewPolicy(limiter.PolicySpec{ID: tt.got, Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}}); err != nil {
			t.Errorf("%s: ID %q rejected: %v", tt.name, tt.got, err)
		}
	}
	// Sanitizing must not merge different rules.
	pairs := [][2]string{
		{pathID("d", []pathSeg{{"a", "b/c"}}), pathID("d", []pathSeg{{"a", "b"}, {"c", ""}})},
		{pathID("d", []pathSeg{{"a", "B"}}), pathID("d", []pathSeg{{"a", "b"}})},
		{pathID("d", []pathSeg{{"a:b", ""}}), pathID("d", []pathSeg{{"a", "b"}})},
		{pathID("d/a", nil), pathID("d", []pathSeg{{"a", ""}})},
		{nameID("d", "a"), pathID("d", []pathSeg{{"a", ""}})},
		{pathID("d", []pathSeg{{long + "x", ""}}), pathID("d", []pathSeg{{long + "y", ""}})},
	}
	for i, p := range pairs {
		if p[0] == p[1] {
			t.Errorf("pair %d: both %q", i, p[0])
		}
	}
}

// TestStatKey checks the reference service's stat key of matched rules:
// key for a key-only level, key_value for a level with a configured value,
// and never the request's value of a key-only level.
func TestStatKey(t *testing.T) {
	s := loadRules(t)
	for _, tc := range []struct {
		entries []Entry
		want    string
	}{
		{e("database=users"), "ref.database_users"},
		{e("message_type=marketing", "to_number=2061111111"), "ref.message_type_marketing.to_number"},
		{e("remote_address=50.0.0.1"), "ref.remote_address"},
		{e("remote_address=50.0.0.5"), "ref.remote_address_50.0.0.5"},
	} {
		m, ok := s.Match("ref", tc.entries)
		if !ok || m.Rule == nil {
			t.Fatalf("%v: no match", tc.entries)
		}
		if m.Rule.StatKey != tc.want {
			t.Errorf("%v: StatKey = %q, want %q", tc.entries, m.Rule.StatKey, tc.want)
		}
	}
}

// Every override of a domain is one group, named by the domain alone:
// distinct keys make distinct policies (own counters) of that one group.
func TestOverrideGroup(t *testing.T) {
	s := loadRules(t)
	a, okA := s.Override("ref", e("atk_key_1=x"), 5, UnitYear, 1)
	b, okB := s.Override("ref", e("atk_key_2=x", "other=y"), 5, UnitSecond, 3)
	if !okA || !okB {
		t.Fatal("overrides of a known domain not answered")
	}
	if a.Rule.Policy.ID() == b.Rule.Policy.ID() {
		t.Fatalf("two key lists share the ID %q", a.Rule.Policy.ID())
	}
	for _, m := range []Match{a, b} {
		if p := m.Rule.Policy; p.Group() != "ref:override" || p.Label() != "ref:override" {
			t.Errorf("%s: group %q, label %q; want ref:override", p.ID(), p.Group(), p.Label())
		}
	}
	if m, ok := s.Match("ref", e("database=users")); !ok || m.Rule.Policy.Group() != "" {
		t.Fatalf("a configured rule has a group: %+v", m.Rule)
	}
}
