package redis

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// referenceKey states the key layout apart from StorageKey (with a streaming
// hasher): keys already in Redis have this layout, so it must never change.
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
				if got, want := string(StorageKey([]byte("pre:"), p, sub, tag)), "pre:"+referenceKey(p, sub, tag); got != want {
					t.Fatalf("%s rev %d tag %x:\n got %s\nwant %s", id, rev, tag, got, want)
				}
			}
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
			h, err := c.Do(ctx, "HGETALL", key)
			if err == nil {
				for _, f := range h.([]any) {
					for _, r := range raw {
						if strings.Contains(f.(string), r) {
							t.Errorf("key %q holds the raw value %q", key, r)
						}
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
		"123456789": 0x31C3 % SlotCount,
		// redis-cli CLUSTER KEYSLOT <key> (Redis 7.0).
		"foo":                  12182,
		"bar":                  5061,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           8363, // an empty tag: the whole key
		"foo{{bar}}zap":        4015, // the tag is "{bar"
		"":                     0,
	} {
		if got := KeySlot(key); got != want {
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
		if got := KeySlot(key); int64(got) != v.(int64) {
			t.Fatalf("KeySlot(%q) = %d, CLUSTER KEYSLOT = %d", key, got, v)
		}
	}
}
