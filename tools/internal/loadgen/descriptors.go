package loadgen

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// ErrBadDescriptors is returned for a malformed -descriptors value.
var ErrBadDescriptors = errors.New("loadgen: bad descriptor spec")

// EntrySpec is one descriptor entry of the request template. When Fixed is
// false the value is the synthetic subject name "s-<n>" drawn per request.
type EntrySpec struct {
	Key   string
	Value string // used only when Fixed
	Fixed bool
}

// DescriptorSpec is the list of entries of one descriptor.
type DescriptorSpec []EntrySpec

// ParseDescriptors parses the -descriptors flag: descriptors separated by
// ';', each a comma-separated list of entries. An entry "key" gets the
// request's synthetic subject as its value; "key=value" has a fixed value
// (to match a rule that names a value). Example:
// "generic_key=api,remote_address;tenant,user".
func ParseDescriptors(s string) ([]DescriptorSpec, error) {
	var out []DescriptorSpec
	for _, d := range strings.Split(s, ";") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		var ds DescriptorSpec
		for _, e := range strings.Split(d, ",") {
			e = strings.TrimSpace(e)
			k, v, fixed := strings.Cut(e, "=")
			k = strings.TrimSpace(k)
			if k == "" {
				return nil, fmt.Errorf("%w: empty key in %q", ErrBadDescriptors, d)
			}
			ds = append(ds, EntrySpec{Key: k, Value: strings.TrimSpace(v), Fixed: fixed})
		}
		out = append(out, ds)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no descriptor in %q", ErrBadDescriptors, s)
	}
	return out, nil
}

// SubjectNames returns the synthetic values "s-0" … "s-<n-1>", built once so
// the hot loop does no formatting.
func SubjectNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "s-" + strconv.Itoa(i)
	}
	return names
}

// requestTemplate is one worker's reusable request: the entries whose value
// follows the subject are remembered so each call only swaps strings.
type requestTemplate struct {
	req      *rlsv3.RateLimitRequest
	variable []*commonv3.RateLimitDescriptor_Entry
}

func newRequestTemplate(domain string, specs []DescriptorSpec, hits uint32) *requestTemplate {
	t := &requestTemplate{req: &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}}
	for _, ds := range specs {
		d := &commonv3.RateLimitDescriptor{}
		for _, es := range ds {
			e := &commonv3.RateLimitDescriptor_Entry{Key: es.Key, Value: es.Value}
			if !es.Fixed {
				t.variable = append(t.variable, e)
			}
			d.Entries = append(d.Entries, e)
		}
		t.req.Descriptors = append(t.req.Descriptors, d)
	}
	return t
}

// set points every subject-valued entry at name and returns the request.
func (t *requestTemplate) set(name string) *rlsv3.RateLimitRequest {
	for _, e := range t.variable {
		e.Value = name
	}
	return t.req
}

// FormatDescriptors is the inverse of ParseDescriptors (whitespace aside).
func FormatDescriptors(specs []DescriptorSpec) string {
	var b strings.Builder
	for i, ds := range specs {
		if i > 0 {
			b.WriteByte(';')
		}
		for j, e := range ds {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(e.Key)
			if e.Fixed {
				b.WriteByte('=')
				b.WriteString(e.Value)
			}
		}
	}
	return b.String()
}
