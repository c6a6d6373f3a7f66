package descriptors

import "testing"

// TestStatKey checks the reference service's stat key of matched rules:
// key for a key-only level, key_value for a level with a configured value,
// and never the request's value of a key-only level.
func TestStatKey(t *testing.T) {
	s := loadRules(t)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		want    string
	}{
		{"value-specific", "ref", e("database=users"), "ref.database_users"},
		{"nested per value", "ref", e("message_type=marketing", "to_number=2061111111"), "ref.message_type_marketing.to_number"},
		{"key-only", "ref", e("remote_address=50.0.0.1"), "ref.remote_address"},
		{"exact value", "ref", e("remote_address=50.0.0.5"), "ref.remote_address_50.0.0.5"},
	}
	for _, tc := range tests {
		m, ok := s.Match(tc.domain, tc.entries)
		if !ok || m.Rule == nil {
			t.Fatalf("%s: no match", tc.name)
		}
		if m.Rule.StatKey != tc.want {
			t.Errorf("%s: StatKey = %q, want %q", tc.name, m.Rule.StatKey, tc.want)
		}
	}
}
