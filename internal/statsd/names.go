package statsd

import (
	"fmt"
	"sort"
	"strings"
)

// SerializeTags is the suffix the tags add to every stat name: for each
// tag with a non-empty key and value, in key order, ".__key=value", with
// '.', ':' and '|' in keys and values replaced by '_' (the encoding of the
// reference's stats library).
func SerializeTags(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	clean := strings.NewReplacer(".", "_", ":", "_", "|", "_")
	for _, k := range keys {
		b.WriteString(".__")
		b.WriteString(SanitizeName(clean.Replace(k)))
		b.WriteByte('=')
		b.WriteString(SanitizeName(clean.Replace(tags[k])))
	}
	return b.String()
}

// SanitizeName replaces the bytes that would break a statsd line (':',
// '|', '#', '@', spaces and control characters) with '_'.
func SanitizeName(s string) string {
	bad := func(c byte) bool {
		return c == ':' || c == '|' || c == '#' || c == '@' || c <= ' ' || c == 0x7f
	}
	i := 0
	for i < len(s) && !bad(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if bad(b[i]) {
			b[i] = '_'
		}
	}
	return string(b)
}

// parseTags parses the reference's EXTRA_TAGS format: comma-separated
// key:value pairs ("" is none). As there, a later pair wins over an
// earlier one of the same key, and a pair whose key or value is empty is
// accepted and sends nothing (SerializeTags drops it); a pair without ':'
// is an error.
func parseTags(s string) (map[string]string, error) {
	tags := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return tags, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, ":")
		if !ok {
			return nil, fmt.Errorf("statsd: tag %q is not key:value", pair)
		}
		tags[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return tags, nil
}
