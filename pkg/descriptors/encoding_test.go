package descriptors

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"testing"
)

// TestDigestEncodings recomputes the subject digest and the colocation tag
// from the encodings documented in snapshot.go, independently of the code
// that builds them: the digests name the state in Redis, so any change of
// encoding would silently reset every limit on upgrade.
func TestDigestEncodings(t *testing.T) {
	field := func(b []byte, s string) []byte {
		return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
	}
	mac := func(in []byte) []byte {
		m := hmac.New(sha256.New, testSecret)
		m.Write(in)
		return m.Sum(nil)
	}

	// Two request values, and the colocation tag on the first entry.
	s := mustLoad(t, "../../config/examples/07-hierarchical.yaml")
	m, ok := s.Match("saas", e("tenant=acme", "user=bob"))
	if !ok {
		t.Fatal("no match for tenant=acme, user=bob")
	}
	in := field([]byte{1}, m.Rule.Policy.ID())
	in = binary.BigEndian.AppendUint32(in, 2)
	in = append(field(in, "tenant"), 'v')
	in = field(in, "acme")
	in = append(field(in, "user"), 'v')
	in = field(in, "bob")
	if want := mac(in); string(m.Subject[:]) != string(want) {
		t.Fatalf("subject %x, want %x (version 1 encoding)", m.Subject, want)
	}
	tagIn := append(field([]byte{2, 'c'}, "tenant"), 'v')
	tagIn = field(tagIn, "acme")
	if want := mac(tagIn)[:8]; string(m.Tag[:]) != string(want) {
		t.Fatalf("tag %x, want %x (version 2 encoding)", m.Tag, want)
	}

	// A share_threshold rule: the configured pattern stands for the value.
	s = mustLoad(t, "../../config/examples/01-reference.yaml")
	m, ok = s.Match("edge", e("path=/downloads/big.zip"))
	if !ok {
		t.Fatal("no match for path=/downloads/big.zip")
	}
	in = field([]byte{1}, m.Rule.Policy.ID())
	in = binary.BigEndian.AppendUint32(in, 1)
	in = append(field(in, "path"), 'p')
	in = field(in, "*.zip")
	if want := mac(in); string(m.Subject[:]) != string(want) {
		t.Fatalf("share_threshold subject %x, want %x", m.Subject, want)
	}
}
