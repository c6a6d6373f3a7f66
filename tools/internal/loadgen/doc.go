// Package loadgen holds the pieces of the rls-load benchmark tool: a
// latency histogram (HdrHistogram with exact min, max and mean), subject
// distributions, /proc readers (prometheus/procfs) and the CPU meter of a
// measured phase (shared with rlqs-load), the loopback guard, the
// closed-loop gRPC runner and its JSON result.
//
// Nothing in this package keeps package-level mutable state; every value is
// owned by its caller. Unless a type says otherwise it is not safe for
// concurrent use: the runner gives each worker its own histogram and picker
// and merges them once the workers have stopped.
package loadgen
