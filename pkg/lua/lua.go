// Package lua holds the versioned Redis Lua programs of envoy-rls, their
// argument encoding and the strict parser of their replies. It has no
// network code: pkg/limiter/redis runs the programs.
//
// rate-batch-v2.lua is the rate program (Batch): every limit of one Envoy
// request, checked at one TIME and committed all or nothing (limiter.Store),
// each key's state one string (src/fragments/string-v2.lua).
// rate-refund-v2.lua (Refund) gives back what a batch took when the
// request did not commit in another Redis Cluster slot. Both take one argument encoding (AppendBatchPacked).
// lease-v2.lua (Lease) is the program of concurrency limits: one take,
// release or return on one lease set (algorithm.Lease), with arguments of
// its own (LeaseArgs) and a seven-integer reply (ParseLeaseReply).
//
// The programs are generated: each is the template of the same name in
// src/ with its "-- #include" lines replaced by fragments of src/fragments
// (internal/luagen), where each algorithm lives once, as functions of
// explicit arguments and results (its argument rules, its step, its
// refund), beside the shared steps (reading TIME, the common argument
// rules, the clock rule, the range check of what was computed, the
// evaluation of a request and its commit) and the layout's own
// (src/fragments/*-v2.lua: its arguments, its state's storage, its reply). `go generate ./pkg/lua`
// writes them next to this file, where they are checked in and embedded:
// a diff shows the program Redis runs, and a test fails when one is stale.
// rate-batch-v2.lua is generated a second time as a Redis function library
// (BatchFunction), the same program run by FCALL.
package lua

//go:generate go run ./internal/gen

import (
	_ "embed"
	"strings"
)

var (
	//go:embed rate-batch-v2.lua
	batchV2 string
	//go:embed rate-refund-v2.lua
	refundV2 string
	//go:embed rate-batch-v2-function.lua
	batchV2Function string
)

// program is one versioned Lua program.
type program struct {
	// Name is the file name, e.g. "rate-batch-v2.lua".
	Name string
	// Source is the generated source, sent on NOSCRIPT.
	Source string
}

// Batch returns rate-batch-v2.lua, the rate program of every algorithm.
func Batch() program { return program{Name: "rate-batch-v2.lua", Source: batchV2} }

// Refund returns rate-refund-v2.lua.
func Refund() program { return program{Name: "rate-refund-v2.lua", Source: refundV2} }

// function is a program as a Redis function library: loaded with FUNCTION
// LOAD, run with FCALL of Function with the program's KEYS and ARGV.
type function struct {
	// Name is the file name, e.g. "rate-batch-v2-function.lua".
	Name string
	// Library and Function are the names it registers, each ending with
	// 12 hex digits of a SHA-256 of the library.
	Library, Function string
	// Source is the library, sent by FUNCTION LOAD.
	Source string
}

// BatchFunction returns rate-batch-v2.lua as a function library
// (rate-batch-v2-function.lua).
func BatchFunction() function {
	return function{Name: "rate-batch-v2-function.lua", Source: batchV2Function,
		Library:  between(batchV2Function, "#!lua name=", "\n"),
		Function: between(batchV2Function, "function_name='", "'")}
}

// between is the text of s after the first from, up to the next to.
func between(s, from, to string) string {
	_, after, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(after, to)
	return v
}
