// Package credfiles reads the files serve's flags name that hold
// credentials: the service's secrets (the admin tokens, the HMAC secret),
// under one rule — a file that lets others than its owner use it is
// refused, as ssh refuses such a key, with what to do about it — and the
// PEM CA bundles of the TLS flags, with errors that name the flag.
package credfiles

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
)

// Read returns the content of the regular file at path, at most limit
// bytes. It refuses a file that lets others use it (modeProblem), one
// larger than limit and one that is not a regular file. An error of
// opening the file is the *fs.PathError of os.Open; the others say what is
// wrong without the path. No error quotes the content.
func Read(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if problem := modeProblem(path, fi.Mode().Perm(), fileOwner(fi), processGroups()); problem != "" {
		return nil, errors.New(problem)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

// owner is who owns a file: its user and group IDs, known where the file
// system says (fileOwner).
type owner struct {
	uid, gid int
	known    bool
}

// modeProblem says why a file of mode perm, owned by own, lets others
// than this process use it, or "" when it does not. groups are the
// process's groups (its effective group and its supplementary ones).
//
// Owner-only modes (0600, 0400) are accepted. So is read by the group, and
// nothing more for it (0640, 0440), in one case only: root owns the file
// and its group is one of this process's groups other than root's. That is
// what Kubernetes makes of a Secret volume in a pod with an fsGroup — the
// files are root's, of group fsGroup, mode 0440 whatever the volume's
// defaultMode — and the pattern of a secret an administrator keeps for a
// service's group on a host. Every other group bit, any bit for others, a
// group-readable file of another owner or of a group this process is not
// in, and a system that does not say who owns the file, are refused.
func modeProblem(path string, perm fs.FileMode, own owner, groups []int) string {
	if perm&0o077 == 0 {
		return ""
	}
	refused := fmt.Sprintf("mode %04o lets group or others use it: chmod 600 %s", perm, path)
	if perm&0o037 != 0 || !own.known {
		return refused
	}
	// Group read only.
	if own.uid != 0 || own.gid == 0 || !slices.Contains(groups, own.gid) {
		return refused + " (a file readable by its group, mode 0440 or 0640, is accepted only when root owns it and the group is this process's own, as in a Kubernetes Secret volume with the pod's fsGroup)"
	}
	return ""
}

// processGroups are the effective and supplementary group IDs of this
// process (none that cannot be read).
func processGroups() []int {
	groups, err := os.Getgroups()
	if err != nil {
		groups = nil
	}
	return append(groups, os.Getegid())
}
