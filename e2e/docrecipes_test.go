package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestReadmeSecretRecipe runs the README's recipe for replicas sharing one
// Redis, /etc/envoy-rls/ moved to a temporary directory and redis:6379 to a
// real Redis: the secret command, run by bash under the usual umask 022,
// writes a file only its owner can read, and serve starts with the
// command's flags on it. The same file made readable by others (0644)
// stops serve with one line saying to chmod it.
func TestReadmeSecretRecipe(t *testing.T) {
	binary(t)
	cmds := deploytest.MarkdownCommands(t, filepath.Join(binarytest.ModuleRoot(t), "README.md"))
	i := slices.IndexFunc(cmds, func(c deploytest.DocCommand) bool {
		return strings.Contains(c.Text, "/dev/urandom") && strings.Contains(c.Text, "/etc/envoy-rls/hmac-secret")
	})
	if i < 0 || i+1 == len(cmds) || !slices.Equal(cmds[i+1].Words[:2], []string{"envoy-rls", "serve"}) {
		t.Fatal("README.md: no secret recipe followed by an envoy-rls serve command")
	}
	dir := t.TempDir()
	local := func(s string) string { return strings.ReplaceAll(s, "/etc/envoy-rls/", dir+"/") }
	if out, err := exec.Command("bash", "-c", "umask 022; "+local(cmds[i].Text)).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmds[i], err, out)
	}
	secret := filepath.Join(dir, "hmac-secret")
	fi, err := os.Stat(secret)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() < 32 {
		t.Fatalf("%s: wrote mode %04o, %d bytes; want 0600 and at least 32 bytes", cmds[i], fi.Mode().Perm(), fi.Size())
	}

	redis := redistest.Standalone(t)
	cfg := replicaConfig{Rules: filepath.Join(dir, "rules")}
	if err := os.Mkdir(cfg.Rules, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg.Rules, "rules.yaml", hourlyRules(5, "user"))
	serve := cmds[i+1]
	for j := 2; j+1 < len(serve.Words); j += 2 {
		v := local(serve.Words[j+1])
		switch serve.Words[j] {
		case "--config":
			if v != cfg.Rules {
				t.Fatalf("%s: --config %s, want the rules beside the secret", serve, v)
			}
		case "--store":
			cfg.Store = v
		case "--redis-addr":
			cfg.RedisAddr = redis.Addr()
		case "--hmac-secret-file":
			cfg.Secret = v
		default:
			t.Fatalf("%s: flag %s: this test does not know it", serve, serve.Words[j])
		}
	}
	if cfg.Store != "redis" || cfg.RedisAddr == "" || cfg.Secret != secret {
		t.Fatalf("%s: want --store redis, --redis-addr and --hmac-secret-file %s", serve, secret)
	}
	startReplica(t, "readme", cfg).cleanup()

	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	res := runCommand(t, nil, "serve", "--config", cfg.Rules, "--store", "redis", "--redis-addr", cfg.RedisAddr,
		"--hmac-secret-file", secret, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	want := `envoy-rls: --hmac-secret-file="` + secret + `": must be a readable file holding the secret: mode 0644 lets group or others use it: chmod 600 ` + secret
	if lines := res.errorLines(); res.code != 1 || len(lines) != 1 || lines[0] != want {
		t.Fatalf("serve with a 0644 secret file: exit %d\n%s\nwant exit 1 and the one line\n%s", res.code, res.stderr, want)
	}
}
