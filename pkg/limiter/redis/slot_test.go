package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

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
