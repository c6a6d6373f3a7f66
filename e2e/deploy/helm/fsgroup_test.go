//go:build linux

package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// TestSecretsFsGroup is the pod as the kubelet makes it, where this test
// may do so (as root): the admin token file and the HMAC secret file from
// their Secrets root's, of group fsGroup, mode 0440 (what fsGroup makes of
// defaultMode 0400), and the binary run as the rendered securityContext's
// user and group with fsGroup among its groups. envoy-rls accepts both
// files and answers the admin API with its token (the Redis store, its
// server not reachable, answers by the failure modes). Elsewhere
// TestModeProblem (internal/credfiles) covers the same decision without
// the file system.
func TestSecretsFsGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a file root's and running a process as another user needs root; internal/credfiles's TestModeProblem covers the decision")
	}
	m := render(t, "--set", "admin.token.existingSecret=rls-admin-token", "--set", "store=redis",
		"--set", "redis.addr="+deploytest.FreeAddr(t), "--set", "hmac.existingSecret=rls-hmac")
	pod := get(one(t, m, "Deployment"), "spec", "template", "spec")
	c := list(get(pod, "containers"))[0]
	uid, gid, fsGroup := toUint(get(c, "securityContext", "runAsUser")), toUint(get(c, "securityContext", "runAsGroup")), toUint(get(pod, "securityContext", "fsGroup"))
	if uid == 0 || fsGroup == 0 {
		t.Fatalf("the chart runs as uid %d with fsGroup %d: want non-root with an fsGroup", uid, fsGroup)
	}

	root, err := os.MkdirTemp("", "envoy-rls-fsgroup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(root, 0o755))
	local := func(p string) string { return filepath.Join(root, strings.TrimPrefix(p, "/etc/envoy-rls/")) }
	bin := filepath.Join(root, "envoy-rls")
	b, err := os.ReadFile(binarytest.Build(t))
	must(err)
	must(os.WriteFile(bin, b, 0o755))
	rules := local("/etc/envoy-rls/rules")
	must(os.MkdirAll(rules, 0o755))
	for name, content := range get(one(t, m, "ConfigMap"), "data").(map[string]any) {
		must(os.WriteFile(filepath.Join(rules, name), []byte(str(content)), 0o644))
	}
	for file, content := range map[string]string{"admin-token/admin-tokens": "ops:" + adminToken + "\n", "hmac/hmac-secret": substituted} {
		p := local("/etc/envoy-rls/" + file)
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, []byte(content), 0o400))
		// What the kubelet does with fsGroup: the group, and read for it.
		must(os.Chown(p, 0, int(fsGroup)))
		must(os.Chmod(p, 0o440))
	}

	adminAddr := deploytest.FreeAddr(t)
	args := []string{"serve", "--grpc-addr", deploytest.FreeAddr(t), "--admin-addr", adminAddr}
	for _, a := range toStrings(list(get(c, "args")))[1:] {
		if strings.HasPrefix(a, "--grpc-addr=") || strings.HasPrefix(a, "--admin-addr=") {
			continue
		}
		if name, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, "/etc/envoy-rls/") {
			a = name + "=" + local(v)
		}
		args = append(args, a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{fsGroup}}}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	must(cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("envoy-rls log:\n%s", logs.String())
		}
	})
	polltest.Eventually(t, 15*time.Second, 50*time.Millisecond, "/v1/stats with the token", func() error {
		req, err := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/v1/stats", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		return nil
	})
}

// toUint is a rendered integer as a uint32 (0 when it is not one).
func toUint(v any) uint32 {
	if n, ok := v.(int); ok && n > 0 {
		return uint32(n)
	}
	return 0
}
