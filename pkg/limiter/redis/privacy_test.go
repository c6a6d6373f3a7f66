package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

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
