package memory

import (
	"math/rand/v2"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestTableModel runs random inserts, updates, removals and expiry scans on
// a shard's table and on a Go map, and checks they always agree.
func TestTableModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		rng := rand.New(rand.NewPCG(seed, seed))
		var sh shard
		sh.capacity = 1 << 30
		sh.minExpiry = 1<<63 - 1
		model := map[key]entry{}
		policies := []string{"a", "b", "c"}
		mk := func() key {
			var d limiter.SubjectDigest
			// Few distinct digests, several policies: long shared probe runs.
			d[0], d[9] = byte(rng.IntN(4)), byte(rng.IntN(64))
			return key{subject: d, policy: policies[rng.IntN(len(policies))], revision: uint32(1 + rng.IntN(2)), alg: limiter.FixedWindow}
		}
		now := int64(1000)
		for op := range 20_000 {
			k := mk()
			h := hashKey(&k)
			i, found := sh.t.find(&k, h)
			if _, ok := model[k]; ok != found {
				t.Fatalf("seed %d op %d: find %+v = %v, model %v", seed, op, k, found, ok)
			}
			switch r := rng.IntN(10); {
			case r < 5: // write
				e := entry{epoch: int64(op), expiresAt: now + int64(rng.IntN(100))}
				if found {
					sh.t.slots[i].e = e
				} else {
					sh.t.insertAt(-1, &k, h, e)
				}
				sh.minExpiry = min(sh.minExpiry, e.expiresAt)
				model[k] = e
			case r < 8 && found: // remove
				sh.t.remove(i)
				delete(model, k)
			case r == 8: // time passes, bounded or full scan
				now += int64(rng.IntN(20))
				budget := 0
				if rng.IntN(2) == 0 {
					budget = 1 + rng.IntN(16)
				}
				want := 0
				if budget == 0 {
					for mk, e := range model {
						if now > e.expiresAt {
							delete(model, mk)
							want++
						}
					}
				}
				got := sh.dropExpired(now, budget)
				if budget == 0 && got != want {
					t.Fatalf("seed %d op %d: full scan dropped %d, want %d", seed, op, got, want)
				}
				if budget > 0 { // sync the model with what the bounded scan dropped
					for mk, e := range model {
						if _, ok := sh.t.find(&mk, hashKey(&mk)); !ok {
							if now <= e.expiresAt {
								t.Fatalf("seed %d op %d: bounded scan dropped a live entry", seed, op)
							}
							delete(model, mk)
						}
					}
				}
			}
			if sh.t.n != len(model) {
				t.Fatalf("seed %d op %d: table holds %d, model %d", seed, op, sh.t.n, len(model))
			}
		}
		for k, e := range model {
			i, ok := sh.t.find(&k, hashKey(&k))
			if !ok || sh.t.slots[i].e != e {
				t.Fatalf("seed %d: %+v lost or wrong", seed, k)
			}
		}
	}
}
