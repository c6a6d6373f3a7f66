package luagen

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// libraryOf names the program that Generate also writes as a Redis function
// library, and libraryFile the file it writes it to.
const (
	libraryOf   = "rate-batch-v2.lua"
	libraryFile = "rate-batch-v2-function.lua"
)

// runState are the top-level locals of libraryOf that a run changes. A
// library's top level runs once, at FUNCTION LOAD, so its function resets
// them, to the values they are declared with (false), at the start of
// every call; a test fails when the program assigns another
// top-level local outside the clock block, which every call runs.
var runState = []string{"argsRead", "stored", "storedOne", "written", "offended"}

// The places where library cuts the program: the prelude's library
// locals, the clock block (time.lua) and the main body.
const (
	preludeLibs = "local find, fmod, format, band = string.find, math.fmod, string.format, bit.band\n" +
		"local unpackList = unpack\n" +
		"local unpack, pack, sub, max = struct.unpack, struct.pack, string.sub, math.max\n"
	clockDecl = "local serverNow\n"
	clockEnd  = "-- End of time.lua."
	mainStart = "\nlocal nkeys = #KEYS\n"
	digestTag = "@DIGEST@"
)

// library turns the assembled program into a Redis function library: its
// top-level locals and functions stay at library level, made once per
// FUNCTION LOAD instead of once per run; KEYS and ARGV become library
// locals set by each call; the clock block and the main body become the
// registered function, which first resets runState. Only the redis table
// is reachable while a library loads, so the prelude's library locals are
// set on the first call. The library's and the function's names end with
// 12 hex digits of a SHA-256 of the library, so that two releases on one
// Redis never replace each other's code.
func library(program string) (string, error) {
	i, j, k := strings.Index(program, clockDecl), strings.Index(program, clockEnd), strings.Index(program, mainStart)
	if i < 0 || j < i || k < j || strings.Count(program[:i], preludeLibs) != 1 {
		return "", fmt.Errorf("%s has changed shape: no prelude, clock block or main body where the library expects them", libraryOf)
	}
	head := strings.Replace(program[:i+len(clockDecl)], preludeLibs, "local function libs()\n"+
		"  return string.find, math.fmod, string.format, bit.band, unpack, struct.unpack, struct.pack, string.sub, math.max\n"+
		"end\nlocal find, fmod, format, band, unpackList, unpack, pack, sub, max\n", 1)
	falses := strings.TrimSuffix(strings.Repeat("false, ", len(runState)), ", ")
	body := "-- " + libraryFile + ": " + libraryOf + " as a Redis function library\n" +
		"-- (FUNCTION LOAD, then FCALL of the function below with the program's\n" +
		"-- KEYS and ARGV).\n" +
		"local KEYS, ARGV\n" + head + program[j:k] +
		"\nredis.register_function{function_name='envoy_rls_rate_batch_v2_" + digestTag + "', callback=function(keys, args)\n" +
		"if not find then\n  find, fmod, format, band, unpackList, unpack, pack, sub, max = libs()\nend\n" +
		"KEYS, ARGV = keys, args\n" + strings.Join(runState, ", ") + " = " + falses + "\n" +
		program[i+len(clockDecl):j] + program[k:] + "\nend}\n"
	sum := sha256.Sum256([]byte(body))
	d := hex.EncodeToString(sum[:6])
	return "#!lua name=envoy_rls_rate_v2_" + d + "\n" + strings.ReplaceAll(body, digestTag, d), nil
}
