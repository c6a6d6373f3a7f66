// Package lua holds the versioned Redis Lua programs of envoy-rls, their
// argument encoding and the strict parser of their replies. It has no
// network code: pkg/limiter/redis runs the programs.
//
// rate-batch-v1.lua is the one rate program: every limit of one Envoy
// request, checked at one TIME and committed all or nothing (limiter.Store).
// rate-refund-v1.lua gives back what a batch took when the request did not
// commit in another Redis Cluster slot.
//
// The programs are generated: each is the template of the same name in
// src/ with its "-- #include" lines replaced by fragments of src/fragments
// (internal/luagen), where each algorithm lives once, as functions of
// explicit arguments and results (its argument rules, its step, its
// refund), beside the shared steps (reading TIME, the common argument
// rules, the clock rule, the range check of what was computed, the
// evaluation of a request and its commit) and each version's own (its
// arguments, its state's storage, its reply). `go generate ./pkg/lua`
// writes them next to this file, where they are checked in and embedded:
// a diff shows the program Redis runs, and a test fails when one is stale.
package lua

//go:generate go run ./internal/gen

import _ "embed"

var (
	//go:embed rate-batch-v1.lua
	batchV1 string
	//go:embed rate-refund-v1.lua
	refundV1 string
)

// Program is one versioned Lua program.
type Program struct {
	// Name is the file name, e.g. "rate-batch-v1.lua".
	Name string
	// Source is the generated source, sent on NOSCRIPT.
	Source string
}

// Programs returns every program of the package.
func Programs() []Program { return []Program{Batch(), Refund()} }

// Batch returns rate-batch-v1.lua, the rate program of every algorithm.
func Batch() Program { return Program{Name: "rate-batch-v1.lua", Source: batchV1} }

// Refund returns rate-refund-v1.lua.
func Refund() Program { return Program{Name: "rate-refund-v1.lua", Source: refundV1} }
