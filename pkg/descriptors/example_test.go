package descriptors_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

func ExampleSnapshot_Match() {
	dir, _ := os.MkdirTemp("", "rules")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 198.51.100.66
    rate_limit: {unit: second, requests_per_unit: 0}
`), 0o644)

	snap, err := descriptors.Load(dir, descriptors.Options{Secret: []byte("a secret of at least 16 bytes")})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ip := range []string{"203.0.113.7", "198.51.100.66"} {
		m, ok := snap.Match("edge", []descriptors.Entry{{Key: "remote_address", Value: ip}})
		fmt.Println(ok, m.Rule.Path, m.Rule.Policy.ID(), m.Rule.Policy.Limit())
	}
	_, ok := snap.Match("edge", []descriptors.Entry{{Key: "user", Value: "alice"}})
	fmt.Println(ok)
	// Output:
	// true edge/remote_address edge/remote_address 10
	// true edge/remote_address=198.51.100.66 edge/remote_address:198.51.100.66 0
	// false
}

func ExampleLoad_errors() {
	dir, _ := os.MkdirTemp("", "rules")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: fortnight, requests_per_unit: 10, burst: 5}
`), 0o644)
	_, err := descriptors.Load(dir, descriptors.Options{Secret: []byte("a secret of at least 16 bytes")})
	if ce, ok := err.(*descriptors.ConfigError); ok {
		for _, p := range ce.Problems {
			fmt.Printf("%s:%d:%d: %s\n", filepath.Base(p.File), p.Line, p.Column, p.Reason)
		}
	}
	// Output:
	// bad.yaml:4:18: rate_limit: invalid rate limit unit "fortnight" (expected second, minute, hour, day, week, month or year)
	// bad.yaml:4:58: rate_limit: burst is only valid with algorithm: token_bucket or gcra
}
