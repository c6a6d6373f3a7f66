package redistest

import (
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
