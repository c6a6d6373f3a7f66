package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestResetPolicySkipsForeignKeys: keys named like states that are not
// hashes (another program's string, list) do not stop a policy reset: it
// deletes every state of the policy, leaves those keys, counts them in
// Skipped, and answers Complete.
func TestResetPolicySkipsForeignKeys(t *testing.T) {
	redistest.RedisLane(t)
	e := newEnv(t)
	checkResetSkipsForeignKeys(t, e.store, func(string) *redistest.Server { return e.srv })
}

// checkResetSkipsForeignKeys seeds states of one policy (spread over every
// slot, so over every master of a Cluster) and of another one, and keys
// named like states that are no states of this service: strings and a
// list with different hash tags (counted as skipped) and hashes without
// the policy's fields (left alone as another policy's states are). Then it
// resets the policy in steps of a few hundred keys until Complete, and
// checks the answer and the keys, on the master masterFor names.
func checkResetSkipsForeignKeys(t *testing.T, s *Store, masterFor func(key string) *redistest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := limitertest.Prefix()
	p, other := fixed(t, prefix+".foreign", 5, farWindow), fixed(t, prefix+".other", 5, farWindow)
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
	foreign := map[string][]string{
		"rate:{0000000000000001}:state:foreign-string": {"SET", "rate:{0000000000000001}:state:foreign-string", "not a state"},
		"rate:{0000000000000002}:state:foreign-string": {"SET", "rate:{0000000000000002}:state:foreign-string", "not a state"},
		"rate:{0000000000000003}:state:foreign-string": {"SET", "rate:{0000000000000003}:state:foreign-string", "not a state"},
		"rate:{0000000000000004}:state:foreign-list":   {"RPUSH", "rate:{0000000000000004}:state:foreign-list", "a", "b"},
		"rate:{0000000000000005}:state:foreign-hash":   {"HSET", "rate:{0000000000000005}:state:foreign-hash", "x", "1"},
	}
	for k, cmd := range foreign {
		masterFor(k).MustDo(cmd...)
	}
	const wantSkipped = 4 // the strings and the list; the hash is read as another policy's state

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
	if err != nil || !res.Complete || res.Deleted != 0 || res.Skipped != wantSkipped || res.Scanned < len(foreign)+1 {
		t.Fatalf("second ResetPolicy: %+v, %v; want complete, nothing deleted, %d skipped", res, err, wantSkipped)
	}
	if total.Deleted != states || total.Skipped < wantSkipped {
		t.Fatalf("ResetPolicy in steps: %+v; want %d deleted, at least %d skipped", total, states, wantSkipped)
	}
	for _, k := range keys {
		if n := masterFor(k).MustDo("EXISTS", k); n != int64(0) {
			t.Fatalf("state %s still exists after the reset", k)
		}
	}
	for k := range foreign {
		if n := masterFor(k).MustDo("EXISTS", k); n != int64(1) {
			t.Fatalf("foreign key %s deleted by the reset", k)
		}
	}
	if n := masterFor(otherKey).MustDo("EXISTS", otherKey); n != int64(1) {
		t.Fatalf("another policy's state %s deleted by the reset", otherKey)
	}
}
