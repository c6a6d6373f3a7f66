package redistest

import (
	"slices"
	"strings"
	"testing"
)

// TestServers runs the harness's suite on redis-server processes.
func TestServers(t *testing.T) { CheckServers(t) }

// TestLane prints which servers this module's Redis tests run on: `make
// test` ends with this line.
func TestLane(t *testing.T) {
	d := Describe()
	if !strings.HasPrefix(d, "redis lane: local processes (") {
		t.Fatalf("Describe = %q", d)
	}
	t.Log(d)
}

func TestACLArgsSelectors(t *testing.T) {
	got, err := aclArgs("ACL SETUSER envoy-rls  (~k +get +setnx) (~k:in-use +get +set) +ping")
	want := []string{"ACL", "SETUSER", "envoy-rls", "(~k +get +setnx)", "(~k:in-use +get +set)", "+ping"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("aclArgs: %q, %v, want %q", got, err, want)
	}
	if _, err := aclArgs("ACL SETUSER envoy-rls (~k +get"); err == nil {
		t.Fatal("aclArgs of an unbalanced selector: no error")
	}
}
