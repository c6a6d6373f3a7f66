package admin

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestTokenFileMode: owner-only modes pass; read by the group passes only
// for a root-owned file whose group is one of the process's groups other
// than root's (a Kubernetes Secret volume with fsGroup: root, group
// fsGroup, 0440); everything else that lets another user in is refused,
// and so is a group-readable file whose owner is unknown.
func TestTokenFileMode(t *testing.T) {
	const fsGroup = 65532
	k8s := tokenFileOwner{uid: 0, gid: fsGroup, known: true}
	groups := []int{fsGroup}
	for _, tc := range []struct {
		name   string
		perm   fs.FileMode
		owner  tokenFileOwner
		groups []int
		ok     bool
	}{
		{"0600", 0o600, tokenFileOwner{uid: 1000, gid: 1000, known: true}, groups, true},
		{"0400, owner unknown", 0o400, tokenFileOwner{}, groups, true},
		{"Secret volume with fsGroup (0440, root, fsGroup)", 0o440, k8s, groups, true},
		{"0640, root, the process's supplementary group", 0o640, k8s, []int{1, fsGroup}, true},
		{"0440, group the process is not in", 0o440, k8s, []int{1000}, false},
		{"0440, group root", 0o440, tokenFileOwner{uid: 0, gid: 0, known: true}, []int{0}, false},
		{"0440, owned by another user", 0o440, tokenFileOwner{uid: 1000, gid: fsGroup, known: true}, groups, false},
		{"0440, owner unknown", 0o440, tokenFileOwner{}, groups, false},
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

// TestTokenFileOwnerRead: the owner and group read from a real file are
// this process's (which created it), and an owner-only file of this
// process is accepted by readTokens while a group-readable one it owns
// (not root's, or of root's group) is refused.
func TestTokenFileOwnerRead(t *testing.T) {
	path := writeTokens(t, "", "ops:right-token-0123456789\n", 0o600)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if o := fileOwner(fi); !o.known || o.uid != os.Geteuid() || !slices.Contains(processGroups(), o.gid) {
		t.Fatalf("owner %+v, process uid %d groups %v", o, os.Geteuid(), processGroups())
	}
	if _, err := readTokens(path); err != nil {
		t.Fatalf("0600: %v", err)
	}
	must(t, os.Chmod(path, 0o440))
	if _, err := readTokens(path); err == nil || !strings.Contains(err.Error(), "mode 0440") {
		t.Fatalf("0440 of uid %d, gid %d: %v, want refused", os.Geteuid(), os.Getegid(), err)
	}
}
