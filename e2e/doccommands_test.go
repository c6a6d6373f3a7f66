package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// docCheck says how the commands of a doc that start with prefix are
// checked: by the runner of TestDocCommands named run, or elsewhere, with
// the reason they cannot run here. A block entry covers every command of
// the fenced block holding the prefix (a script the runner runs whole).
type docCheck struct {
	file, prefix string
	block        bool
	run          string // a runner of TestDocCommands
	elsewhere    string // where it is checked, and why it does not run here
}

const (
	noCluster   = "needs a Kubernetes cluster; rendered with helm template and checked against the chart by e2e/deploy/helm's TestDocsHelmCommands and TestDocsKubernetes"
	noEngine    = "needs a container engine; TestDockerQuickstart (e2e/deploy/compose) checks it against the Dockerfile and the chart's image, the container lane builds the image where an engine answers"
	composeDemo = "the compose demo (Envoy, Prometheus and Redis in containers): TestComposeUp runs it in the container lane; e2e/deploy/compose replays its decisions on the real binary"
	longLoad    = "minutes of load on an idle machine (figures in docs/performance.md, no assert); tools/bench_test.go runs bench-load's floor and Redis runs; the makefile runner checks the target"
)

// docChecks covers every command of README.md and docs/*.md: a new command
// fails TestDocCommands until it is run here or listed with where it is
// checked.
var docChecks = []docCheck{
	{file: "README.md", prefix: "make run", run: "quickstart"},
	{file: "README.md", prefix: "make test", run: "makefile", elsewhere: "the whole suite: CI's .ci/run runs it on a clean clone"},
	{file: "README.md", prefix: "grpcurl -plaintext -d", run: "quickstart"},

	{file: "docs/deploy.md", prefix: "docker ", elsewhere: noEngine},
	{file: "docs/deploy.md", prefix: "helm install", elsewhere: noCluster},
	{file: "docs/deploy.md", prefix: "kubectl", elsewhere: noCluster},
	{file: "docs/deploy.md", prefix: "curl -s localhost:8080/", run: "quickstart"},
	{file: "docs/deploy.md", prefix: "grpcurl -plaintext localhost:8081 grpc.health.v1.Health/Check", run: "quickstart"},
	{file: "docs/deploy.md", prefix: "mkdir -p /tmp/rules", block: true, run: "memoryflood"},
	{file: "docs/deploy.md", prefix: "redis-cli --scan --pattern 'rate:*'", block: true, elsewhere: "TestOperationsRedisRecipes (e2e/docrecipes_test.go) runs the block on 5,000 keys the binary wrote"},

	{file: "docs/admin-api.md", prefix: "umask 077", run: "adminapi"},
	{file: "docs/admin-api.md", prefix: "printf 'ops-alice:", run: "adminapi"},
	{file: "docs/admin-api.md", prefix: "envoy-rls ", run: "adminapi"},
	{file: "docs/admin-api.md", prefix: "curl ", run: "adminapi"},
	{file: "docs/runbook.md", prefix: "envoy-rls explain --config", run: "adminapi"},

	{file: "docs/runbook.md", prefix: "curl -s -H \"Authorization: Bearer $TOKEN\" http://POD:8080/config", block: true, elsewhere: "TestRunbookConfigQuery (e2e/docrecipes_test.go) runs it with and without a token file"},
	{file: "docs/runbook.md", prefix: "redis-cli --scan --pattern 'rate:{9df14658*'", block: true, elsewhere: "TestOperationsRedisRecipes (e2e/docrecipes_test.go) runs the block on a state the binary wrote"},

	{file: "docs/observe.md", prefix: "helm upgrade --install", elsewhere: noCluster},
	{file: "docs/observe.md", prefix: "envoy-rls serve --config rules/ --reference-metrics-addr", block: true, run: "refmetrics"},
	{file: "docs/observe.md", prefix: "redis-cli XLEN", block: true, run: "audit"},

	{file: "docs/cli.md", prefix: "envoy-rls ", run: "synopsis"},
	{file: "docs/cli.md", prefix: "(umask 077; head -c 32", block: true, elsewhere: "TestSecretRecipe (e2e/docrecipes_test.go) runs it and serves on the secret it writes"},
	{file: "docs/config.md", prefix: "envoy-rls validate --config PATH", run: "validate"},
	{file: "docs/istio.md", prefix: "go run ./cmd/envoy-rls validate", run: "validate"},
	{file: "docs/istio.md", prefix: "kubectl", elsewhere: noCluster + "; config/examples/istio's checkGuide checks the files it applies"},
	{file: "docs/istio.md", prefix: "helm ", elsewhere: noCluster},
	{file: "docs/istio.md", prefix: "istioctl", elsewhere: "needs Istio in a cluster"},
	{file: "docs/istio.md", prefix: "GW=", elsewhere: "needs Istio's ingress gateway in a cluster"},
	{file: "docs/istio.md", prefix: "for i in $(seq 1 7); do", block: true, elsewhere: "calls Istio's ingress gateway in a cluster; config/examples/istio replays the route's descriptors on the binary"},
	{file: "docs/istio.md", prefix: "curl -s localhost:8080/config", elsewhere: "through a port-forward into a cluster; the adminapi runner reads /config of the binary"},
	{file: "docs/demo.md", prefix: "", elsewhere: composeDemo},
	{file: "docs/performance.md", prefix: "make bench", run: "makefile", elsewhere: longLoad},
	{file: "docs/redis.md", prefix: "ACL SETUSER", elsewhere: "redistest.DocACL reads them for e2e's TestResetACL and pkg/limiter/redis's ACL tests, which run the store under that user"},
	{file: "docs/redis.md", prefix: "FUNCTION ", run: "functions"},
	{file: "docs/releasing.md", prefix: "helm install envoy-rls oci://", elsewhere: "needs the published chart in a registry and a cluster"},
	{file: "docs/releasing.md", prefix: "git ", elsewhere: "cuts a release: the release workflow's tag check is TestReleaseTagGuard (internal/release)"},
	{file: "docs/releasing.md", prefix: "make release-", run: "makefile", elsewhere: "goreleaser and actionlint: CI's .ci/run runs both"},
	{file: "docs/releasing.md", prefix: "docker build", elsewhere: noEngine},
	{file: "docs/releasing.md", prefix: "envoy-rls version", run: "version"},
	{file: "docs/testing.md", prefix: "go test -run '^$' -fuzz", run: "fuzz"},
	{file: "docs/testing.md", prefix: "make e2e", run: "makefile", elsewhere: "this suite itself"},
	{file: "docs/testing.md", prefix: "go -C e2e test", run: "fuzz", elsewhere: "this suite itself"},
}

// docPrograms are the first words that make a line of an unmarked block a
// command (other lines there are output, diagrams or pseudocode); Redis
// commands are words in capitals.
var (
	docPrograms  = map[string]bool{"envoy-rls": true, "bin/envoy-rls": true, "redis-cli": true, "curl": true, "make": true, "go": true, "helm": true, "kubectl": true, "docker": true, "grpcurl": true, "jq": true}
	redisCommand = regexp.MustCompile(`^[A-Z]{3,}$`)
)

// docCmd is one command of the docs with the fenced block it is in.
type docCmd struct {
	deploytest.DocCommand
	block deploytest.Block
}

// docCommandsOf returns the commands of README.md and docs/*.md.
func docCommandsOf(t *testing.T) []docCmd {
	t.Helper()
	root := binarytest.ModuleRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []docCmd
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cmds, err := deploytest.ParseMarkdown(rel, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := deploytest.ParseBlocks(rel, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if c.Lang == "" && (len(c.Words) == 0 || !docPrograms[c.Words[0]] && !redisCommand.MatchString(c.Words[0])) {
				continue
			}
			i := slices.IndexFunc(blocks, func(bl deploytest.Block) bool { return bl.Line < c.Line && c.Line <= bl.Line+len(bl.Lines) })
			out = append(out, docCmd{c, blocks[i]})
		}
	}
	return out
}

// TestDocCommands runs every command of README.md and docs/*.md that can
// run with Go and redis-server against the real binary (and a real Redis
// where the command needs one), and checks the shape of what the doc shows
// (key types and formats, field names, output lines). Commands that need a
// cluster, a container engine or a release are listed in docChecks with
// where they are checked; a command in neither fails the test.
func TestDocCommands(t *testing.T) {
	cmds := docCommandsOf(t)
	byRunner := map[string][]docCmd{}
	used := make([]bool, len(docChecks))
	for _, c := range cmds {
		i := slices.IndexFunc(docChecks, func(d docCheck) bool {
			if d.file != c.File {
				return false
			}
			if d.block {
				return slices.ContainsFunc(c.block.Lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), d.prefix) })
			}
			return strings.HasPrefix(c.Text, d.prefix)
		})
		if i < 0 {
			t.Errorf("%s:%d: %s\n\tno test runs this command: run it in a runner of TestDocCommands, or add it to docChecks with where it is checked and why it cannot run here", c.File, c.Line, c.Text)
			continue
		}
		used[i] = true
		if d := docChecks[i]; d.run != "" {
			byRunner[d.run] = append(byRunner[d.run], c)
		}
	}
	for i, d := range docChecks {
		if !used[i] {
			t.Errorf("docChecks: %s has no command starting %q any more: drop the entry", d.file, d.prefix)
		}
	}
	runners := map[string]func(*testing.T, []docCmd){
		"quickstart": docQuickstart, "makefile": docMakefile, "adminapi": docAdminAPI,
		"memoryflood": docMemoryFlood, "refmetrics": docRefMetrics, "audit": docAudit,
		"synopsis": docSynopsis, "validate": docValidate, "functions": docFunctions,
		"version": docVersion, "fuzz": docTestNames,
	}
	for _, d := range docChecks {
		if d.run != "" && runners[d.run] == nil {
			t.Fatalf("docChecks: no runner %q", d.run)
		}
	}
	for name, run := range runners {
		if len(byRunner[name]) == 0 {
			t.Errorf("runner %s has no command to run", name)
			continue
		}
		t.Run(name, func(t *testing.T) { run(t, byRunner[name]) })
	}
}

// docOutput returns the lines a prompted command's block shows after c (up
// to the next "$ " prompt).
func docOutput(c docCmd) []string {
	var out []string
	started := false
	for i, l := range c.block.Lines {
		line := c.block.Line + 1 + i
		switch {
		case line == c.Line:
			started = true
		case started && line > c.Line && strings.HasPrefix(strings.TrimSpace(l), "$ "):
			return out
		case started && line > c.Line && !strings.HasSuffix(strings.TrimSpace(c.block.Lines[i-1]), `\`):
			out = append(out, l)
		}
	}
	return out
}

// docJSONAfter returns the first json block of c's file after c's line.
func docJSONAfter(t *testing.T, c docCmd) any {
	t.Helper()
	for _, b := range deploytest.MarkdownBlocks(t, filepath.Join(binarytest.ModuleRoot(t), c.File), "json") {
		if b.Line > c.Line {
			var v any
			if err := json.Unmarshal([]byte(strings.Join(b.Lines, "\n")), &v); err != nil {
				t.Fatalf("%s:%d: the json block does not parse: %v", c.File, b.Line, err)
			}
			return v
		}
	}
	t.Fatalf("%s:%d: no json block after the command", c.File, c.Line)
	return nil
}

// missingFields returns the field names of doc (objects, and the first
// element of arrays, recursively) that got lacks.
func missingFields(doc, got any, path string) []string {
	var out []string
	switch d := doc.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path + " (not an object)"}
		}
		for k, v := range d {
			gv, ok := g[k]
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, missingFields(v, gv, path+"."+k)...)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(d) > 0 && len(g) == 0 {
			return []string{path + "[] (no element)"}
		}
		if len(d) > 0 {
			out = append(out, missingFields(d[0], g[0], path+"[0]")...)
		}
	}
	return out
}

// decodeJSON parses s as JSON, failing the test with what it was.
func decodeJSON(t *testing.T, what, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, s)
	}
	return v
}

// hasFields checks that got has every field doc shows.
func hasFields(t *testing.T, c docCmd, doc, got any) {
	t.Helper()
	if m := missingFields(doc, got, ""); len(m) > 0 {
		b, _ := json.Marshal(got)
		t.Errorf("%s:%d: the answer lacks the fields %v the doc shows:\n%s", c.File, c.Line, m, b)
	}
}

// localize rewrites a doc command for the test's processes: the doc's
// addresses become the replica's, its paths temporary ones.
func localize(s string, pairs ...string) string {
	return strings.NewReplacer(pairs...).Replace(s)
}

// freeAddr returns a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// docQuickstart: `make run` serves config/examples with the binary, and the
// calls the README and the Kubernetes quick start make answer as shown: the
// two ShouldRateLimit calls (grpcurl's JSON of the answer: same fields,
// same values but the time until reset), /readyz, /healthz and the gRPC
// health check.
func docQuickstart(t *testing.T, cmds []docCmd) {
	root := binarytest.ModuleRoot(t)
	mk := exec.Command("make", "--no-print-directory", "-n", "run")
	mk.Dir = root
	out, err := mk.Output()
	if err != nil {
		t.Fatalf("make -n run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	serve := strings.Fields(lines[len(lines)-1])
	if !slices.Equal(serve, []string{"bin/envoy-rls", "serve", "--config", "config/examples"}) {
		t.Fatalf("make run runs %q: want bin/envoy-rls serve --config config/examples", serve)
	}
	r := startReplica(t, "quickstart", replicaConfig{Rules: filepath.Join(root, "config", "examples")})
	for _, c := range cmds {
		switch w := c.Words; {
		case w[0] == "grpcurl" && w[len(w)-1] == "grpc.health.v1.Health/Check":
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			resp, err := grpc_health_v1.NewHealthClient(r.conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
			cancel()
			if err != nil || resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
				t.Errorf("%s:%d: health check %v, %v: want SERVING", c.File, c.Line, resp, err)
			}
		case w[0] == "grpcurl":
			if len(w) != 6 || w[2] != "-d" || w[4] != "localhost:8081" || w[5] != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
				t.Fatalf("%s:%d: %q: this test knows grpcurl -plaintext -d JSON localhost:8081 .../ShouldRateLimit", c.File, c.Line, w)
			}
			var req rlsv3.RateLimitRequest
			if err := protojson.Unmarshal([]byte(w[3]), &req); err != nil {
				t.Fatalf("%s:%d: -d: %v", c.File, c.Line, err)
			}
			resp, err := r.ask(&req)
			if err != nil {
				t.Fatalf("%s:%d: %v", c.File, c.Line, err)
			}
			b, err := protojson.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			doc := decodeJSON(t, fmt.Sprintf("%s:%d: the output shown", c.File, c.Line), strings.Join(docOutput(c), "\n"))
			got := decodeJSON(t, "the answer", string(b))
			if diff := jsonDiff(doc, got, ""); len(diff) > 0 {
				t.Errorf("%s:%d: the answer differs from the doc's:\n%s\ngot %s", c.File, c.Line, strings.Join(diff, "\n"), b)
			}
		case w[0] == "curl":
			got := bash(t, localize(c.Text, "localhost:8080", r.adminAddr))
			path := w[len(w)-1]
			want := map[string]string{"localhost:8080/readyz": "ready", "localhost:8080/healthz": "ok\nstore memory: "}[path]
			if want == "" || !strings.HasPrefix(got, want) {
				t.Errorf("%s:%d: %s answered %q: want it to start %q", c.File, c.Line, path, got, want)
			}
		case w[0] == "make":
			// Checked above: the serve command make run runs.
		default:
			t.Errorf("%s:%d: the quickstart runner does not know %q", c.File, c.Line, c.Text)
		}
	}
}

// jsonDiff compares grpcurl's output in the doc with the answer: the same
// fields, and the same values but the time until reset, which only has to
// be a duration.
func jsonDiff(doc, got any, path string) []string {
	switch d := doc.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path + ": not an object"}
		}
		var out []string
		for k := range g {
			if _, ok := d[k]; !ok {
				out = append(out, path+"."+k+": not in the doc")
			}
		}
		for k, v := range d {
			if _, ok := g[k]; !ok {
				out = append(out, path+"."+k+": not in the answer")
				continue
			}
			out = append(out, jsonDiff(v, g[k], path+"."+k)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(d) {
			return []string{fmt.Sprintf("%s: %d elements in the doc, the answer has %v", path, len(d), got)}
		}
		var out []string
		for i := range d {
			out = append(out, jsonDiff(d[i], g[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	if strings.HasSuffix(path, ".durationUntilReset") {
		if s, ok := got.(string); ok && regexp.MustCompile(`^[0-9.]+s$`).MatchString(s) {
			return nil
		}
	}
	if fmt.Sprint(doc) != fmt.Sprint(got) {
		return []string{fmt.Sprintf("%s: the doc shows %v, the answer %v", path, doc, got)}
	}
	return nil
}

// docMakefile: every make target the docs name is a target `make help`
// lists (a rule with its description), with the variables the docs pass.
func docMakefile(t *testing.T, cmds []docCmd) {
	mk := exec.Command("make", "--no-print-directory", "-s", "help")
	mk.Dir = binarytest.ModuleRoot(t)
	out, err := mk.Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	help := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			help[f[0]] = l
		}
	}
	for _, c := range cmds {
		if c.Words[0] != "make" {
			continue
		}
		for _, w := range c.Words[1:] {
			if name, _, isVar := strings.Cut(w, "="); isVar {
				if !strings.Contains(help[c.Words[1]], name) {
					t.Errorf("%s:%d: make %s does not say it reads %s", c.File, c.Line, c.Words[1], name)
				}
			} else if help[w] == "" {
				t.Errorf("%s:%d: make help lists no target %s", c.File, c.Line, w)
			}
		}
	}
}

// docAdminAPI runs the admin API's recipes on a replica with the Redis
// store: the token file the recipe writes (owner-only, one name:token
// line), serve with it, each curl call and each command, their answers
// checked against the fields the doc shows, the digest's key found in
// Redis as a string of a state's layout, and the console served.
func docAdminAPI(t *testing.T, cmds []docCmd) {
	docTool(t, "curl")
	redis, cfg := withStandaloneRedis(t)
	dir := t.TempDir()
	cfg.Rules = rulesDir(t, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	writeFile(t, cfg.Rules, "fw.yaml", "domain: fw\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 100}\n")
	cfg.Secret = secretFile(t)
	etc := func(s string) string {
		return localize(s, "/etc/envoy-rls/admin-tokens", filepath.Join(dir, "admin-tokens"), "/etc/envoy-rls/hmac-secret", cfg.Secret, "rules/", cfg.Rules)
	}
	// The token file: the recipe's umask and printf, run as one shell.
	var recipe []string
	for _, c := range cmds {
		if c.Text == "umask 077" || strings.HasPrefix(c.Text, "printf ") {
			recipe = append(recipe, etc(c.Text))
		}
	}
	if len(recipe) != 2 {
		t.Fatalf("want the umask and printf lines of the token recipe, have %q", recipe)
	}
	bash(t, "umask 022; "+strings.Join(recipe, "; "))
	fi, err := os.Stat(filepath.Join(dir, "admin-tokens"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token recipe wrote %v, %v: want mode 0600", fi, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "admin-tokens"))
	if err != nil {
		t.Fatal(err)
	}
	name, token, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	if !ok || name != "ops-alice" || len(token) < 16 {
		t.Fatalf("the token file holds %q: want one name:token line", b)
	}
	cfg.Args = []string{"--admin-token-file", filepath.Join(dir, "admin-tokens")}
	r := startReplica(t, "admin-api", cfg)
	tokenOnly := writeFile(t, dir, "token", token+"\n")
	for range 3 {
		if _, err := r.ask(docRequest("edge", "remote_address", "198.51.100.7")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.ask(docRequest("fw", "remote_address", "198.51.100.7")); err != nil {
		t.Fatal(err)
	}
	// The explain answer the doc shows follows its curl call; the
	// commands after it answer the same document.
	ci := slices.IndexFunc(cmds, func(c docCmd) bool { return strings.Contains(c.Text, "/v1/explain") })
	if ci < 0 {
		t.Fatal("docs/admin-api.md: no curl call of /v1/explain")
	}
	explainDoc := docJSONAfter(t, cmds[ci])
	host := func(s string) string {
		return localize(etc(s), "http://127.0.0.1:8080", "http://"+r.adminAddr, "http://POD:8080", "http://"+r.adminAddr, "$TOKEN", token,
			"~/.envoy-rls-token", tokenOnly)
	}
	for _, c := range cmds {
		w := c.Words
		switch {
		case c.Text == "umask 077" || w[0] == "printf":
		case len(w) > 1 && w[1] == "serve":
			var flags []string
			for _, f := range w[2:] {
				if strings.HasPrefix(f, "--") {
					flags = append(flags, f)
				}
			}
			if !slices.Equal(flags, []string{"--config", "--admin-token-file"}) && !slices.Equal(flags, []string{"--config", "--admin-addr", "--admin-token-file"}) {
				t.Errorf("%s:%d: serve with %v: this test serves with --config and --admin-token-file (and the admin address)", c.File, c.Line, flags)
			}
			if code, body, err := r.adminDo("GET", "/ui", ""); err != nil || code != 200 || !strings.Contains(body, "<html") {
				t.Errorf("%s:%d: /ui answered %d %v: want the console's page", c.File, c.Line, code, err)
			}
		case strings.HasSuffix(c.Text, "/v1/..."):
			got := decodeJSON(t, c.Text, bash(t, host(strings.Replace(c.Text, "/v1/...", "/v1/stats", 1))))
			hasFields(t, c, map[string]any{"time": "", "policies": []any{map[string]any{"policy_id": "", "decisions": 0}}}, got)
		case w[0] == "curl" && strings.Contains(c.Text, "/v1/explain"), w[0] == "curl" && strings.Contains(c.Text, "/v1/top"), w[0] == "curl" && strings.Contains(c.Text, "/v1/usage"):
			hasFields(t, c, docJSONAfter(t, c), decodeJSON(t, c.Text, bash(t, host(c.Text))))
		case w[0] == "curl" && strings.Contains(c.Text, "policy="):
			if _, err := r.ask(docRequest("edge", "remote_address", "198.51.100.8")); err != nil {
				t.Fatal(err)
			}
			got := decodeJSON(t, c.Text, bash(t, host(c.Text)))
			shown := ""
			for _, l := range docOutput(c) {
				if s, ok := strings.CutPrefix(strings.TrimSpace(l), "# "); ok {
					shown = s
				}
			}
			doc := decodeJSON(t, fmt.Sprintf("%s:%d: the answer shown", c.File, c.Line), shown)
			hasFields(t, c, doc, got)
			if g := got.(map[string]any); g["policy_id"] != "edge/remote_address" || g["complete"] != true || g["deleted"].(float64) < 1 {
				t.Errorf("%s:%d: %v: want edge/remote_address reset, complete, at least one state deleted", c.File, c.Line, g)
			}
		case w[0] == "curl" && strings.Contains(c.Text, "/v1/counters"):
			got := decodeJSON(t, c.Text, bash(t, host(c.Text)))
			want := map[string]any{"domain": "", "matched": true, "policy_id": "", "limits": []any{map[string]any{"remaining": 0, "reset_ms": 0}}}
			if slices.Contains(w, "DELETE") {
				want["states_deleted"] = 0
			}
			hasFields(t, c, want, got)
		case len(w) > 1 && w[1] == "explain":
			doc := explainDoc
			if slices.Contains(w, "--config") {
				doc = explainRuleFields(doc) // offline: the rule, no state
			}
			hasFields(t, c, doc, decodeJSON(t, c.Text, runOK(t, nil, strings.Fields(host(strings.TrimPrefix(c.Text, "envoy-rls ")))...)))
		case len(w) > 1 && w[1] == "digest":
			out := strings.Fields(runOK(t, nil, strings.Fields(host(strings.TrimPrefix(c.Text, "envoy-rls ")))...))
			shown := strings.Fields(strings.TrimPrefix(strings.TrimSpace(docOutput(c)[0]), "# "))
			re := regexp.MustCompile(`^rate:\{([0-9a-f]{16})\}:state:v2:[0-9a-f]{16}:[0-9a-f]{32}$`)
			if len(out) != 3 || !slices.Contains(shown, out[1]) || !strings.HasPrefix(shown[len(shown)-1], "rate:{") || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(out[0]) || !re.MatchString(out[2]) || re.FindStringSubmatch(out[2])[1] != out[0][:16] {
				t.Fatalf("%s:%d: digest printed %q; the doc shows %q: want a 64-hex digest, the policy, and the state key tagged with the digest's first 16", c.File, c.Line, out, shown)
			}
			if typ := redis.MustDo("TYPE", out[2]); typ != "string" {
				t.Errorf("%s:%d: the key digest prints is a %v in Redis, want the state's string", c.File, c.Line, typ)
			}
		default:
			t.Errorf("%s:%d: the adminapi runner does not know %q", c.File, c.Line, c.Text)
		}
	}
}

// explainRuleFields is the doc's explain answer without the state fields,
// which an offline explain (rule files, no store) does not have.
func explainRuleFields(doc any) any {
	b, _ := json.Marshal(doc)
	var d map[string]any
	_ = json.Unmarshal(b, &d)
	for _, x := range d["descriptors"].([]any) {
		for _, l := range x.(map[string]any)["limits"].([]any) {
			for _, k := range []string{"remaining", "reset_ms", "retry_after_ms", "allowed", "source", "subject_digest"} {
				delete(l.(map[string]any), k)
			}
		}
		delete(x.(map[string]any), "subject_digest")
	}
	return d
}

// ask sends req as Envoy would and returns the whole answer.
func (r *replica) ask(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return r.rls.ShouldRateLimit(ctx, req)
}

// docRequest is a one-descriptor request of one entry.
func docRequest(domain, key, value string) *rlsv3.RateLimitRequest {
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(fmt.Appendf(nil, `{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, domain, key, value), &req); err != nil {
		panic(err)
	}
	return &req
}

// docMemoryFlood runs the memory store's sizing script, scaled down
// (2,000 calls in at most a minute instead of 1,300,000 in five) on free
// ports and a temporary rule directory: the rules it writes load, the load
// tool's run completes, and the metrics and the peak RSS it reads are
// there.
func docMemoryFlood(t *testing.T, cmds []docCmd) {
	root := binarytest.ModuleRoot(t)
	script := strings.Join(cmds[0].block.Lines, "\n")
	rules := t.TempDir()
	grpcAddr, adminAddr := freeAddr(t), freeAddr(t)
	script = localize(script, "/tmp/rules", rules, "bin/envoy-rls", binary(t), "127.0.0.1:8081", grpcAddr, "127.0.0.1:8080", adminAddr,
		"-max-requests 1300000", "-max-requests 2000", "-duration 5m", "-duration 1m", "cd tools", "cd "+filepath.Join(root, "tools"))
	for _, want := range []string{"-max-requests 2000", grpcAddr, adminAddr, binary(t)} {
		if !strings.Contains(script, want) {
			t.Fatalf("docs/deploy.md's sizing script changed: %q not substituted\n%s", want, script)
		}
	}
	cmd := exec.Command("bash", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the sizing script: %v\n%s", err, out)
	}
	for _, re := range []string{`(?m)^envoy_rls_memory_entries \d`, `(?m)^envoy_rls_memory_overflow_sketch_bytes \d`, `(?m)^go_memstats_heap_inuse_bytes \d`, `(?m)^VmHWM:\s+\d+ kB$`} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("the sizing script's output lacks %s:\n%s", re, out)
		}
	}
}

// docRefMetrics serves the reference's Prometheus metrics as the doc does
// (another port) and runs its curl | grep: the reference's series are there.
func docRefMetrics(t *testing.T, cmds []docCmd) {
	docTool(t, "curl")
	addr := freeAddr(t)
	var serve, curl docCmd
	for _, c := range cmds {
		switch c.Words[0] {
		case "envoy-rls":
			serve = c
		case "curl":
			curl = c
		}
	}
	if !slices.Equal(serve.Words, []string{"envoy-rls", "serve", "--config", "rules/", "--reference-metrics-addr", ":19001"}) {
		t.Fatalf("%s:%d: %q: this test serves --reference-metrics-addr on a free port", serve.File, serve.Line, serve.Words)
	}
	r := startReplica(t, "refmetrics", replicaConfig{Rules: rulesDir(t, hourlyRules(5, "user")), Args: []string{"--reference-metrics-addr", addr}})
	r.mustCall(t, entry{"user", "u1"})
	out := bash(t, localize(curl.Text, "127.0.0.1:19001", addr))
	for _, series := range []string{"ratelimit_service_config_load_success", "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"}", "ratelimit_service_rate_limit_total_hits{domain=\"" + domain + "\",key1=\"user\"}"} {
		if !strings.Contains(out, series) {
			t.Errorf("%s:%d: no %s in\n%s", curl.File, curl.Line, series, out)
		}
	}
}

// docAudit runs the audit stream's redis-cli recipes on a stream the
// binary wrote: its length, the newest events with the fields the doc's
// event shows, the events from a time, a follower that gets the next
// denial, and the count of one subject's denials.
func docAudit(t *testing.T, cmds []docCmd) {
	docTool(t, "redis-cli")
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	cfg.Rules, cfg.Secret = rulesDir(t, hourlyRules(1, "remote_address")), secretFile(t)
	cfg.Args = []string{"--audit-sink", "redis"}
	r := startReplica(t, "audit", cfg)
	host, port, err := net.SplitHostPort(redis.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cli := "redis-cli -h " + host + " -p " + port
	since := time.Now().UnixMilli()
	r.mustCall(t, entry{"remote_address", "198.51.100.7"})
	for range 3 {
		if res := r.call(callTimeout, 1, entry{"remote_address", "198.51.100.7"}); !res.over() {
			t.Fatalf("call past the limit: %v", res)
		}
	}
	digest := strings.Fields(runOK(t, nil, "digest", "--config", cfg.Rules, "--hmac-secret-file", cfg.Secret, "--domain", domain, "--descriptor", "remote_address=198.51.100.7"))[0]
	waitFor(t, "3 events in the stream", func() bool { return redis.MustDo("XLEN", "envoy-rls:audit") == int64(3) })
	local := func(s string) string {
		return localize(s, "redis-cli", cli, "1796151600000", fmt.Sprint(since), "9df14658", digest[:8])
	}
	var event map[string]any
	for _, c := range cmds {
		switch {
		case strings.Contains(c.Text, "XLEN"):
			if got := bash(t, local(c.Text)); got != "3" {
				t.Errorf("%s:%d: %q, want 3", c.File, c.Line, got)
			}
		case strings.Contains(c.Text, "XREAD BLOCK 0"):
			follower := exec.Command("bash", "-c", local(c.Text))
			var out strings.Builder
			follower.Stdout = &out
			if err := follower.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the follower blocked", func() bool {
				return strings.Contains(fmt.Sprint(redis.MustDo("CLIENT", "LIST")), "cmd=xread")
			})
			r.call(callTimeout, 1, entry{"remote_address", "198.51.100.7"})
			done := make(chan error, 1)
			go func() { done <- follower.Wait() }()
			select {
			case err := <-done:
				if err != nil || !strings.Contains(out.String(), digest) {
					t.Errorf("%s:%d: the follower: %v\n%s\nwant the new denial of %s", c.File, c.Line, err, out.String(), digest[:8])
				}
			case <-time.After(10 * time.Second):
				_ = follower.Process.Kill()
				t.Errorf("%s:%d: the follower printed nothing within 10 s of a denial", c.File, c.Line)
			}
		case strings.Contains(c.Text, "grep -c"):
			if got := bash(t, local(c.Text)); got != "4" {
				t.Errorf("%s:%d: %q, want the subject's 4 denials", c.File, c.Line, got)
			}
		case strings.Contains(c.Text, "XREVRANGE"), strings.Contains(c.Text, "XRANGE"):
			out := strings.Fields(bash(t, local(c.Text)))
			if event == nil {
				event = docJSONAfter(t, c).(map[string]any)
			}
			for k := range event {
				if k != "request_id" && !slices.Contains(out, k) {
					t.Errorf("%s:%d: no field %s in the events:\n%s", c.File, c.Line, k, out)
				}
			}
		default:
			t.Errorf("%s:%d: the audit runner does not know %q", c.File, c.Line, c.Text)
		}
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// docSynopsis: each command of the synopsis is one `envoy-rls help` lists,
// and each of its flags is one `envoy-rls COMMAND --help` lists.
func docSynopsis(t *testing.T, cmds []docCmd) {
	help := runCommand(t, nil, "help")
	for _, c := range cmds {
		if c.Lang != "" {
			continue // the secret recipe (docChecks: elsewhere)
		}
		sub := c.Words[1]
		if !strings.Contains(help.stdout+help.stderr, "envoy-rls "+sub) {
			t.Errorf("%s:%d: envoy-rls help does not list %s", c.File, c.Line, sub)
		}
		if sub == "help" {
			continue
		}
		res := runCommand(t, nil, sub, "--help")
		for _, f := range regexp.MustCompile(`--[a-z-]+`).FindAllString(c.Text, -1) {
			if !strings.Contains(res.stdout+res.stderr, f) {
				t.Errorf("%s:%d: envoy-rls %s --help lists no %s", c.File, c.Line, sub, f)
			}
		}
	}
}

// docValidate: validate prints a rate_limits list as config.md shows it,
// and loads the Istio example's rules as istio.md runs it.
func docValidate(t *testing.T, cmds []docCmd) {
	root := binarytest.ModuleRoot(t)
	for _, c := range cmds {
		switch c.File {
		case "docs/config.md":
			b, err := os.ReadFile(filepath.Join(root, c.File))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := deploytest.ParseBlocks(c.File, b)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(blocks, func(bl deploytest.Block) bool { return bl.Line > c.Line })
			dir := rulesDir(t, "domain: api\ndescriptors:\n  - key: api_key\n    rate_limits:\n"+
				"      - {unit: second, requests_per_unit: 10}\n      - {unit: day, requests_per_unit: 1000, algorithm: sliding_window}\n")
			out := runOK(t, nil, "validate", "--config", dir)
			for _, l := range blocks[i].Lines {
				if !strings.Contains(out, strings.TrimSpace(l)) {
					t.Errorf("%s:%d: validate does not print %q:\n%s", c.File, blocks[i].Line, strings.TrimSpace(l), out)
				}
			}
		case "docs/istio.md":
			if !slices.Equal(c.Words, []string{"go", "run", "./cmd/envoy-rls", "validate", "config/examples/istio/rules"}) {
				t.Fatalf("%s:%d: %q: this test runs the built binary's validate on config/examples/istio/rules", c.File, c.Line, c.Words)
			}
			if out := runOK(t, nil, "validate", filepath.Join(root, "config", "examples", "istio", "rules")); !strings.Contains(out, "policy ") {
				t.Errorf("%s:%d: validate printed no policy:\n%s", c.File, c.Line, out)
			}
		}
	}
}

// docFunctions runs redis.md's function recipes on a Redis the binary
// loaded its library into: the list shows the library that
// rate-batch-v2-function.lua names, deleting it answers OK, and the
// replica loads it again at its next call.
func docFunctions(t *testing.T, cmds []docCmd) {
	docTool(t, "redis-cli")
	redis, cfg := withStandaloneRedis(t)
	cfg.Rules, cfg.Secret = rulesDir(t, hourlyRules(100, "user")), secretFile(t)
	r := startReplica(t, "functions", cfg)
	r.mustCall(t, entry{"user", "u1"})
	head, err := os.ReadFile(filepath.Join(binarytest.ModuleRoot(t), "pkg", "lua", "rate-batch-v2-function.lua"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^#!lua name=(envoy_rls_rate_v2_[0-9a-f]+)\n`).FindSubmatch(head)
	if m == nil {
		t.Fatal("rate-batch-v2-function.lua's first line names no envoy_rls_rate_v2_ library")
	}
	library := string(m[1])
	host, port, err := net.SplitHostPort(redis.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		args := append([]string{"-h", host, "-p", port}, strings.Fields(localize(c.Text, "envoy_rls_rate_v2_<old digest>", library))...)
		out, err := exec.Command("redis-cli", args...).CombinedOutput()
		switch {
		case err != nil:
			t.Fatalf("%s:%d: redis-cli %s: %v\n%s", c.File, c.Line, c.Text, err, out)
		case c.Words[1] == "LIST" && !strings.Contains(string(out), library):
			t.Errorf("%s:%d: FUNCTION LIST shows\n%s\nwithout %s", c.File, c.Line, out, library)
		case c.Words[1] == "DELETE" && strings.TrimSpace(string(out)) != "OK":
			t.Errorf("%s:%d: FUNCTION DELETE answered %s", c.File, c.Line, out)
		}
	}
	r.mustCall(t, entry{"user", "u2"})
	if !strings.Contains(fmt.Sprint(redis.MustDo("FUNCTION", "LIST")), library) {
		t.Errorf("the replica did not load %s again after it was deleted", library)
	}
}

// docVersion: version prints the fields releasing.md shows, in text and
// in JSON.
func docVersion(t *testing.T, cmds []docCmd) {
	for _, c := range cmds {
		shown := docOutput(c)
		got := runOK(t, nil, c.Words[1:]...)
		if slices.Contains(c.Words, "json") {
			hasFields(t, c, decodeJSON(t, c.File, strings.Join(shown, "\n")), decodeJSON(t, "version --output json", got))
			continue
		}
		for _, l := range shown {
			label, _, _ := strings.Cut(strings.TrimSpace(l), ":")
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + `:\s+\S`).MatchString(got) {
				t.Errorf("%s:%d: version prints no %q line:\n%s", c.File, c.Line, label, got)
			}
		}
	}
}

// docTestNames: the fuzz targets and the e2e scenario testing.md runs
// exist in the packages it names.
func docTestNames(t *testing.T, cmds []docCmd) {
	root := binarytest.ModuleRoot(t)
	for _, c := range cmds {
		var name, dir string
		for i, w := range c.Words {
			switch {
			case (w == "-fuzz" || w == "-run") && i+1 < len(c.Words):
				name = strings.Trim(c.Words[i+1], "^$")
			case w == "-C" && i+1 < len(c.Words):
				dir = c.Words[i+1]
			}
		}
		pkg := c.Words[len(c.Words)-1]
		files, err := filepath.Glob(filepath.Join(root, dir, pkg, "*_test.go"))
		if err != nil || name == "" || name == "$" {
			t.Fatalf("%s:%d: %q: no test name or package", c.File, c.Line, c.Text)
		}
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || strings.Contains(string(b), "func "+name+"(")
		}
		if !found {
			t.Errorf("%s:%d: no func %s in %s", c.File, c.Line, name, filepath.Join(dir, pkg))
		}
	}
}
