package helm_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

// adminToken is the admin token the tests put in the token file.
const adminToken = "test-only-admin-token-0123456789"

// TestAdminTokenValues: admin.token.existingSecret (the docs' runbook) and
// admin.token.value mount the token file from a Secret, whole (no subPath,
// so an edited Secret reaches the pod), defaultMode 0400, and pass
// --admin-token-file; without them nothing is mounted and no flag passed.
func TestAdminTokenValues(t *testing.T) {
	for _, tc := range []struct {
		name, secret string
		args         []string
		created      bool
	}{
		{"existingSecret", "rls-admin-token", []string{"--set", "admin.token.existingSecret=rls-admin-token"}, false},
		{"value", "rls-envoy-rls-admin-token", []string{"--set", "admin.token.value=ops:" + adminToken}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.args...)
			if got := len(m["Secret"]); got != b2i(tc.created) {
				t.Fatalf("%d Secrets, want %d", got, b2i(tc.created))
			}
			if tc.created {
				s := m["Secret"][0]
				b, err := base64.StdEncoding.DecodeString(str(get(s, "data", "admin-tokens")))
				if nameOf(s) != tc.secret || err != nil || string(b) != "ops:"+adminToken {
					t.Fatalf("Secret %s holds %q (%v)", nameOf(s), b, err)
				}
			}
			pod := get(one(t, m, "Deployment"), "spec", "template", "spec")
			c := list(get(pod, "containers"))[0]
			args := toStrings(list(get(c, "args")))
			if v, ok := flagValue(args, "admin-token-file"); !ok || v != "/etc/envoy-rls/admin-token/admin-tokens" {
				t.Fatalf("--admin-token-file %q (%v) in %q", v, ok, args)
			}
			var vol, mount any
			for _, v := range list(get(pod, "volumes")) {
				if get(v, "name") == "admin-token" {
					vol = v
				}
			}
			for _, vm := range list(get(c, "volumeMounts")) {
				if get(vm, "name") == "admin-token" {
					mount = vm
				}
			}
			if str(get(vol, "secret", "secretName")) != tc.secret || get(vol, "secret", "defaultMode") != 0o400 {
				t.Fatalf("admin-token volume %v: want Secret %s, defaultMode 0400", vol, tc.secret)
			}
			if get(mount, "mountPath") != "/etc/envoy-rls/admin-token" || get(mount, "readOnly") != true || get(mount, "subPath") != nil {
				t.Fatalf("admin-token mount %v", mount)
			}
		})
	}
	m := render(t)
	args := toStrings(list(get(list(get(one(t, m, "Deployment"), "spec", "template", "spec", "containers"))[0], "args")))
	if _, ok := flagValue(args, "admin-token-file"); ok {
		t.Fatalf("default values pass --admin-token-file: %q", args)
	}
}

// TestAdminTokenRunbook runs what the chart renders with the docs' values
// (admin.token.existingSecret, the Secret made from a token file with
// `kubectl create secret generic --from-file=admin-tokens=...`): the
// rendered args, with the ConfigMap's rules and the Secret's file where the
// pod mounts them (the token file owner-only, as defaultMode 0400 makes it
// without an fsGroup; the fsGroup case, root-owned 0440, is TestSecretsFsGroup
// and credfiles' TestModeProblem). Then the runbook of docs/runbook.md:
// `envoy-rls explain --admin http://POD:8080 --token-file F ...` answers
// the rule, and /ui serves the console. With the chart's defaults the same
// paths answer 404 with how to turn them on.
func TestAdminTokenRunbook(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "admin-tokens")
	if err := os.WriteFile(tokens, []byte("ops:"+adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	on := servePod(t, render(t, "--set", "admin.token.existingSecret=rls-admin-token"),
		map[string]string{"/etc/envoy-rls/admin-token/admin-tokens": tokens})
	cmd := exec.Command(binarytest.Build(t), "explain", "--admin", "http://"+on, "--token-file", tokens,
		"--domain", "default", "--descriptor", "remote_address=198.51.100.7")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"matched": true`) {
		t.Fatalf("explain --admin against the chart's pod: %v\n%s", err, out)
	}
	if code, body := get200(t, "http://"+on+"/ui", ""); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Fatalf("/ui: %d %.200q", code, body)
	}

	off := servePod(t, render(t), nil)
	for _, p := range []string{"/v1/stats", "/ui"} {
		code, body := get200(t, "http://"+off+p, adminToken)
		if code != http.StatusNotFound || !strings.Contains(body, "admin.token.existingSecret") {
			t.Fatalf("%s with the admin API off: %d %q, want 404 with the hint", p, code, body)
		}
	}
}

// servePod starts envoy-rls serve with the rendered Deployment's args, the
// rules ConfigMap's files at the rules mount path and each file of secrets
// (mounted path -> local file) at its path, every /etc/envoy-rls/ path
// moved under a temporary directory, on free loopback ports. It returns the
// admin address.
func servePod(t *testing.T, m map[string][]obj, secrets map[string]string) string {
	t.Helper()
	root := t.TempDir()
	local := func(p string) string { return filepath.Join(root, strings.TrimPrefix(p, "/etc/envoy-rls/")) }
	pod := get(one(t, m, "Deployment"), "spec", "template", "spec")
	c := list(get(pod, "containers"))[0]
	var rulesPath string
	for _, vm := range list(get(c, "volumeMounts")) {
		if get(vm, "name") == "rules" {
			rulesPath = str(get(vm, "mountPath"))
		}
	}
	cm := one(t, m, "ConfigMap")
	if err := os.MkdirAll(local(rulesPath), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range get(cm, "data").(map[string]any) {
		if err := os.WriteFile(filepath.Join(local(rulesPath), name), []byte(str(content)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for mounted, file := range secrets {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(local(mounted)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(local(mounted), b, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	var args []string
	for _, a := range toStrings(list(get(c, "args")))[1:] {
		if strings.HasPrefix(a, "--grpc-addr=") || strings.HasPrefix(a, "--admin-addr=") {
			continue // deploytest.Serve's free ports
		}
		if name, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, "/etc/envoy-rls/") {
			a = name + "=" + local(v)
		}
		args = append(args, a)
	}
	_, admin := deploytest.Serve(t, args...)
	return admin
}

// get200 GETs url with the bearer token (none when empty) and returns the
// status and the body.
func get200(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
