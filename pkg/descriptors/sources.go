package descriptors

import (
	"fmt"
	"slices"
	"strings"
)

// Source is one rule document held in memory: a rule file's content under
// a name that problems are reported against (a file name, or for rules
// received from an xDS server, the resource's name).
type Source struct {
	Name string
	Data []byte
}

// Compile compiles rule documents held in memory exactly as Load compiles
// rule files: the same parser, validation, limits and policy IDs. Sources
// are compiled in name order; two with the same name are refused. An empty
// list compiles to a snapshot without domains.
func Compile(srcs []Source, opts Options) (*Snapshot, error) {
	if len(opts.Secret) < MinSecretLength {
		return nil, ErrSecret
	}
	lim := opts.Limits.withDefaults()
	list := make([]source, 0, len(srcs))
	var total int64
	var ps problems
	for _, s := range srcs {
		if len(s.Data) > MaxFileSize {
			ps.add(s.Name, 0, 0, "document is larger than %d bytes", MaxFileSize)
		}
		total += int64(len(s.Data))
		list = append(list, source{name: s.Name, data: s.Data})
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	if total > lim.MaxBytes {
		return nil, &LimitError{Limit: LimitBytes, Max: lim.MaxBytes, Total: total, Files: len(list)}
	}
	slices.SortStableFunc(list, func(a, b source) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(list); i++ {
		if list[i].name == list[i-1].name {
			return nil, fmt.Errorf("descriptors: two rule documents are named %q", list[i].name)
		}
	}
	return build(list, opts, lim)
}

// Size returns the number of domains and of rules of the snapshot.
func (s *Snapshot) Size() (domains, rules int) {
	return len(s.order), s.rules
}
