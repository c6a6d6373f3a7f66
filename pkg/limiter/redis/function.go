package redis

import (
	"context"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// batchFunction is rate-batch-v2.lua as a Redis function library: FCALL
// runs only its registered function, where EVALSHA runs the whole program
// and makes its functions anew on every run (docs/performance.md).
var batchFunction = lua.BatchFunction()

// execBatch runs rate-batch-v2.lua on keys and args: by FCALL of
// batchFunction, or by EVALSHA (batchScript) once Redis has refused FCALL
// or FUNCTION LOAD. The store calls it for every program run.
//
// FCALL answered "Function not found" ran nothing (a restart without
// persistence, FUNCTION FLUSH, a new master of the slot): the library is
// loaded on the node of the keys' slot and FCALL sent once more; when that
// load fails, the answer stays "Function not found", which classify
// reports as not run. An OOM refusal of FCALL comes before the function
// runs, where EVALSHA's program is refused only at its first write: that
// call is sent again by EVALSHA, so that outcomes do not depend on the
// command.
func (s *Store) execBatch(ctx context.Context, keys, args []string) rueidis.RedisResult {
	if s.evalsha.Load() {
		return batchScript.Exec(ctx, s.client, keys, args)
	}
	c := s.client
	fcall := func() rueidis.RedisResult {
		return c.Do(ctx, c.B().Fcall().Function(batchFunction.Function).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	res := fcall()
	code, msg := redisErr(res.Error())
	if functionNotFound(msg) && len(keys) > 0 {
		load := c.B().FunctionLoad().FunctionCode(batchFunction.Source).Build().SetSlot(keys[0])
		lerr := c.Do(ctx, load).Error()
		lcode, lmsg := redisErr(lerr)
		switch {
		case lerr == nil || strings.Contains(lmsg, "already exists"):
			res = fcall()
			code, msg = redisErr(res.Error())
		case lcode == "OOM":
			return batchScript.Exec(ctx, s.client, keys, args)
		case refusal(lcode, lmsg) != "":
			s.fallBack("FUNCTION LOAD refused: " + refusal(lcode, lmsg))
			return batchScript.Exec(ctx, s.client, keys, args)
		default:
			// Not loaded (no answer, READONLY, …): FCALL's answer stands.
			return res
		}
	}
	switch {
	case code == "OOM":
		return batchScript.Exec(ctx, s.client, keys, args)
	case refusal(code, msg) != "":
		s.fallBack("FCALL refused: " + refusal(code, msg))
		return batchScript.Exec(ctx, s.client, keys, args)
	}
	return res
}

// loadFunctions loads batchFunction on every node (FUNCTION LOAD, without
// REPLACE: a library of the same name is the same code), so that the first
// calls do not pay it, within timeout. Best effort: a replica refuses it
// (READONLY) and receives it from its master; a node that did not load it
// loads it on a call's "Function not found". A refusal of the command
// makes the store use EVALSHA.
func (s *Store) loadFunctions(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, n := range s.client.Nodes() {
		code, msg := redisErr(n.Do(ctx, n.B().FunctionLoad().FunctionCode(batchFunction.Source).Build()).Error())
		if refusal(code, msg) != "" {
			s.fallBack("FUNCTION LOAD refused: " + refusal(code, msg))
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// fallBack makes every later run use EVALSHA, and reports it once.
func (s *Store) fallBack(reason string) {
	if s.evalsha.CompareAndSwap(false, true) && s.onFallback != nil {
		s.onFallback(reason + "; running " + lua.Batch().Name + " by EVALSHA")
	}
}

// redisErr is the code (its first word) and text of err when it is an
// error reply of Redis, else "", "".
func redisErr(err error) (code, msg string) {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return "", ""
	}
	msg = re.Error()
	code, _, _ = strings.Cut(msg, " ")
	return code, msg
}

// functionNotFound reports Redis's answer to FCALL of a function it does
// not have: nothing ran.
func functionNotFound(msg string) bool { return strings.Contains(msg, "Function not found") }

// refusal names the kind of an error reply that refuses the command
// itself, whatever its arguments: the ACL (NOPERM), or a server or proxy
// that does not know or support it (no such reply comes from a function
// that ran); "" for any other reply. It never returns the reply's text.
func refusal(code, msg string) string {
	if code == "NOPERM" {
		return "NOPERM"
	}
	if code != "ERR" {
		return ""
	}
	low := strings.ToLower(msg)
	for _, kind := range []string{"unknown command", "unknown subcommand", "unsupported", "not supported"} {
		if strings.Contains(low, kind) {
			return kind
		}
	}
	return ""
}
