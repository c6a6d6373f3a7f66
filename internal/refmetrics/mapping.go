package refmetrics

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Kind is the statsd type of a stat: the per-rule and per-call counts are
// counters, the response time a timer.
type Kind int

// The kinds of stat.
const (
	Counter Kind = iota
	Timer
)

// MaxMappings bounds the mappings of one mapping file.
const MaxMappings = 1000

// MaxMappingBytes bounds the size of a mapping file.
const MaxMappingBytes = 1 << 20

// defaultMapping is the mapping applied without a mapping file: the
// reference service's default (its statsd names as statsd_exporter maps
// them): two-level stat keys as domain and key1, four levels and more as
// domain, key1 and key2, the per-call counters by method and error type.
//
//go:embed default_mapping.yaml
var defaultMapping []byte

// mapping is one entry of a mapping file.
type mapping struct {
	Match, MatchType, Name, Help string
	Labels                       map[string]string
	Action, MatchMetricType      string
	TimerType, ObserverType      string

	re   *regexp.Regexp
	kind *Kind // nil: any kind
}

// UnmarshalYAML decodes a mapping's fields (decodeFields).
func (mp *mapping) UnmarshalYAML(n *yaml.Node) error {
	const text = "a string"
	return decodeFields(n, map[string]field{
		"match": {&mp.Match, text}, "match_type": {&mp.MatchType, text}, "name": {&mp.Name, text}, "help": {&mp.Help, text},
		"labels": {&mp.Labels, "a map of label names to values"}, "action": {&mp.Action, text},
		"match_metric_type": {&mp.MatchMetricType, text}, "timer_type": {&mp.TimerType, text}, "observer_type": {&mp.ObserverType, text},
	})
}

// mappingFile is a mapping file: its list of mappings.
type mappingFile struct{ mappings []*mapping }

// UnmarshalYAML decodes the file's fields (decodeFields).
func (f *mappingFile) UnmarshalYAML(n *yaml.Node) error {
	return decodeFields(n, map[string]field{"mappings": {&f.mappings, "a list of mappings"}})
}

// field is where a YAML field is decoded to, and what it takes.
type field struct {
	to   any
	want string
}

// decodeFields decodes the map n field by field, so that a refusal is one
// line naming the line, the field and why, not the decoder's Go types.
func decodeFields(n *yaml.Node, fields map[string]field) error {
	names := strings.Join(slices.Sorted(maps.Keys(fields)), ", ")
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: must be a map of the fields %s", n.Line, names)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f, ok := fields[k.Value]
		switch {
		case !ok:
			return fmt.Errorf("line %d: unknown field %q (the fields are %s)", k.Line, k.Value, names)
		case seen[k.Value]:
			return fmt.Errorf("line %d: field %s given twice", k.Line, k.Value)
		}
		seen[k.Value] = true
		var te *yaml.TypeError
		if err := v.Decode(f.to); errors.As(err, &te) {
			return fmt.Errorf("line %d: %s: must be %s", v.Line, k.Value, f.want)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// Mapper turns the reference's statsd stat names into Prometheus names and
// labels, as statsd_exporter's mapping files do. The glob mappings are
// tried first, in file order, then the regular expressions, in file order;
// a stat no mapping matches keeps its name, each character that a metric
// name cannot hold replaced by '_'. A Mapper is immutable and safe for
// concurrent use.
type Mapper struct {
	globs, regexps []*mapping
}

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// defaultMapper is the reference service's default mapping. (An error is a
// defect of the build: TestDefaultMapping parses it.)
func defaultMapper() (*Mapper, error) {
	m, err := ParseMapping(bytes.NewReader(defaultMapping))
	if err != nil {
		return nil, fmt.Errorf("refmetrics: the default mapping: %w", err)
	}
	return m, nil
}

// loadMapping reads a mapping file.
func loadMapping(path string) (*Mapper, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMapping(f)
}

// ParseMapping parses a statsd_exporter mapping file: a list under
// mappings of entries with match, match_type (glob or regex), name,
// labels, help, action (map or drop), match_metric_type (counter, gauge,
// observer or timer), timer_type and observer_type (histogram, summary or
// default: every timer is exported as a histogram). Any other field is an
// error naming its line.
func ParseMapping(r io.Reader) (*Mapper, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxMappingBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxMappingBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxMappingBytes)
	}
	var doc mappingFile
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.mappings) > MaxMappings {
		return nil, fmt.Errorf("%d mappings: at most %d", len(doc.mappings), MaxMappings)
	}
	m := &Mapper{}
	for i, mp := range doc.mappings {
		if err := mp.compile(); err != nil {
			return nil, fmt.Errorf("mapping %d (match %q): %w", i+1, mp.Match, err)
		}
		if mp.MatchType == "regex" {
			m.regexps = append(m.regexps, mp)
		} else {
			m.globs = append(m.globs, mp)
		}
	}
	return m, nil
}

// compile checks a mapping and compiles its match.
func (mp *mapping) compile() error {
	if mp.Match == "" {
		return errors.New("match is empty")
	}
	switch mp.MatchType {
	case "", "glob":
		mp.MatchType = "glob"
		mp.re = globRegexp(mp.Match)
	case "regex":
		re, err := regexp.Compile(mp.Match)
		if err != nil {
			return fmt.Errorf("match: %w", err)
		}
		mp.re = re
	default:
		return fmt.Errorf("match_type %q: must be glob or regex", mp.MatchType)
	}
	switch mp.Action {
	case "", "map":
		if mp.Name == "" {
			return errors.New("name is empty")
		}
	case "drop":
	default:
		return fmt.Errorf("action %q: must be map or drop", mp.Action)
	}
	for name := range mp.Labels {
		if !labelName.MatchString(name) || strings.HasPrefix(name, "__") {
			return fmt.Errorf("label name %q: must match %s and not start with __", name, labelName)
		}
	}
	switch mp.MatchMetricType {
	case "":
	case "counter":
		k := Counter
		mp.kind = &k
	case "observer", "timer":
		k := Timer
		mp.kind = &k
	case "gauge":
		k := Kind(-1) // no stat of the service is a gauge
		mp.kind = &k
	default:
		return fmt.Errorf("match_metric_type %q: must be counter, gauge, observer or timer", mp.MatchMetricType)
	}
	for _, t := range []struct{ field, v string }{{"timer_type", mp.TimerType}, {"observer_type", mp.ObserverType}} {
		switch t.v {
		case "", "histogram", "summary", "default":
		default:
			return fmt.Errorf("%s %q: must be histogram, summary or default", t.field, t.v)
		}
	}
	return nil
}

// globRegexp is the expression of a glob: each '*' matches one part of a
// dotted name (no '.'), as a group; the rest is literal.
func globRegexp(glob string) *regexp.Regexp {
	parts := strings.Split(glob, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, `([^.]*)`) + "$")
}

// Series is where a stat is exported: a metric name and its labels.
type Series struct {
	Name   string
	Help   string
	Labels map[string]string
}

// Map finds the series of a stat. ok is false when a drop mapping matches.
// The name of a mapped series may be invalid (a substitution that put a
// character a name cannot hold); Valid says.
func (m *Mapper) Map(stat string, kind Kind) (s Series, ok bool) {
	for _, list := range [][]*mapping{m.globs, m.regexps} {
		for _, mp := range list {
			if mp.kind != nil && *mp.kind != kind {
				continue
			}
			idx := mp.re.FindStringSubmatchIndex(stat)
			if idx == nil {
				continue
			}
			if mp.Action == "drop" {
				return Series{}, false
			}
			s = Series{Name: mp.expand(mp.Name, stat, idx), Help: mp.Help}
			if len(mp.Labels) > 0 {
				s.Labels = make(map[string]string, len(mp.Labels))
				for k, v := range mp.Labels {
					s.Labels[k] = mp.expand(v, stat, idx)
				}
			}
			return s, true
		}
	}
	return Series{Name: EscapeName(stat)}, true
}

// globGroup is a reference to a glob's group in a template: $N or ${N}.
var globGroup = regexp.MustCompile(`\$\{?(\d+)\}?`)

// expand fills template with the groups of a match (idx): a regex
// mapping's by regexp.Expand ($name, ${name}); a glob's by number only, so
// "$1_total" is group 1 followed by "_total".
func (mp *mapping) expand(template, stat string, idx []int) string {
	if mp.MatchType == "regex" {
		return string(mp.re.ExpandString(nil, template, stat, idx))
	}
	return globGroup.ReplaceAllStringFunc(template, func(ref string) string {
		n, err := strconv.Atoi(globGroup.FindStringSubmatch(ref)[1])
		if err != nil || 2*n+1 >= len(idx) || idx[2*n] < 0 {
			return ""
		}
		return stat[idx[2*n]:idx[2*n+1]]
	})
}

// Valid says whether the series' name is a Prometheus metric name.
func (s Series) Valid() bool { return metricName.MatchString(s.Name) }

// EscapeName is the metric name of an unmapped stat: every character other
// than a letter, a digit or '_' becomes '_', and a leading digit gets a '_'
// in front.
func EscapeName(stat string) string {
	var b strings.Builder
	for i, c := range stat {
		if i == 0 && c >= '0' && c <= '9' {
			b.WriteByte('_')
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
