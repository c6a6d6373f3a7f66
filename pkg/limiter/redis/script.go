package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/rueidis"
)

// script is a program the store runs on one key at a time, in pipelines,
// by EVALSHA (the policy reset's and the demand exchange's; the rate
// programs have their own paths): its source, sent by EVAL only when a
// node does not have it, and the SHA-1 EVALSHA names it by.
type script struct{ src, sha string }

func newScript(src string) script {
	h := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(h[:])}
}

// scriptRun is one run of a script: its key and arguments.
type scriptRun struct {
	key  string
	args []string
}

// runAll sends runs to c (a node, or a Cluster client that sends each
// run to its key's slot) in one pipeline, by EVALSHA, and returns their
// replies in order. When a node does not have the program (NOSCRIPT: after
// a restart, a failover or SCRIPT FLUSH), the first of the refused runs is
// sent again with the program's source (EVAL), then the others by EVALSHA,
// until none is refused or an EVAL fails: the source crosses the network
// once per node that lacks it.
func (p script) runAll(ctx context.Context, c rueidis.Client, runs []scriptRun) []rueidis.RedisResult {
	if len(runs) == 0 {
		return nil
	}
	evalsha := func(r scriptRun) rueidis.Completed {
		return c.B().Evalsha().Sha1(p.sha).Numkeys(1).Key(r.key).Arg(r.args...).Build()
	}
	cmds := make(rueidis.Commands, len(runs))
	for i, r := range runs {
		cmds[i] = evalsha(r)
	}
	out := c.DoMulti(ctx, cmds...)
	refused := noScript(out, nil)
	for len(refused) > 0 {
		first := runs[refused[0]]
		out[refused[0]] = c.Do(ctx, c.B().Eval().Script(p.src).Numkeys(1).Key(first.key).Arg(first.args...).Build())
		rest := refused[1:]
		if len(rest) == 0 || out[refused[0]].Error() != nil {
			break
		}
		cmds = cmds[:0]
		for _, i := range rest {
			cmds = append(cmds, evalsha(runs[i]))
		}
		again := c.DoMulti(ctx, cmds...)
		for j, r := range again {
			out[rest[j]] = r
		}
		refused = noScript(again, rest)
	}
	return out
}

// noScript returns the indexes of the NOSCRIPT answers among out: at, the
// runs out answers (nil: out answers runs 0..n-1).
func noScript(out []rueidis.RedisResult, at []int) []int {
	var refused []int
	for j, r := range out {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			if at != nil {
				j = at[j]
			}
			refused = append(refused, j)
		}
	}
	return refused
}
