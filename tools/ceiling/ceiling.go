// Package ceiling holds the measuring stub that `tools/scripts/bench.sh
// --target ceiling` builds into a throw-away copy of envoy-rls in place of
// pkg/lua's batch program: the same EVALSHA, keys and arguments, one TIME,
// no state read or written, every key ALLOWED. It is NOT a rate limiter;
// it measures the most any batch program could give on a machine.
package ceiling

import _ "embed"

// Source is rate-batch-v2.lua of this directory.
//
//go:embed rate-batch-v2.lua
var Source string
