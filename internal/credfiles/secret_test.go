package credfiles

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestModeProblem: owner-only modes pass; read by the group passes only
// for a root-owned file whose group is one of the process's groups other
// than root's (a Kubernetes Secret volume with fsGroup: root, group
// fsGroup, 0440); everything else that lets another user in is refused,
// and so is a group-readable file whose owner is unknown.
func TestModeProblem(t *testing.T) {
	const fsGroup = 65532
	k8s := owner{uid: 0, gid: fsGroup, known: true}
	groups := []int{fsGroup}
	for _, tc := range []struct {
		name   string
		perm   fs.FileMode
		owner  owner
		groups []int
		ok     bool
	}{
		{"0600", 0o600, owner{uid: 1000, gid: 1000, known: true}, groups, true},
		{"0400, owner unknown", 0o400, owner{}, groups, true},
		{"Secret volume with fsGroup (0440, root, fsGroup)", 0o440, k8s, groups, true},
		{"0640, root, the process's supplementary group", 0o640, k8s, []int{1, fsGroup}, true},
		{"0440, group the process is not in", 0o440, k8s, []int{1000}, false},
		{"0440, group root", 0o440, owner{uid: 0, gid: 0, known: true}, []int{0}, false},
		{"0440, owned by another user", 0o440, owner{uid: 1000, gid: fsGroup, known: true}, groups, false},
		{"0440, owner unknown", 0o440, owner{}, groups, false},
		{"0460: group write", 0o460, k8s, groups, false},
		{"0450: group execute", 0o450, k8s, groups, false},
		{"0444: others", 0o444, k8s, groups, false},
		{"0404: others only", 0o404, k8s, groups, false},
		{"0644", 0o644, k8s, groups, false},
	} {
		problem := modeProblem("/etc/envoy-rls/admin-token/tokens", tc.perm, tc.owner, tc.groups)
		if ok := problem == ""; ok != tc.ok {
			t.Errorf("%s: problem %q, want accepted=%v", tc.name, problem, tc.ok)
		}
		if !tc.ok && !strings.Contains(problem, "chmod 600 /etc/envoy-rls/admin-token/tokens") {
			t.Errorf("%s: %q does not say what to do", tc.name, problem)
		}
	}
}

// TestRead: the owner and group read from a real file are this process's
// (which created it); Read returns an owner-only file of this process and
// refuses a group-readable one it owns (not root's, or of root's group), a
// world-readable one, a directory, one over the limit and a missing one
// (its os.Open error).
func TestRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret")
	if err := os.WriteFile(path, []byte("0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if o := fileOwner(fi); !o.known || o.uid != os.Geteuid() || !slices.Contains(processGroups(), o.gid) {
		t.Fatalf("owner %+v, process uid %d groups %v", o, os.Geteuid(), processGroups())
	}
	if b, err := Read(path, 16); err != nil || string(b) != "0123456789abcdef" {
		t.Fatalf("0600: %q, %v", b, err)
	}
	for _, tc := range []struct {
		name  string
		path  string
		mode  fs.FileMode
		limit int
		want  string
	}{
		{"0440 of this process", path, 0o440, 16, "mode 0440 lets group or others use it: chmod 600 " + path + " (a file readable by its group"},
		{"0644", path, 0o644, 16, "mode 0644 lets group or others use it: chmod 600 " + path},
		{"over the limit", path, 0o400, 15, "larger than 15 bytes"},
		{"a directory", dir, 0o700, 16, "not a regular file"},
		{"missing", filepath.Join(dir, "missing"), 0, 16, "open " + filepath.Join(dir, "missing") + ": no such file or directory"},
	} {
		if tc.mode != 0 {
			if err := os.Chmod(tc.path, tc.mode); err != nil {
				t.Fatal(err)
			}
		}
		if b, err := Read(tc.path, tc.limit); b != nil || err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %q, %v, want refused with %q", tc.name, b, err, tc.want)
		}
	}
}
