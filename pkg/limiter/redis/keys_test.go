package redis

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// referenceKey states the key layout of rate-batch-v1.lua apart from
// StorageKeyV1 (with a streaming hasher): keys already in Redis have this
// layout, so it must never change.
func referenceKey(p *limiter.Policy, subject limiter.SubjectDigest, tag limiter.Tag) string {
	h := sha256.New()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(p.ID())))
	h.Write(n[:])
	h.Write([]byte(p.ID()))
	binary.BigEndian.PutUint32(n[:], p.Revision())
	h.Write(n[:])
	h.Write([]byte{byte(p.Algorithm())})
	h.Write(subject[:])
	if tag == (limiter.Tag{}) {
		copy(tag[:], subject[:8])
	}
	return "rate:{" + hex.EncodeToString(tag[:]) + "}:state:" + hex.EncodeToString(h.Sum(nil))
}

func TestStorageKeyLayoutUnchanged(t *testing.T) {
	for _, id := range []string{"a", "edge.remote_address", strings.Repeat("x", limiter.MaxPolicyIDLength)} {
		for _, rev := range []uint32{1, 7} {
			p := limitertest.Policy(t, limiter.PolicySpec{ID: id, Revision: rev, Algorithm: limiter.TokenBucket,
				Params: limiter.TokenBucketParams{Capacity: 5, RefillAmount: 1, RefillPeriod: time.Second}})
			var sub limiter.SubjectDigest
			for i := range sub {
				sub[i] = byte(i * 7)
			}
			for _, tag := range []limiter.Tag{{}, {9, 8, 7, 6, 5, 4, 3, 2}} {
				if got, want := string(storageKeyV1([]byte("pre:"), p, sub, tag)), "pre:"+referenceKey(p, sub, tag); got != want {
					t.Fatalf("%s rev %d tag %x:\n got %s\nwant %s", id, rev, tag, got, want)
				}
			}
		}
	}
}

// referenceKeyV2 states StorageKey's layout apart from it: the tag, the
// policy's digest and the state's, each with a streaming hasher.
func referenceKeyV2(p *limiter.Policy, subject limiter.SubjectDigest, tag limiter.Tag) string {
	v1 := referenceKey(p, subject, tag)
	h := sha256.New()
	var n [4]byte
	h.Write([]byte("policy"))
	binary.BigEndian.PutUint32(n[:], uint32(len(p.ID())))
	h.Write(n[:])
	h.Write([]byte(p.ID()))
	binary.BigEndian.PutUint32(n[:], p.Revision())
	h.Write(n[:])
	tagPart, digest, _ := strings.Cut(v1, ":state:")
	return tagPart + ":state:v2:" + hex.EncodeToString(h.Sum(nil)[:8]) + ":" + digest[:32]
}

// TestStorageKeyLayoutV2: StorageKey, the layout of rate-batch-v2.lua,
// as referenceKeyV2 states it; a key of one layout is never a key of the
// other, and the policy's part is the same for every subject and tag of a
// policy at a revision, and another for another policy or revision.
func TestStorageKeyLayoutV2(t *testing.T) {
	parts := map[string]string{}
	for _, id := range []string{"a", "edge.remote_address", strings.Repeat("x", limiter.MaxPolicyIDLength)} {
		for _, rev := range []uint32{1, 7} {
			p := limitertest.Policy(t, limiter.PolicySpec{ID: id, Revision: rev, Algorithm: limiter.FixedWindow,
				Params: limiter.FixedWindowParams{Limit: 5, Window: time.Second}})
			for s := range 3 {
				var sub limiter.SubjectDigest
				for i := range sub {
					sub[i] = byte(i*7 + s)
				}
				for _, tag := range []limiter.Tag{{}, {9, 8, 7, 6, 5, 4, 3, 2}} {
					got := string(StorageKey([]byte("pre:"), p, sub, tag))
					if want := "pre:" + referenceKeyV2(p, sub, tag); got != want {
						t.Fatalf("%s rev %d tag %x:\n got %s\nwant %s", id, rev, tag, got, want)
					}
					if got[4:] == string(storageKeyV1(nil, p, sub, tag)) {
						t.Fatal("the two layouts build the same key")
					}
					part := strings.Split(got, ":")[5]
					if other, ok := parts[part]; ok && other != id+"/"+strconv.Itoa(int(rev)) {
						t.Fatalf("policy part %s of %s/%d and of %s", part, id, rev, other)
					}
					parts[part] = id + "/" + strconv.Itoa(int(rev))
				}
			}
		}
	}
	if len(parts) != 6 {
		t.Fatalf("%d policy parts for 6 policies", len(parts))
	}
}

// TestStateKeyLayout: the names the key builders make are told apart,
// with StorageKey's policy part; a name that differs from a layout in any
// part (a digit too many or too few, a capital, another separator) is of
// none.
func TestStateKeyLayout(t *testing.T) {
	p := fixed(t, "layout", 5, time.Hour)
	sub := subjectOf("layout")
	pd := policyDigest(p.ID(), p.Revision())
	v2, v1 := keyOf(p, sub), string(storageKeyV1(nil, p, sub, limiter.Tag{}))
	if l, policy := stateKeyLayout(v2); l != layoutV2 || policy != hex.EncodeToString(pd[:]) {
		t.Errorf("%s: %v %q", v2, l, policy)
	}
	if l, _ := stateKeyLayout(v1); l != layoutV1 {
		t.Errorf("%s: %v", v1, l)
	}
	for _, k := range []string{
		v2[:len(v2)-1], v2 + "0", v2 + ":", strings.ToUpper(v2), v1[:len(v1)-1], v1 + "0",
		strings.Replace(v2, "{", "{0", 1), strings.Replace(v2, "}", "0}", 1), strings.Replace(v2, ":state:", ":State:", 1),
		strings.Replace(v2, ":v2:", ":v3:", 1), v2[:len(v2)-33] + "g" + v2[len(v2)-32:], v2[:len(v2)-32] + "g" + v2[len(v2)-31:],
		strings.Replace(v1, ":state:", ":state:v2:", 1), "rate:{}:state:", "", "rate:{0123456789abcdef}:state:x",
	} {
		if l, _ := stateKeyLayout(k); l != layoutNone {
			t.Errorf("%q: %v, want none", k, l)
		}
	}
}

func TestStorageKeyTag(t *testing.T) {
	p := fixed(t, "f", 5, time.Second)
	var sub limiter.SubjectDigest
	sub[0] = 0xab
	k := string(StorageKey(nil, p, sub, limiter.Tag{}))
	if k[:23] != "rate:{ab00000000000000}" {
		t.Fatalf("derived tag: %s", k)
	}
	tagged := string(StorageKey(nil, p, sub, limiter.Tag{1, 2, 3, 4, 5, 6, 7, 8}))
	if tagged[:23] != "rate:{0102030405060708}" || tagged[23:] != k[23:] {
		t.Fatalf("explicit tag: %s (derived %s)", tagged, k)
	}
	r := limiter.Request{Policy: p, Subject: sub, Tag: limiter.Tag{1, 2, 3, 4, 5, 6, 7, 8}}
	if string(requestKey(nil, &r)) != tagged {
		t.Fatal("requestKey differs from StorageKey")
	}
}

// TestDemandKey: an aggregate's demand hash is named as its state, with
// demand:v1 for state:v2, so it shares the state's hash tag and slot; no
// state layout matches it, so a policy reset never reads it.
func TestDemandKey(t *testing.T) {
	p := fixed(t, "demand", 5, time.Second)
	for _, sub := range []limiter.SubjectDigest{subjectOf("10.0.0.7"), subjectOf("10.0.0.8")} {
		for _, tag := range []limiter.Tag{{}, {1, 2, 3, 4, 5, 6, 7, 8}} {
			state := string(StorageKey(nil, p, sub, tag))
			got := string(DemandKey([]byte("pre:"), p, sub, tag))
			if want := "pre:" + strings.Replace(state, ":state:v2:", ":demand:v1:", 1); got != want {
				t.Errorf("tag %x:\n got %s\nwant %s", tag, got, want)
			}
			if keySlot(got[4:]) != keySlot(state) || got[4:27] != state[:23] {
				t.Errorf("%s is not in the slot of %s", got[4:], state)
			}
			if l, _ := stateKeyLayout(got[4:]); l != layoutNone {
				t.Errorf("%s has a state layout %v", got[4:], l)
			}
		}
	}
}

func BenchmarkStorageKey(b *testing.B) {
	p := fixed(b, "bench.remote_address", 5, time.Second)
	var sub limiter.SubjectDigest
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = StorageKey(buf[:0], p, sub, limiter.Tag{})
	}
}

// assertPrivateKeys SCANs every key of the server at addr: none may contain
// any of raw, and every key must have a TTL.
func assertPrivateKeys(t *testing.T, addr string, raw []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := redistest.Dial(addr, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cursor, keys := "0", 0
	for i := 0; i < 100_000; i++ {
		v, err := c.Do(ctx, "SCAN", cursor, "COUNT", "1000")
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		a := v.([]any)
		cursor = a[0].(string)
		for _, k := range a[1].([]any) {
			key := k.(string)
			keys++
			for _, r := range raw {
				if strings.Contains(key, r) {
					t.Errorf("key %q contains the raw value %q", key, r)
				}
			}
			if !strings.HasPrefix(key, "rate:{") {
				t.Errorf("key %q is not a rate key", key)
			}
			ttl, err := c.Do(ctx, "PTTL", key)
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			if n := ttl.(int64); n <= 0 {
				t.Errorf("key %q has no TTL (PTTL %d)", key, n)
			}
			// A state is a string (rate-batch-v2.lua), a hash of the
			// previous layout: every value it holds.
			var values []any
			if v, err := c.Do(ctx, "GET", key); err == nil {
				values = []any{v}
			} else if h, err := c.Do(ctx, "HGETALL", key); err == nil {
				values = h.([]any)
			}
			for _, f := range values {
				for _, r := range raw {
					if s, _ := f.(string); strings.Contains(s, r) {
						t.Errorf("key %q holds the raw value %q", key, r)
					}
				}
			}
		}
		if cursor == "0" {
			break
		}
	}
	if keys == 0 {
		t.Fatal("no keys at all: nothing was checked")
	}
}

func TestKeySlotKnownValues(t *testing.T) {
	for key, want := range map[string]uint16{
		// CRC-16/XMODEM check value of "123456789" is 0x31C3.
		"123456789": 0x31C3 % slotCount,
		// redis-cli CLUSTER KEYSLOT <key> (Redis 7.0).
		"foo":                  12182,
		"bar":                  5061,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           8363, // an empty tag: the whole key
		"foo{{bar}}zap":        4015, // the tag is "{bar"
		"":                     0,
	} {
		if got := keySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestKeySlotAgainstServer compares KeySlot with CLUSTER KEYSLOT of a real
// cluster-enabled server (CLUSTER KEYSLOT needs no cluster to be formed).
func TestKeySlotAgainstServer(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local(), redistest.WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 300 {
		key := fmt.Sprintf("rate:{%016x}:state:%d", uint64(i)*0x9E3779B97F4A7C15, i)
		if i%3 == 0 {
			key = fmt.Sprintf("k%d{}", i*7919)
		}
		v, err := srv.Do(ctx, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(key); int64(got) != v.(int64) {
			t.Fatalf("KeySlot(%q) = %d, CLUSTER KEYSLOT = %d", key, got, v)
		}
	}
}

// storageKeyV1 appends the key of the state of (policy, subject) in the
// layout of rate-batch-v1.lua to buf:
//
//	rate:{<tag>}:state:<hex(sha256(policyID, revision, algorithm, subject))>
//
// with the tag of StorageKey.
func storageKeyV1(buf []byte, p *limiter.Policy, subject limiter.SubjectDigest, tag limiter.Tag) []byte {
	d := stateDigest(p, subject)
	buf = appendTag(buf, subject, tag)
	buf = append(buf, ":state:"...)
	return hex.AppendEncode(buf, d[:])
}
