package descriptors

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// source is the content of one rule file.
type source struct {
	name string
	data []byte
}

// Load reads a rule file, or every *.yaml and *.yml file directly inside a
// directory (names starting with "." are skipped, symbolic links to files
// are followed, subdirectories are not read), and compiles them. A problem
// in any file fails the whole load with a *ConfigError listing every problem
// found; an entry of the directory named *.yaml or *.yml that is not a
// regular file (a subdirectory, a named pipe) is such a problem. A rule set
// over opts.Limits fails with a *LimitError before it is compiled (before
// it is read, for its size).
func Load(path string, opts Options) (*Snapshot, error) {
	s, _, err := LoadChanged(path, opts, nil)
	return s, err
}

// LoadChanged is Load, except that when the rule files read are identical
// (names and contents) to those cur was built from it compiles nothing and
// returns cur with changed false. cur must have been loaded with the same
// opts; nil means none.
func LoadChanged(path string, opts Options, cur *Snapshot) (s *Snapshot, changed bool, err error) {
	if len(opts.Secret) < MinSecretLength {
		return nil, false, ErrSecret
	}
	lim := opts.Limits.withDefaults()
	srcs, err := readSources(path, lim)
	if err != nil {
		return nil, false, err
	}
	if cur != nil && fingerprint(srcs) == cur.fingerprint {
		return cur, false, nil
	}
	if s, err = build(srcs, opts, lim); err != nil {
		return nil, false, err
	}
	return s, true, nil
}

// readSources reads the rule files of path. Sizes are checked from the
// file system before any file is read, and again on what was read, so that
// a rule set over lim.MaxBytes costs no more than a directory listing.
func readSources(path string, lim Limits) ([]source, error) {
	var ps problems
	fi, err := os.Stat(path)
	if err != nil {
		ps.add(path, 0, 0, "cannot read the configuration: %v", unwrapPath(err))
		return nil, ps.err()
	}
	type file struct {
		name string
		size int64
	}
	var files []file
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
			if !st.Mode().IsRegular() {
				ps.add(full, 0, 0, "not a regular file (%s): a rule directory's *.yaml and *.yml entries must be files", fileKind(st.Mode()))
				continue
			}
			files = append(files, file{full, st.Size()})
		}
		if len(files) == 0 && len(ps.list) == 0 {
			ps.add(path, 0, 0, "no *.yaml or *.yml rule files in the directory")
		}
	} else {
		if !fi.Mode().IsRegular() {
			ps.add(path, 0, 0, "not a regular file (%s): the configuration must be a rule file or a directory of rule files", fileKind(fi.Mode()))
			return nil, ps.err()
		}
		files = []file{{path, fi.Size()}}
	}
	var total int64
	for _, f := range files {
		if f.size > maxFileSize {
			ps.add(f.name, 0, 0, "file is larger than %d bytes", maxFileSize)
		}
		total += f.size
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	if total > lim.MaxBytes {
		return nil, &LimitError{Limit: limitBytes, Max: lim.MaxBytes, Total: total, Files: len(files)}
	}
	srcs := make([]source, 0, len(files))
	total = 0
	for _, f := range files {
		data, err := readLimited(f.name)
		if err != nil {
			ps.add(f.name, 0, 0, "%v", err)
			continue
		}
		total += int64(len(data))
		srcs = append(srcs, source{name: f.name, data: data})
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	if total > lim.MaxBytes { // the files grew after they were listed
		return nil, &LimitError{Limit: limitBytes, Max: lim.MaxBytes, Total: total, Files: len(files)}
	}
	return srcs, nil
}

// fileKind names what a non-regular file is.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// readLimited reads at most MaxFileSize+1 bytes of a regular file. It opens
// without blocking, so that a named pipe put in place of a file after it
// was listed is refused instead of waiting for a writer.
func readLimited(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot read the file: %v", unwrapPath(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read the file: %v", unwrapPath(err))
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fileKind(st.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the file: %v", unwrapPath(err))
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("file is larger than %d bytes", maxFileSize)
	}
	return data, nil
}

// build parses and compiles sources (already sorted by name).
func build(srcs []source, opts Options, lim Limits) (*Snapshot, error) {
	return buildBudget(srcs, opts, lim, maxNodes)
}

// buildBudget is build with a per-file work budget (see maxNodes).
func buildBudget(srcs []source, opts Options, lim Limits, budget int) (*Snapshot, error) {
	var ps problems
	files := make([]*rawFile, 0, len(srcs))
	names := make([]string, 0, len(srcs))
	count := &descCount{max: lim.MaxDescriptors}
	for _, s := range srcs {
		names = append(names, s.name)
		rf := parseFile(s.name, s.data, &ps, budget, count)
		switch {
		case count.over():
			// Only the count matters now: let what was read go.
			files = nil
		case rf != nil:
			files = append(files, rf)
		}
	}
	if count.n > count.max {
		return nil, &LimitError{Limit: LimitDescriptors, Max: int64(count.max), Total: int64(count.n), Files: len(srcs)}
	}
	return assemble(files, names, fingerprint(srcs), &ps, opts)
}

// assemble compiles parsed rule documents, in name order, into a Snapshot
// of the given fingerprint; ps holds the problems found while parsing.
func assemble(files []*rawFile, names []string, fp [32]byte, ps *problems, opts Options) (*Snapshot, error) {
	domains := compile(files, ps, opts)
	if err := ps.err(); err != nil {
		return nil, err
	}
	s := &Snapshot{domains: domains, files: names, fingerprint: fp}
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
	s.keyWith(opts.Secret)
	s.overrideCharge = opts.DefaultCharge
	return s, nil
}

// keyWith keys the snapshot's digests with a copy of secret and gives it an
// empty override cache.
func (s *Snapshot) keyWith(secret []byte) {
	key := slices.Clone(secret)
	s.macs.New = func() any { return &macState{mac: hmac.New(sha256.New, key)} }
	s.overrides.m = map[string]*Rule{}
}

// WithSecret returns a snapshot of the same rules whose subjects, tags and
// configuration digests are keyed with secret: what compiling the same
// input with Options.Secret set to secret would return, without reading or
// compiling anything again, so it cannot fail on input that has changed
// since. The compiled rules are shared; s is unchanged. A nil s gives nil.
func (s *Snapshot) WithSecret(secret []byte) (*Snapshot, error) {
	if len(secret) < MinSecretLength {
		return nil, ErrSecret
	}
	if s == nil {
		return nil, nil
	}
	out := &Snapshot{domains: s.domains, order: s.order, files: s.files, fingerprint: s.fingerprint,
		rules: s.rules, limited: s.limited, overrideCharge: s.overrideCharge}
	out.keyWith(secret)
	return out, nil
}

func newFingerprint() hash.Hash { return sha256.New() }

func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// fingerprint hashes the names and contents of srcs.
func fingerprint(srcs []source) [32]byte {
	var out [32]byte
	h := newFingerprint()
	for _, s := range srcs {
		writeField(h, []byte(s.name))
		writeField(h, s.data)
	}
	h.Sum(out[:0])
	return out
}
