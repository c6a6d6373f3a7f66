package descriptors

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
// found.
func Load(path string, opts Options) (*Snapshot, error) {
	if len(opts.Secret) < MinSecretLength {
		return nil, ErrSecret
	}
	srcs, err := readSources(path)
	if err != nil {
		return nil, err
	}
	return build(srcs, opts)
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
func build(srcs []source, opts Options) (*Snapshot, error) {
	return buildBudget(srcs, opts, maxNodes)
}

// buildBudget is build with a per-file work budget (see maxNodes).
func buildBudget(srcs []source, opts Options, budget int) (*Snapshot, error) {
	secret := opts.Secret
	var ps problems
	files := make([]*rawFile, 0, len(srcs))
	names := make([]string, 0, len(srcs))
	for _, s := range srcs {
		names = append(names, s.name)
		if rf := parseFile(s.name, s.data, &ps, budget); rf != nil {
			files = append(files, rf)
		}
	}
	domains := compile(files, &ps, opts.DefaultFailureMode)
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
