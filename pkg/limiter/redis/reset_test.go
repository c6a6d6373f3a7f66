package redis

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// TestResetPolicySkipsForeignKeys: keys under the state keys' prefix that
// are not states this version writes (another program's string, list,
// set, hash, ...; a name that is not exactly a state key's) do not stop a
// policy reset: it deletes every state of the policy, of every algorithm
// and lease set, leaves those keys with their values, counts each in
// Skipped, and answers Complete.
func TestResetPolicySkipsForeignKeys(t *testing.T) {
	redistest.RedisLane(t)
	e := newEnv(t)
	checkResetSkipsForeignKeys(t, e.store, func(string) *redistest.Server { return e.srv })
}

// foreignKey is a key checkResetSkipsForeignKeys plants beside the
// states: the command that writes it (its key second) and what a reset
// of the policy does with it.
type foreignKey struct {
	what string
	cmd  []string
	// deleted: a state of the policy (the programs' layout); skipped: not
	// a state of envoy-rls; neither: another policy's state.
	deleted, skipped bool
}

// checkResetSkipsForeignKeys seeds states of one policy (spread over every
// slot, so over every master of a Cluster; one of each algorithm and a
// lease set under the same policy ID and revision) and of another one,
// and keys under the state keys' prefix that are no states of this
// version: other types, values of no state layout, names that are not
// exactly a state key's (these holding a real state's value), hashes
// without the previous layout's fields. Then it resets the policy in
// steps of a few hundred keys until Complete, and checks the counts, that
// every state of the policy is gone and every other key is as it was, on
// the master masterFor names.
func checkResetSkipsForeignKeys(t *testing.T, s *Store, masterFor func(key string) *redistest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := limitertest.Prefix()
	id := prefix + ".foreign"
	p, other := fixed(t, id, 5, farWindow), fixed(t, prefix+".other", 5, farWindow)
	const states = 1500
	var keys []string
	var otherKey string
	for start := 0; start < states; start += 250 {
		batch := make([]limiter.Request, 0, 250)
		for i := start; i < start+250; i++ {
			batch = append(batch, limiter.Request{Policy: p, Subject: subjectOf(prefix + "/" + strconv.Itoa(i)), Cost: 1})
		}
		if start == 0 {
			batch = append(batch, limiter.Request{Policy: other, Subject: subjectOf(prefix + "/other"), Cost: 1})
			otherKey = string(requestKey(nil, &batch[len(batch)-1]))
		}
		out := make([]limiter.Outcome, len(batch))
		s.Evaluate(ctx, batch, out)
		for i := range out {
			if out[i].Kind != limiter.Evaluated || !out[i].Decision.Consumed {
				t.Fatalf("seed %d: %v %v", start+i, out[i].Kind, out[i].Err)
			}
			if batch[i].Policy == p {
				keys = append(keys, string(requestKey(nil, &batch[i])))
			}
		}
	}
	// The policy's states of the other algorithms (its ID and revision
	// under another algorithm name the same policy), a penalty box, and a
	// lease set, each as the programs write it.
	penalized := limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params:  limiter.FixedWindowParams{Limit: 1, Window: farWindow},
		Penalty: limiter.Penalty{Duration: time.Hour}})
	for _, c := range []struct {
		p     *limiter.Policy
		calls int
		lease limiter.LeaseOp
		len   int
	}{
		{sliding(t, id, 5, time.Hour), 1, 0, redistest.StateLen},
		{bucket(t, id, 5, 1, time.Hour), 1, 0, redistest.StateLen},
		{cellRate(t, id, 5, 5, time.Hour), 1, 0, redistest.StateLen},
		{slidingLog(t, id, 5, time.Hour), 1, 0, redistest.StateLen + algorithm.SlidingLogEntryBytes},
		// The second call is an offence: its block follows the state.
		{penalized, 2, 0, redistest.StateLen + redistest.StatePenaltyLen},
		{limitertest.LeasePolicy(t, id, 5, time.Hour), 1, limiter.LeaseTake, algorithm.SlidingLogEntryBytes},
	} {
		r := limiter.Request{Policy: c.p, Subject: subjectOf(prefix + "/" + c.p.Algorithm().String()), Cost: 1, Lease: c.lease}
		out := make([]limiter.Outcome, 1)
		for range c.calls {
			s.Evaluate(ctx, []limiter.Request{r}, out)
			if out[0].Kind != limiter.Evaluated {
				t.Fatalf("%s: %v %v", c.p.Algorithm(), out[0].Kind, out[0].Err)
			}
		}
		k := string(requestKey(nil, &r))
		if v, _ := masterFor(k).MustDo("GET", k).(string); len(v) != c.len {
			t.Fatalf("%s: state of %d bytes, want %d", c.p.Algorithm(), len(v), c.len)
		}
		keys = append(keys, k)
	}
	realState, _ := masterFor(keys[0]).MustDo("GET", keys[0]).(string)

	pd := policyDigest(p.ID(), p.Revision())
	policy := hex.EncodeToString(pd[:])
	od := policyDigest(other.ID(), other.Revision())
	n := 0
	// tag is a new hash tag (16 hex digits), so the keys spread over slots.
	tag := func() string { n++; return fmt.Sprintf("%016x", n*7919) }
	digest := func(hexLen int) string { return strings.Repeat("ab", hexLen)[:hexLen] }
	v2 := func() string { return "rate:{" + tag() + "}:state:v2:" + policy + ":" + digest(32) }
	v1 := func() string { return "rate:{" + tag() + "}:state:" + digest(64) }
	set := func(k, v string) []string { return []string{"SET", k, v} }
	hset := func(k string, fv ...string) []string { return append([]string{"HSET", k}, fv...) }
	fw := redistest.AppendState(nil, algorithm.State{Algorithm: limiter.FixedWindow, LastObservedMs: 1000, Epoch: 1, Level: 1})
	with := func(v []byte, at int, f float64) string {
		v = append([]byte(nil), v...)
		binary.BigEndian.PutUint64(v[at:], math.Float64bits(f))
		return string(v)
	}
	entry := func(at float64, count uint16) string {
		return string(binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint64(nil, math.Float64bits(at)), count))
	}
	penaltyBox := redistest.AppendState(nil, algorithm.State{Algorithm: limiter.FixedWindow, LastObservedMs: 1000, Epoch: 1, Level: 1,
		PenaltyUntilMs: 5000, PenaltyLevel: 1})
	logState := func(log string) string {
		return string(redistest.AppendState(nil, algorithm.State{Algorithm: limiter.SlidingLog, LastObservedMs: 1000, Epoch: 1, Level: 3, Log: log}))
	}
	planted := []foreignKey{
		// Named as the policy's states are, holding no state.
		{what: "a list", cmd: []string{"RPUSH", v2(), "a", "b"}, skipped: true},
		{what: "a set", cmd: []string{"SADD", v2(), "a"}, skipped: true},
		{what: "a sorted set", cmd: []string{"ZADD", v2(), "1", "a"}, skipped: true},
		{what: "a hash", cmd: hset(v2(), "x", "1"), skipped: true},
		{what: "a hash of the previous layout's fields", cmd: hset(v2(), "schema", "1", "policy", id, "rev", "1"), skipped: true},
		{what: "a string", cmd: set(v2(), "not a state"), skipped: true},
		{what: "an empty string", cmd: set(v2(), ""), skipped: true},
		{what: "an unknown algorithm", cmd: set(v2(), string(append([]byte{9}, fw[1:]...))), skipped: true},
		{what: "the concurrency byte", cmd: set(v2(), string(append([]byte{byte(limiter.Concurrency)}, fw[1:]...))), skipped: true},
		{what: "a byte too many", cmd: set(v2(), string(fw)+"x"), skipped: true},
		{what: "a negative number", cmd: set(v2(), with(fw, 9, -1)), skipped: true},
		{what: "a fraction", cmd: set(v2(), with(fw, 17, 1.5)), skipped: true},
		{what: "a number above 2^53-1", cmd: set(v2(), with(fw, 25, 1<<54)), skipped: true},
		{what: "a penalty level of 0", cmd: set(v2(), with(penaltyBox, redistest.StateLen+8, 0)), skipped: true},
		{what: "a penalty flag without a box", cmd: set(v2(), string(append([]byte{byte(limiter.FixedWindow) | redistest.StatePenalty}, fw[1:]...))), skipped: true},
		{what: "a log of part of an entry", cmd: set(v2(), logState(entry(900, 3)[:7])), skipped: true},
		{what: "a log entry after the last observed time", cmd: set(v2(), logState(entry(1001, 3))), skipped: true},
		{what: "a log entry of no hits", cmd: set(v2(), logState(entry(900, 0))), skipped: true},
		{what: "a lease of count 0", cmd: set(v2(), entry(1000, 0)), skipped: true},
		{what: "leases out of order", cmd: set(v2(), entry(2000, 1)+entry(1000, 1)), skipped: true},
		{what: "a lease expiring at a fraction", cmd: set(v2(), entry(1000.5, 1)), skipped: true},
		// Named almost as the policy's states are, holding a real state.
		{what: "a suffix of no hex digits", cmd: set("rate:{"+tag()+"}:state:v2:"+policy+":"+strings.Repeat("zy", 16), realState), skipped: true},
		{what: "a suffix of 31 hex digits", cmd: set("rate:{"+tag()+"}:state:v2:"+policy+":"+digest(31), realState), skipped: true},
		{what: "a suffix of 33 hex digits", cmd: set("rate:{"+tag()+"}:state:v2:"+policy+":"+digest(33), realState), skipped: true},
		{what: "a suffix in capitals", cmd: set("rate:{"+tag()+"}:state:v2:"+policy+":"+strings.ToUpper(digest(32)), realState), skipped: true},
		{what: "a part after the suffix", cmd: set(v2()+":x", realState), skipped: true},
		{what: "a short hash tag", cmd: set("rate:{abc}:state:v2:"+policy+":"+digest(32), realState), skipped: true},
		{what: "no policy part", cmd: set("rate:{"+tag()+"}:state:v2:"+digest(32), realState), skipped: true},
		// Named as states of the previous layout are.
		{what: "a hash without policy and rev", cmd: hset(v1(), "x", "1"), skipped: true},
		{what: "a hash without schema", cmd: hset(v1(), "policy", id, "rev", "1", "last", "1000", "a", "1", "b", "1", "c", "0"), skipped: true},
		{what: "a string", cmd: set(v1(), "not a state"), skipped: true},
		{what: "a list", cmd: []string{"RPUSH", v1(), "a"}, skipped: true},
		{what: "the policy's state of the previous layout", cmd: hset(v1(), "schema", "1", "alg", "fixed_window", "policy", id, "rev", "1", "last", "1000", "a", "1", "b", "1", "c", "0"), deleted: true},
		{what: "another revision's state of the previous layout", cmd: hset(v1(), "schema", "1", "alg", "fixed_window", "policy", id, "rev", "2", "last", "1000", "a", "1", "b", "1", "c", "0")},
		{what: "another policy's state of the previous layout", cmd: hset(v1(), "schema", "1", "alg", "fixed_window", "policy", other.ID(), "rev", "1", "last", "1000", "a", "1", "b", "1", "c", "0")},
		// Named like states, in no layout.
		{what: "a string", cmd: set("rate:{0000000000000001}:state:foreign-string", "not a state"), skipped: true},
		{what: "a string", cmd: set("rate:{0000000000000002}:state:foreign-string", "not a state"), skipped: true},
		{what: "a list", cmd: []string{"RPUSH", "rate:{0000000000000004}:state:foreign-list", "a", "b"}, skipped: true},
		{what: "a hash", cmd: hset("rate:{0000000000000005}:state:foreign-hash", "x", "1"), skipped: true},
		// Named as another policy's state: not read (the reset reads the
		// policy's keys only), so neither deleted nor counted.
		{what: "another policy's name", cmd: []string{"RPUSH", "rate:{" + tag() + "}:state:v2:" + hex.EncodeToString(od[:]) + ":" + digest(32), "a"}},
		// The policy's states as the programs may write them.
		{what: "a lease set of several entries", cmd: set(v2(), entry(1000, 1)+entry(1000, 2)+entry(2000, 3)), deleted: true},
		{what: "a sliding log of several entries", cmd: set(v2(), logState(entry(500, 1)+entry(900, 2)+entry(1000, 3))), deleted: true},
		{what: "a penalty box", cmd: set(v2(), string(penaltyBox)), deleted: true},
	}
	wantSkipped, wantDeleted := 0, len(keys)
	before := make([]any, len(planted))
	for i, f := range planted {
		k := f.cmd[1]
		masterFor(k).MustDo(f.cmd...)
		before[i] = masterFor(k).MustDo("DUMP", k)
		if f.skipped {
			wantSkipped++
		}
		if f.deleted {
			wantDeleted++
		}
	}

	var total limiter.PolicyReset
	for step := 0; ; step++ {
		res, err := s.ResetPolicy(ctx, p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 400})
		if err != nil {
			t.Fatalf("ResetPolicy step %d (after %+v): %v", step, total, err)
		}
		total.Scanned += res.Scanned
		total.Deleted += res.Deleted
		total.Skipped += res.Skipped
		if res.Complete {
			break
		}
		if step > 100 {
			t.Fatalf("ResetPolicy not complete after %d steps: %+v", step, total)
		}
	}
	// Each step scans from the start, so a foreign key is counted by every
	// step that finds it; one full pass counts each once.
	res, err := s.ResetPolicy(ctx, p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 1 << 20})
	// Left: the planted keys but the policy's states, and another policy's
	// state.
	left := len(planted) - (wantDeleted - len(keys)) + 1
	if err != nil || !res.Complete || res.Deleted != 0 || res.Skipped != wantSkipped || res.Scanned != left {
		t.Fatalf("second ResetPolicy: %+v, %v; want complete, nothing deleted, %d skipped of %d", res, err, wantSkipped, left)
	}
	if total.Deleted != wantDeleted || total.Skipped < wantSkipped {
		t.Fatalf("ResetPolicy in steps: %+v; want %d deleted, at least %d skipped", total, wantDeleted, wantSkipped)
	}
	for _, k := range keys {
		if n := masterFor(k).MustDo("EXISTS", k); n != int64(0) {
			t.Fatalf("state %s still exists after the reset", k)
		}
	}
	for i, f := range planted {
		k := f.cmd[1]
		if f.deleted {
			if n := masterFor(k).MustDo("EXISTS", k); n != int64(0) {
				t.Errorf("%s (%s) still exists after the reset", f.what, k)
			}
			continue
		}
		if after := masterFor(k).MustDo("DUMP", k); after != before[i] {
			t.Errorf("%s (%s) changed by the reset: %q, was %q", f.what, k, after, before[i])
		}
	}
	if n := masterFor(otherKey).MustDo("EXISTS", otherKey); n != int64(1) {
		t.Fatalf("another policy's state %s deleted by the reset", otherKey)
	}
}

// The replies of reset-v1.lua, as its header gives them: written here, not
// taken from pkg/lua, so that the test reads the program's own answers.
const (
	resetForeign int64 = 0
	resetDeleted int64 = 1
	resetOther   int64 = 2
	resetGone    int64 = 3
)

// TestResetProgram runs reset-v1.lua on single keys: what it answers for a
// key that expired after the scan found it (none), for a key of each
// layout, and for arguments it does not take (an error, nothing deleted).
func TestResetProgram(t *testing.T) {
	redistest.RedisLane(t)
	e := newEnv(t)
	run := func(key string, args ...string) (any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return e.conn.Do(ctx, append([]string{"EVAL", lua.Reset().Source, "1", key}, args...)...)
	}
	state := string(redistest.AppendState(nil, algorithm.State{Algorithm: limiter.TokenBucket, LastObservedMs: 1000, Epoch: 1000, Level: 3}))
	v2Key := "rate:{0123456789abcdef}:state:v2:0123456789abcdef:" + strings.Repeat("0", 32)
	v1Key := "rate:{0123456789abcdef}:state:" + strings.Repeat("0", 64)
	for _, c := range []struct {
		what  string
		setup []string
		key   string
		args  []string
		want  int64 // reset-v1.lua's reply
	}{
		{"no key", nil, v2Key, lua.ResetArgsV2(), resetGone},
		{"no hash", nil, v1Key, lua.ResetArgsV1("p", 1), resetGone},
		{"a state", []string{"SET", v2Key, state}, v2Key, lua.ResetArgsV2(), resetDeleted},
		{"a list", []string{"RPUSH", v2Key, state}, v2Key, lua.ResetArgsV2(), resetForeign},
		{"the policy's hash", []string{"HSET", v1Key, "schema", "1", "policy", "p", "rev", "7"}, v1Key, lua.ResetArgsV1("p", 7), resetDeleted},
		{"another revision's hash", []string{"HSET", v1Key, "schema", "1", "policy", "p", "rev", "7"}, v1Key, lua.ResetArgsV1("p", 8), resetOther},
		{"a hash of another schema", []string{"HSET", v1Key, "schema", "2", "policy", "p", "rev", "7"}, v1Key, lua.ResetArgsV1("p", 7), resetForeign},
		{"a hash of a non-decimal rev", []string{"HSET", v1Key, "schema", "1", "policy", "p", "rev", "x"}, v1Key, lua.ResetArgsV1("p", 7), resetForeign},
		{"a state under the previous layout's name", []string{"SET", v1Key, state}, v1Key, lua.ResetArgsV1("p", 7), resetForeign},
	} {
		e.do("DEL", c.key)
		if c.setup != nil {
			e.do(c.setup...)
		}
		got, err := run(c.key, c.args...)
		if err != nil || got != c.want {
			t.Errorf("%s: %v %v, want %d", c.what, got, err, c.want)
		}
		if exists := e.do("EXISTS", c.key) == int64(1); exists != (c.setup != nil && c.want != resetDeleted) {
			t.Errorf("%s: the key exists: %v", c.what, exists)
		}
	}
	e.do("SET", v2Key, state)
	for _, args := range [][]string{nil, {"3"}, {"1", "p", "-1"}, {"1", "p"}} {
		if got, err := run(v2Key, args...); err == nil {
			t.Errorf("arguments %q: %v, want an error", args, got)
		}
	}
	if e.do("EXISTS", v2Key) != int64(1) {
		t.Error("a run refused its arguments and deleted the key")
	}
}

// TestResetPolicyNoScript: a policy reset on a server that lost the reset
// program (SCRIPT FLUSH, as after a restart) sends its source once, by
// EVAL, and the other keys of the page by EVALSHA, and deletes every state.
func TestResetPolicyNoScript(t *testing.T) {
	redistest.RedisLane(t)
	e := newEnv(t)
	p := fixed(t, "noscript", 5, farWindow)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	batch := make([]limiter.Request, 50)
	for i := range batch {
		batch[i] = limiter.Request{Policy: p, Subject: subjectOf("noscript/" + strconv.Itoa(i)), Cost: 1}
	}
	e.store.Evaluate(ctx, batch, make([]limiter.Outcome, len(batch)))
	e.do("SCRIPT", "FLUSH")
	e.do("CONFIG", "RESETSTAT")
	res, err := e.store.ResetPolicy(ctx, p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 1000})
	if err != nil || !res.Complete || res.Deleted != len(batch) || res.Skipped != 0 {
		t.Fatalf("ResetPolicy after SCRIPT FLUSH: %+v %v; want %d deleted", res, err, len(batch))
	}
	stats, _ := e.do("INFO", "commandstats").(string)
	if !strings.Contains(stats, "cmdstat_eval:calls=1,") {
		t.Errorf("the program's source was not sent exactly once:\n%s", stats)
	}
	if n := e.do("DBSIZE"); n != int64(0) {
		t.Fatalf("%v keys left", n)
	}
}

// BenchmarkResetPolicy measures one policy reset against a local
// redis-server: over 200,000 states, half of them the policy's, and over
// 100,000 states of another policy (none the policy's: a scan that reads
// nothing). Figures go to docs/admin-api.md; nothing here is asserted but
// the counts.
func BenchmarkResetPolicy(b *testing.B) {
	e := newEnvWith(b, Config{Timeout: 10 * time.Second})
	p, other := fixed(b, "bench.reset", 5, time.Hour), fixed(b, "bench.other", 5, time.Hour)
	state := string(redistest.AppendState(nil, algorithm.State{Algorithm: limiter.FixedWindow, LastObservedMs: 1000, Epoch: 1, Level: 1}))
	// seed writes n states of policy q (StorageKey's layout, hash tags and
	// digests from the index) in one script run.
	seed := func(q *limiter.Policy, from, n int) {
		d := policyDigest(q.ID(), q.Revision())
		const script = `for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', string.format('rate:{%016x}:state:v2:%s:%032x', i, ARGV[3], i), ARGV[4])
end`
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := e.conn.Do(ctx, "EVAL", script, "0", strconv.Itoa(from), strconv.Itoa(from+n-1), hex.EncodeToString(d[:]), state); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name         string
		mine, others int
	}{
		{"keys=200000/policy=100000", 100_000, 100_000},
		{"keys=100000/policy=0", 0, 100_000},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				e.do("FLUSHALL")
				seed(p, 0, c.mine)
				seed(other, c.mine, c.others)
				b.StartTimer()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				res, err := e.store.ResetPolicy(ctx, p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 10_000_000})
				cancel()
				if err != nil || !res.Complete || res.Deleted != c.mine || res.Skipped != 0 {
					b.Fatalf("ResetPolicy: %+v %v", res, err)
				}
			}
		})
	}
}
