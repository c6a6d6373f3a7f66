package descriptors

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// MinSecretLength is the shortest HMAC secret Load accepts.
const MinSecretLength = 16

// DefaultDebounce is how long the Watcher waits after the last file event
// before it reloads.
const DefaultDebounce = 150 * time.Millisecond

// Options configure Load and NewWatcher.
type Options struct {
	// Secret keys the HMAC that pseudonymizes subjects; at least
	// MinSecretLength bytes. Load keeps its own copy. (Required)
	Secret []byte
	// Debounce is the Watcher's quiet period after a file event.
	// (Optional, default DefaultDebounce)
	Debounce time.Duration
}

// Snapshot is an immutable, compiled rule set. It is safe for concurrent use
// by multiple goroutines. A nil *Snapshot knows no domain and matches
// nothing.
type Snapshot struct {
	domains     map[string]*domain
	order       []*domain // sorted by name
	files       []string
	fingerprint [32]byte
	rules       int
	limited     int
	// macs holds *macState values keyed with the HMAC secret. The secret is
	// captured by the pool's New function only, so that printing a Snapshot
	// never prints it.
	macs      sync.Pool
	overrides overrideCache
}

type domain struct {
	name        string
	file        string
	root        *level
	rules       []*Rule // configuration order
	policyNames []string
	replaceRefs []nameRef // only while compiling
}

// level is one list of descriptors: by key, then exact value, wildcard
// values (configuration order) and the key-only rule.
type level struct {
	byKey map[string]*keyGroup
}

type keyGroup struct {
	exact     map[string]*node
	wildcards []*node
	keyOnly   *node
}

type node struct {
	rule     *Rule // nil when the descriptor has no rate_limit
	pattern  string
	parts    []string // pattern split at '*'
	share    bool
	children *level
	src      pos
}

// source is the content of one rule file.
type source struct {
	name string
	data []byte
}

// Load reads a rule file, or every *.yaml and *.yml file directly inside a
// directory (names starting with "." are skipped, symbolic links to files
// are followed, subdirectories are not read), and compiles them. A problem
// in any file fails the whole load with a *ConfigError listing every problem
// found.
func Load(path string, opts Options) (*Snapshot, error) {
	if len(opts.Secret) < MinSecretLength {
		return nil, ErrSecret
	}
	srcs, err := readSources(path)
	if err != nil {
		return nil, err
	}
	return build(srcs, opts.Secret)
}

func readSources(path string) ([]source, error) {
	var ps problems
	fi, err := os.Stat(path)
	if err != nil {
		ps.add(path, 0, 0, "cannot read the configuration: %v", unwrapPath(err))
		return nil, ps.err()
	}
	var names []string
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			ps.add(path, 0, 0, "cannot list the directory: %v", unwrapPath(err))
			return nil, ps.err()
		}
		for _, e := range entries {
			n := e.Name()
			ext := strings.ToLower(filepath.Ext(n))
			if strings.HasPrefix(n, ".") || (ext != ".yaml" && ext != ".yml") {
				continue
			}
			full := filepath.Join(path, n)
			st, err := os.Stat(full) // follows symbolic links
			if err != nil {
				ps.add(full, 0, 0, "cannot read the file: %v", unwrapPath(err))
				continue
			}
			if st.Mode().IsRegular() {
				names = append(names, full)
			}
		}
		if len(names) == 0 && len(ps.list) == 0 {
			ps.add(path, 0, 0, "no *.yaml or *.yml rule files in the directory")
		}
	} else {
		names = []string{path}
	}
	srcs := make([]source, 0, len(names))
	for _, n := range names {
		data, err := readLimited(n)
		if err != nil {
			ps.add(n, 0, 0, "%v", err)
			continue
		}
		srcs = append(srcs, source{name: n, data: data})
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	return srcs, nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func readLimited(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read the file: %v", unwrapPath(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the file: %v", unwrapPath(err))
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("file is larger than %d bytes", MaxFileSize)
	}
	return data, nil
}

// build parses and compiles sources (already sorted by name).
func build(srcs []source, secret []byte) (*Snapshot, error) {
	return buildBudget(srcs, secret, maxNodes)
}

// buildBudget is build with a per-file work budget (see maxNodes).
func buildBudget(srcs []source, secret []byte, budget int) (*Snapshot, error) {
	var ps problems
	files := make([]*rawFile, 0, len(srcs))
	names := make([]string, 0, len(srcs))
	for _, s := range srcs {
		names = append(names, s.name)
		if rf := parseFile(s.name, s.data, &ps, budget); rf != nil {
			files = append(files, rf)
		}
	}
	domains := compile(files, &ps)
	if err := ps.err(); err != nil {
		return nil, err
	}
	s := &Snapshot{domains: domains, files: names, fingerprint: fingerprint(srcs)}
	for _, d := range domains {
		s.order = append(s.order, d)
		s.rules += len(d.rules)
		for _, r := range d.rules {
			if r.Policy != nil {
				s.limited++
			}
		}
	}
	slices.SortFunc(s.order, func(a, b *domain) int { return strings.Compare(a.name, b.name) })
	key := slices.Clone(secret)
	s.macs.New = func() any { return &macState{mac: hmac.New(sha256.New, key)} }
	s.overrides.m = map[string]*Rule{}
	return s, nil
}

func newFingerprint() hash.Hash { return sha256.New() }

func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// HasDomain reports whether the snapshot holds rules for domain.
func (s *Snapshot) HasDomain(domain string) bool {
	if s == nil {
		return false
	}
	_, ok := s.domains[domain]
	return ok
}

// Fingerprint is a hex SHA-256 over the file names and contents the snapshot
// was built from; equal fingerprints mean identical input.
func (s *Snapshot) Fingerprint() string {
	if s == nil {
		return ""
	}
	return hex.EncodeToString(s.fingerprint[:])
}

// Files lists the rule files the snapshot was built from.
func (s *Snapshot) Files() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.files)
}

// Match finds the rule that limits one descriptor of domain, with the
// reference's precedence: entry by entry, an exact value beats a wildcard
// value (the first matching one in file order), which beats the key-only
// rule; a nested list is entered only through the entry that matched, with
// no backtracking; and the rule must sit at the depth of the descriptor's
// last entry. ok is false when no rule with a rate_limit (or unlimited)
// matches: the descriptor then has no limit.
//
// The Subject digest is computed for limited rules (it is zero for an
// unlimited rule, which never reaches a store).
func (s *Snapshot) Match(domain string, entries []Entry) (Match, bool) {
	if s == nil || len(entries) == 0 || len(entries) > MaxDepth {
		return Match{}, false
	}
	d := s.domains[domain]
	if d == nil {
		return Match{}, false
	}
	var path [MaxDepth]*node
	lv := d.root
	for i, e := range entries {
		if lv == nil {
			return Match{}, false
		}
		n := lv.lookup(e.Key, e.Value)
		if n == nil {
			return Match{}, false
		}
		path[i] = n
		lv = n.children
	}
	r := path[len(entries)-1].rule
	if r == nil {
		return Match{}, false
	}
	m := Match{Rule: r}
	if r.Policy != nil {
		m.Subject = s.subject(r.Policy.ID(), entries, path[:len(entries)])
		if r.Colocate != "" {
			m.Tag = s.tag(entries[r.colocateAt], path[r.colocateAt])
		}
	}
	return m, true
}

func (lv *level) lookup(key, value string) *node {
	g := lv.byKey[key]
	if g == nil {
		return nil
	}
	if n := g.exact[value]; n != nil {
		return n
	}
	for _, w := range g.wildcards {
		if globMatch(w.parts, value) {
			return w
		}
	}
	return g.keyOnly
}

// globMatch reports whether value matches the pattern split at '*' into
// parts (so len(parts) >= 2). Time is linear in len(value) per part.
func globMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	mid := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// Subject encoding (HMAC-SHA256 input), version 1:
//
//	0x01
//	u32 len(policyID) policyID
//	u32 number of entries
//	per entry: u32 len(key) key, tag byte, u32 len(v) v
//
// where the tag is 'v' when v is the request value and 'p' when v is the
// configured wildcard pattern of a share_threshold rule (all matching values
// then share one subject). Every variable field is length-prefixed, so no two
// different inputs share an encoding: ("a","bc") and ("ab","c") differ.
const subjectVersion = 1

// maxPooledBuf caps the scratch buffer kept in the pool.
const maxPooledBuf = 64 << 10

type macState struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// subject computes the HMAC digest for entries matched along path (path may
// be nil: every value is then used as is).
func (s *Snapshot) subject(policyID string, entries []Entry, path []*node) limiter.SubjectDigest {
	st := s.macs.Get().(*macState)
	b := append(st.buf[:0], subjectVersion)
	b = appendField(b, policyID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	for i, e := range entries {
		var n *node
		if path != nil {
			n = path[i]
		}
		b = appendEntry(b, e, n)
	}
	var out limiter.SubjectDigest
	sum := s.sum(st, b)
	copy(out[:], sum[:])
	return out
}

// appendEntry appends one matched entry as the subject and colocation
// encodings both have it: its key, then 'p' and the share_threshold pattern
// of n (a node matched by a pattern with share_threshold), or 'v' and the
// value. n may be nil.
func appendEntry(b []byte, e Entry, n *node) []byte {
	b = appendField(b, e.Key)
	if n != nil && n.share {
		b = append(b, 'p')
		return appendField(b, n.pattern)
	}
	b = append(b, 'v')
	return appendField(b, e.Value)
}

// sum returns the HMAC of b, built in st's buffer, and puts st back in the
// pool (keeping the buffer unless it grew beyond maxPooledBuf).
func (s *Snapshot) sum(st *macState, b []byte) [sha256.Size]byte {
	st.mac.Reset()
	st.mac.Write(b)
	st.mac.Sum(st.sum[:0])
	out := st.sum
	if cap(b) <= maxPooledBuf {
		st.buf = b
	} else {
		st.buf = nil
	}
	s.macs.Put(st)
	return out
}

func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// Colocation tag encoding (HMAC-SHA256 input), version 1:
//
//	0x02 'c'
//	u32 len(key) key, tag byte, u32 len(v) v
//
// with the tag byte and v as in the subject encoding (a share_threshold
// entry uses its pattern). The policy ID is not part of it: every rule that
// colocates on one entry value gets the same tag. The first 8 bytes of the
// digest are the tag; 0x02 keeps it apart from any subject digest.
const tagVersion = 2

// tag computes the colocation hash tag of one matched entry.
func (s *Snapshot) tag(e Entry, n *node) limiter.Tag {
	st := s.macs.Get().(*macState)
	b := append(st.buf[:0], tagVersion, 'c')
	b = appendEntry(b, e, n)
	var out limiter.Tag
	sum := s.sum(st, b)
	copy(out[:], sum[:])
	if out == (limiter.Tag{}) {
		out[7] = 1 // zero means "derive from the subject"
	}
	return out
}
