package lua

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestResetProgramShape: the reset program's header names its key,
// arguments and reply; it does not read TIME and calls only commands of the
// ACL user docs/redis.md documents, writing with UNLINK alone.
func TestResetProgramShape(t *testing.T) {
	src := Reset().Source
	for _, want := range []string{"-- KEYS[1]", "-- ARGV[3]", "-- Reply:"} {
		if !strings.Contains(src, want) {
			t.Errorf("reset-v1.lua: missing %q", want)
		}
	}
	calls := map[string]bool{}
	for _, m := range regexp.MustCompile(`redis\.p?call\('([A-Z]+)'`).FindAllStringSubmatch(src, -1) {
		calls[m[1]] = true
	}
	for name := range calls {
		switch name {
		case "GET", "EXISTS", "HMGET", "UNLINK":
		default:
			t.Errorf("reset-v1.lua calls %s", name)
		}
	}
	if !calls["UNLINK"] || !calls["GET"] || !calls["HMGET"] {
		t.Errorf("reset-v1.lua calls %v", calls)
	}
	doc, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range calls {
		if !strings.Contains(string(doc), "+"+strings.ToLower(name)) {
			t.Errorf("docs/redis.md's ACL user lacks +%s", strings.ToLower(name))
		}
	}
}

// TestParseResetReply: reset-v1.lua's replies, as its header gives them (0
// not a state of envoy-rls, 1 deleted, 2 another policy's or revision's, 3
// no such key), and nothing else.
func TestParseResetReply(t *testing.T) {
	for v, want := range []resetResult{resetForeign, resetDeleted, resetOther, resetGone} {
		deleted, foreign, err := ParseResetReply(int64(v))
		if err != nil || deleted != (want == resetDeleted) || foreign != (want == resetForeign) {
			t.Errorf("ParseResetReply(%d): deleted %t foreign %t %v, want %v", v, deleted, foreign, err, want)
		}
	}
	for _, v := range []int64{-1, 4} {
		if _, _, err := ParseResetReply(v); !errors.Is(err, ErrMalformedReply) {
			t.Errorf("ParseResetReply(%d): %v", v, err)
		}
	}
}
