package memory

import "github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"

// The bounds the external tests check the store against.
const (
	CapacityRetryAfter = capacityRetryAfter
	MinSketchBytes     = minSketchBytes
	MinSketchPoolBytes = minSketchPoolBytes
)

var ErrInvalidConfig = errInvalidConfig

// MaxLogBytes bounds the heap a sliding-log entry holds beside its slot
// (MaxBytesPerEntry) for a log of n hits in distinct milliseconds: its
// entry in its shard's map of logs, a key and a string header (72 bytes) in
// a map at least 7/16 full, at most 168 bytes; and the log itself,
// algorithm.SlidingLogEntryBytes a hit, which the allocator's size classes
// round up by at most an eighth (16 bytes for the smallest);
// TestSlidingLogHeap holds logs to the bound (its measurements:
// docs/algorithms.md).
func MaxLogBytes(n int) int { return 168 + 16 + n*algorithm.SlidingLogEntryBytes*9/8 }
