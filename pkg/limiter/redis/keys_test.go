package redis

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
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
