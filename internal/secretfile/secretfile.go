package admin

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// tokenFileOwner is who owns a token file: its user and group IDs, known
// where the file system says (fileOwner).
type tokenFileOwner struct {
	uid, gid int
	known    bool
}

// modeProblem says why a token file of mode perm, owned by owner, lets
// others than this process use it, or "" when it does not. groups are the
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
func modeProblem(path string, perm fs.FileMode, owner tokenFileOwner, groups []int) string {
	if perm&0o077 == 0 {
		return ""
	}
	refused := fmt.Sprintf("mode %04o lets group or others use it: chmod 600 %s", perm, path)
	if perm&0o037 != 0 || !owner.known {
		return refused
	}
	// Group read only.
	if owner.uid != 0 || owner.gid == 0 || !slices.Contains(groups, owner.gid) {
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
