// Package ceiling holds the measuring stubs that `tools/scripts/bench.sh
// --target ceiling` and `--target ceiling-state` build into a throw-away
// copy of envoy-rls in place of pkg/lua's batch program (as its script
// and as its function library): the same keys and arguments, one TIME,
// every key ALLOWED; the first reads and writes no state, the second reads
// its keys (one MGET) and SETs (PX) each. They are NOT rate limiters; they measure the
// most any batch program, and any that keeps its state in Redis, could
// give on a machine.
package ceiling

import _ "embed"

var (
	// Source is rate-batch-v2.lua of this directory: TIME only.
	//
	//go:embed rate-batch-v2.lua
	Source string

	// StateSource is rate-batch-v2-state.lua of this directory: TIME, one
	// MGET of the keys and a SET PX per key.
	//
	//go:embed rate-batch-v2-state.lua
	StateSource string
)
