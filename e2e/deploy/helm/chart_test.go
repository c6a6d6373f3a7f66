package helm_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestMain builds the binary the tests check the chart against once, and
// removes it when they end.
func TestMain(m *testing.M) { binarytest.Main(m) }

// hmacValue is the HMAC key the tests pass; no default may ever appear.
const hmacValue = "test-only-hmac-key-0123456789abcdef"

// helmBin is the helm the tests render with (scripts/ensure-tool.sh helm).
func helmBin(t *testing.T) string { return deploytest.Tool(t, "helm") }

// obj is one parsed manifest. (An alias: yaml.v3 decodes nested maps with
// the type of the outer one.)
type obj = map[string]any

func kindOf(o obj) string { return str(o["kind"]) }

func nameOf(o obj) string { return str(get(o, "metadata", "name")) }

// get walks nested maps; nil when a step is missing.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// chartFile reads the chart's file name.
func chartFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deploytest.ChartDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// render runs helm template with the --set/--set-string/--kube-version
// arguments and returns the manifests by kind. Helm hooks are filed under
// "hook/<kind>", apart from the release's own objects.
func render(t *testing.T, args ...string) map[string][]obj {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "rls", deploytest.ChartDir(t), "--namespace", "rl"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	return manifests(t, args, out)
}

// manifests parses helm template's output by kind (hooks under
// "hook/<kind>") and checks every Deployment's args with checkServeArgs.
func manifests(t *testing.T, args []string, out string) map[string][]obj {
	t.Helper()
	byKind := map[string][]obj{}
	docs, err := deploytest.YAMLDocuments[obj]([]byte(out))
	if err != nil {
		t.Fatalf("helm template %v: output is not YAML: %v\n%s", args, err, out)
	}
	for _, o := range docs {
		if o == nil {
			continue
		}
		kind := kindOf(o)
		if get(o, "metadata", "annotations", "helm.sh/hook") != nil {
			kind = "hook/" + kind
		}
		byKind[kind] = append(byKind[kind], o)
	}
	for _, dep := range byKind["Deployment"] {
		checkServeArgs(t, fmt.Sprintf("helm template %v", args), dep)
	}
	return byKind
}

// checkServeArgs runs the rendered container's args and environment through
// the binary's own flag parsing and option checks (app.CheckServeArgs, the
// code path of `envoy-rls serve`): a chart the binary would refuse at start
// fails here. Every render of the tests passes through it.
func checkServeArgs(t *testing.T, where string, dep obj) {
	t.Helper()
	var c any
	for _, cc := range list(get(dep, "spec", "template", "spec", "containers")) {
		if get(cc, "name") == "envoy-rls" {
			c = cc
		}
	}
	if c == nil {
		t.Fatalf("%s: Deployment %s has no envoy-rls container", where, nameOf(dep))
	}
	args := toStrings(list(get(c, "args")))
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("%s: args %q: want serve first", where, args)
	}
	env := containerEnv(t, where, c)
	getenv := func(k string) string { return env[k] }
	if err := app.CheckServeArgs(args[1:], getenv); err != nil {
		t.Errorf("%s: envoy-rls would refuse to start with the rendered args %q and env %v: %v", where, args[1:], env, err)
	}
}

// containerEnv returns the environment the container starts with: literal
// values, and the values the kubelet computes for resourceFieldRef (the
// limit or request in bytes or cores, as the downward API gives them).
// Variables read from Secrets or ConfigMaps have no value here.
func containerEnv(t *testing.T, where string, c any) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range list(get(c, "env")) {
		name := str(get(e, "name"))
		if v, ok := get(e, "value").(string); ok {
			env[name] = v
			continue
		}
		if ref := get(e, "valueFrom", "resourceFieldRef"); ref != nil {
			res := str(get(ref, "resource"))
			kind, what, _ := strings.Cut(res, ".")
			q := get(c, "resources", kind, what)
			if q == nil {
				t.Errorf("%s: env %s refers to %s, which the container does not set", where, name, res)
				continue
			}
			v, err := parseQuantity(fmt.Sprint(q))
			if err != nil {
				t.Errorf("%s: env %s: resources.%s: %v", where, name, res, err)
				continue
			}
			div := 1.0
			if d := get(ref, "divisor"); d != nil {
				if div, err = parseQuantity(fmt.Sprint(d)); err != nil || div == 0 {
					t.Errorf("%s: env %s: divisor %v: %v", where, name, d, err)
					continue
				}
			}
			// The kubelet gives the quantity over the divisor, rounded up.
			env[name] = strconv.FormatInt(int64(math.Ceil(v/div)), 10)
		}
	}
	return env
}

// parseQuantity parses a Kubernetes resource quantity ("256Mi", "1G",
// "100m", "2") into base units (bytes, cores). Only the suffixes resources
// use are known; anything else is an error.
func parseQuantity(q string) (float64, error) {
	mult := map[string]float64{
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
		"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "": 1,
	}
	num := strings.TrimRight(q, "KMGTikm")
	m, ok := mult[q[len(num):]]
	if !ok {
		return 0, fmt.Errorf("quantity %q: unknown suffix", q)
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("quantity %q: not a non-negative number", q)
	}
	return n * m, nil
}

func one(t *testing.T, m map[string][]obj, kind string) obj {
	t.Helper()
	if len(m[kind]) != 1 {
		t.Fatalf("want exactly one %s, got %d", kind, len(m[kind]))
	}
	return m[kind][0]
}

var (
	redisBase = []string{"--set", "store=redis", "--set", `redis.addr=redis-0.redis:6379\,redis-1.redis:6379`}
	withHMAC  = []string{"--set-string", "hmac.secret=" + hmacValue}
)

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestLint(t *testing.T) {
	for name, args := range map[string][]string{
		"defaults": nil,
		"redis":    cat(redisBase, withHMAC, []string{"--set", "autoscaling.enabled=true", "--set", "serviceMonitor.enabled=true"}),
		"everything on": cat(redisBase, withHMAC, []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.enabled=true",
			"--set", "rules.existingConfigMap=my-rules", "--set", "redis.tls.enabled=true", "--set", "redis.tls.ca.existingSecret=ca",
			"--set", "extraVolumes[0].name=x", "--set", "extraVolumes[0].emptyDir.medium=Memory",
			"--set", "extraVolumeMounts[0].name=x", "--set", "extraVolumeMounts[0].mountPath=/x"}),
		"everything off": {"--set", "rulesCheck.enabled=false", "--set", "startupProbe.enabled=false", "--set", "podDisruptionBudget.enabled=false",
			"--set", "serviceAccount.create=false", "--set", "resources.limits=null"},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := runHelm(t, append([]string{"lint", "--strict", deploytest.ChartDir(t)}, args...)...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// TestRender renders the chart with the value sets operators use and checks
// what each must produce.
func TestRender(t *testing.T) {
	flags := deploytest.ServeFlags(t)
	cases := []struct {
		name string
		args []string
		// wantArgs must all be among the container's args.
		wantArgs []string
		// wantSecret: the chart creates the HMAC Secret.
		wantSecret bool
		// hmacSecretName: the Secret the pod mounts ("" for none).
		hmacSecretName string
		wantHPA        bool
		wantMonitor    bool
		wantPreStop    bool
		// extraMounts: secret volumes (besides hmac) by name -> secret.
		extraMounts map[string]string
		// replicas: want spec.replicas (-1: absent, as with an HPA).
		replicas int
	}{
		{
			name: "memory defaults",
			wantArgs: []string{"--store=memory", "--config=/etc/envoy-rls/rules", "--grpc-addr=:8081", "--admin-addr=:8080",
				"--readiness=rules", "--default-failure-mode=closed", "--replicas-hint=1", "--local-fallback-max-entries=100000"},
			replicas: 1,
		},
		{
			name: "rules from an xDS server over mutual TLS",
			args: []string{
				"--set", "xds.enabled=true", "--set", "xds.server=envoy-gateway:18001", "--set", "xds.nodeId=envoy-ratelimit",
				"--set", "xds.forceStartWithoutInitialConfig=true",
				"--set", "xds.tls.enabled=true", "--set", "xds.tls.existingSecret=rls-xds-certs", "--set", "xds.tls.san=envoy-gateway",
			},
			wantArgs: []string{"--config-source=xds", "--xds-server=envoy-gateway:18001", "--xds-node-id=envoy-ratelimit",
				"--force-start-without-initial-config=true", "--xds-tls=true", "--xds-tls-ca=/etc/envoy-rls/xds-tls/ca.crt",
				"--xds-tls-cert=/etc/envoy-rls/xds-tls/tls.crt", "--xds-tls-key=/etc/envoy-rls/xds-tls/tls.key", "--xds-tls-san=envoy-gateway"},
			extraMounts: map[string]string{"xds-tls": "rls-xds-certs"},
			replicas:    1,
		},
		{
			name: "redis standalone with TLS and a password",
			args: cat(redisBase, withHMAC, []string{
				"--set", "replicaCount=3",
				"--set", "redis.addr=redis-0.redis:6379",
				"--set", "redis.mode=standalone",
				"--set", "redis.tls.enabled=true",
				"--set", "redis.tls.ca.existingSecret=redis-ca",
				"--set", "redis.tls.clientCert.existingSecret=redis-client",
				"--set", "redis.password.existingSecret=redis-auth",
				"--set", "redis.username=rls",
			}),
			wantArgs: []string{
				"--store=redis", "--redis-addr=redis-0.redis:6379", "--redis-mode=standalone",
				"--redis-tls=true", "--redis-tls-ca=/etc/envoy-rls/redis-ca/ca.crt",
				"--redis-tls-cert=/etc/envoy-rls/redis-client/tls.crt", "--redis-tls-key=/etc/envoy-rls/redis-client/tls.key",
				"--redis-password-file=/etc/envoy-rls/redis-password/password", "--redis-username=rls",
				"--hmac-secret-file=/etc/envoy-rls/hmac/hmac-secret",
				"--replicas-hint=3", // automatic: replicaCount
				"--journal-max-entries=100000",
			},
			wantSecret:     true,
			hmacSecretName: "rls-envoy-rls-hmac",
			extraMounts:    map[string]string{"redis-ca": "redis-ca", "redis-client": "redis-client", "redis-password": "redis-auth"},
			replicas:       3,
		},
		{
			name:     "shadow mode",
			args:     []string{"--set", "shadowMode=true"},
			wantArgs: []string{"--shadow-mode=true"},
			replicas: 1,
		},
		{
			name: "gRPC mutual TLS",
			args: []string{
				"--set", "grpc.tls.existingSecret=rls-tls", "--set", "grpc.tls.clientCA.existingSecret=envoy-ca",
				"--set", "grpc.tls.clientSAN=envoy.gateway",
			},
			wantArgs: []string{"--grpc-tls-cert=/etc/envoy-rls/grpc-tls/tls.crt", "--grpc-tls-key=/etc/envoy-rls/grpc-tls/tls.key",
				"--grpc-tls-client-ca=/etc/envoy-rls/grpc-client-ca/ca.crt", "--grpc-tls-client-san=envoy.gateway"},
			extraMounts: map[string]string{"grpc-tls": "rls-tls", "grpc-client-ca": "envoy-ca"},
			replicas:    1,
		},
		{
			name: "redis sentinel with an existing HMAC secret and HPA",
			args: cat(redisBase, []string{
				"--set", "redis.mode=sentinel", "--set", "redis.sentinelMaster=mymaster",
				"--set", "hmac.existingSecret=rls-hmac", "--set", "hmac.key=key",
				"--set", "autoscaling.enabled=true",
			}),
			wantArgs: []string{"--redis-mode=sentinel", "--redis-sentinel-master=mymaster", "--hmac-secret-file=/etc/envoy-rls/hmac/key",
				"--replicas-hint=10"}, // automatic: autoscaling.maxReplicas
			hmacSecretName: "rls-hmac",
			wantHPA:        true,
			replicas:       -1,
		},
		{
			name: "redis cluster, HPA off, ServiceMonitor, Kubernetes 1.31",
			args: cat(redisBase, withHMAC, []string{
				"--set", "redis.mode=cluster", "--set", "autoscaling.enabled=false", "--set", "replicaCount=2",
				"--set", "serviceMonitor.enabled=true", "--kube-version", "1.31.0",
			}),
			wantArgs:       []string{"--redis-mode=cluster"},
			wantSecret:     true,
			hmacSecretName: "rls-envoy-rls-hmac",
			wantMonitor:    true,
			wantPreStop:    true,
			replicas:       2,
		},
		{
			name: "readiness on the store, local fallback set",
			args: cat(redisBase, withHMAC, []string{
				"--set", "readiness=store", "--set", "defaultFailureMode=local",
				"--set", "localFallback.replicasHint=4", "--set", "localFallback.maxEntries=5000",
				"--set", "autoscaling.enabled=true",
			}),
			wantArgs:       []string{"--readiness=store", "--default-failure-mode=local", "--replicas-hint=4", "--local-fallback-max-entries=5000"},
			wantSecret:     true,
			hmacSecretName: "rls-envoy-rls-hmac",
			wantHPA:        true,
			replicas:       -1,
		},
		{
			name:     "HMAC secret shared through Redis",
			args:     cat(redisBase, []string{"--set", "hmac.redisKey=team-a:envoy-rls:hmac-secret"}),
			wantArgs: []string{"--store=redis", "--hmac-secret-redis-key=team-a:envoy-rls:hmac-secret"},
			replicas: 1,
		},
		{
			name:     "existing rules ConfigMap",
			args:     []string{"--set", "rules.existingConfigMap=my-rules"},
			wantArgs: []string{"--store=memory"},
			replicas: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.args...)
			dep := one(t, m, "Deployment")
			pod := get(dep, "spec", "template", "spec")
			containers := list(get(pod, "containers"))
			if len(containers) == 0 {
				t.Fatal("no containers")
			}
			for _, c := range containers {
				checkContainer(t, c, pod)
			}
			c := containers[0]
			args := toStrings(list(get(c, "args")))
			if len(args) == 0 || args[0] != "serve" {
				t.Fatalf("args %q: want serve first", args)
			}
			deploytest.CheckArgs(t, "Deployment args", args[1:], flags)
			for _, w := range tc.wantArgs {
				if !contains(args, w) {
					t.Errorf("args %q: missing %s", args, w)
				}
			}

			checkDrain(t, pod, args)
			checkRulesMount(t, m, pod, c, args)
			checkService(t, one(t, m, "Service"))
			checkSecrets(t, m, tc.wantSecret)
			checkSecretVolumes(t, pod, c, tc.hmacSecretName, tc.extraMounts)

			ann, _ := get(dep, "spec", "template", "metadata", "annotations").(map[string]any)
			_, hasChecksum := ann["checksum/hmac-secret"]
			if hasChecksum != tc.wantSecret {
				t.Errorf("checksum/hmac-secret annotation present=%v, want %v (only on a chart-made Secret)", hasChecksum, tc.wantSecret)
			}
			for k := range ann {
				if strings.Contains(k, "config") || strings.Contains(k, "rules") {
					t.Errorf("pod annotation %q: the rules must reload live, not roll the pods", k)
				}
			}

			switch r, ok := get(dep, "spec", "replicas").(int); {
			case tc.replicas < 0 && ok:
				t.Errorf("spec.replicas %d set alongside an HPA", r)
			case tc.replicas >= 0 && r != tc.replicas:
				t.Errorf("spec.replicas %v, want %d", get(dep, "spec", "replicas"), tc.replicas)
			}
			if got := len(m["HorizontalPodAutoscaler"]); got != b2i(tc.wantHPA) {
				t.Errorf("%d HPAs, want %d", got, b2i(tc.wantHPA))
			}
			if tc.wantHPA {
				hpa := one(t, m, "HorizontalPodAutoscaler")
				if hpa["apiVersion"] != "autoscaling/v2" || get(hpa, "spec", "scaleTargetRef", "name") != nameOf(dep) {
					t.Errorf("HPA %v does not target the Deployment with autoscaling/v2", hpa)
				}
			}
			if got := len(m["ServiceMonitor"]); got != b2i(tc.wantMonitor) {
				t.Errorf("%d ServiceMonitors, want %d", got, b2i(tc.wantMonitor))
			}
			if tc.wantMonitor {
				sm := one(t, m, "ServiceMonitor")
				ep := list(get(sm, "spec", "endpoints"))
				if sm["apiVersion"] != "monitoring.coreos.com/v1" || len(ep) != 1 || get(ep[0], "port") != "http-admin" || get(ep[0], "path") != "/metrics" {
					t.Errorf("ServiceMonitor %v: want monitoring.coreos.com/v1 scraping http-admin /metrics", sm)
				}
			}
			pdb := one(t, m, "PodDisruptionBudget")
			if pdb["apiVersion"] != "policy/v1" || !reflect.DeepEqual(get(pdb, "spec", "selector", "matchLabels"), get(dep, "spec", "selector", "matchLabels")) {
				t.Errorf("PDB %v does not select the Deployment's pods", pdb)
			}
			hasPreStop := get(c, "lifecycle", "preStop", "sleep", "seconds") != nil
			if hasPreStop != tc.wantPreStop {
				t.Errorf("preStop sleep present=%v, want %v (sleep action only on Kubernetes 1.30+)", hasPreStop, tc.wantPreStop)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func toStrings(l []any) []string {
	out := make([]string, len(l))
	for i, v := range l {
		out[i] = str(v)
	}
	return out
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// checkContainer: probes, resources and the restricted security context.
func checkContainer(t *testing.T, c, pod any) {
	t.Helper()
	name := str(get(c, "name"))
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if got := get(c, probe, "httpGet", "path"); got != path {
			t.Errorf("container %s: %s path %v, want %s", name, probe, got, path)
		}
		if get(c, probe, "httpGet", "port") == nil {
			t.Errorf("container %s: %s has no port", name, probe)
		}
	}
	for _, kind := range []string{"requests", "limits"} {
		for _, res := range []string{"cpu", "memory"} {
			if get(c, "resources", kind, res) == nil {
				t.Errorf("container %s: no resources.%s.%s", name, kind, res)
			}
		}
	}
	checkContainerSecurity(t, c, pod)
	if get(pod, "automountServiceAccountToken") != false {
		t.Error("the pod mounts a service account token it does not use")
	}
}

// checkDrain: Kubernetes must not SIGKILL the process before its drain ends.
func checkDrain(t *testing.T, pod any, args []string) {
	t.Helper()
	v, ok := flagValue(args, "drain-timeout")
	if !ok {
		t.Fatal("no --drain-timeout in args")
	}
	drain, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("--drain-timeout %q: %v", v, err)
	}
	grace, _ := get(pod, "terminationGracePeriodSeconds").(int)
	if time.Duration(grace)*time.Second <= drain {
		t.Errorf("terminationGracePeriodSeconds %d does not exceed the drain time %v", grace, drain)
	}
}

// checkRulesMount: the rules volume is a whole-directory ConfigMap mount at
// --config (a subPath mount never sees ConfigMap updates), and the rendered
// rule files load.
func checkRulesMount(t *testing.T, m map[string][]obj, pod, c any, args []string) {
	t.Helper()
	cfg, _ := flagValue(args, "config")
	var cmName string
	for _, v := range list(get(pod, "volumes")) {
		if get(v, "name") == "rules" {
			cmName = str(get(v, "configMap", "name"))
			if get(v, "configMap", "items") != nil {
				t.Error("rules volume lists items: new rule files would not appear")
			}
		}
	}
	if cmName == "" {
		t.Fatal("no ConfigMap volume named rules")
	}
	mounted := false
	for _, vm := range list(get(c, "volumeMounts")) {
		if get(vm, "subPath") != nil || get(vm, "subPathExpr") != nil {
			t.Errorf("volumeMount %v uses subPath: mounted files would never update", vm)
		}
		if get(vm, "name") == "rules" {
			mounted = true
			if get(vm, "mountPath") != cfg {
				t.Errorf("rules mounted at %v, but --config=%s", get(vm, "mountPath"), cfg)
			}
		}
	}
	if !mounted {
		t.Error("the rules volume is not mounted")
	}
	if len(m["ConfigMap"]) == 0 {
		if cmName != "my-rules" {
			t.Errorf("no ConfigMap rendered and the volume points at %q", cmName)
		}
		return
	}
	cm := one(t, m, "ConfigMap")
	if nameOf(cm) != cmName {
		t.Errorf("volume points at ConfigMap %q, chart renders %q", cmName, nameOf(cm))
	}
	dir := t.TempDir()
	data, _ := get(cm, "data").(map[string]any)
	for name, content := range data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(str(content)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := descriptors.Load(dir, descriptors.Options{Secret: make([]byte, 32)}); err != nil {
		t.Errorf("the chart's rule files do not load: %v", err)
	}
}

func checkService(t *testing.T, svc obj) {
	t.Helper()
	ports := map[string]any{}
	for _, p := range list(get(svc, "spec", "ports")) {
		ports[str(get(p, "name"))] = p
	}
	grpc := ports["grpc"]
	if get(grpc, "port") != 8081 || get(grpc, "appProtocol") != "grpc" {
		t.Errorf("Service grpc port %v: want 8081 with appProtocol grpc", grpc)
	}
	if get(ports["http-admin"], "port") != 8080 {
		t.Errorf("Service http-admin port %v: want 8080", ports["http-admin"])
	}
}

// checkSecrets: a Secret appears only when the HMAC key was given, and it
// holds exactly that key: the chart has no default or generated secret.
func checkSecrets(t *testing.T, m map[string][]obj, want bool) {
	t.Helper()
	if got := len(m["Secret"]); got != b2i(want) {
		t.Fatalf("%d Secrets rendered, want %d", got, b2i(want))
	}
	for _, s := range m["Secret"] {
		data, _ := get(s, "data").(map[string]any)
		if len(data) != 1 {
			t.Errorf("Secret %s has %d keys, want 1", nameOf(s), len(data))
		}
		for k, v := range data {
			b, err := base64.StdEncoding.DecodeString(str(v))
			if err != nil || string(b) != hmacValue {
				t.Errorf("Secret %s key %s holds %q, not the key the test passed", nameOf(s), k, b)
			}
		}
		if get(s, "stringData") != nil {
			t.Errorf("Secret %s has stringData", nameOf(s))
		}
	}
}

// checkSecretVolumes: the HMAC and Redis secrets are mounted read-only from
// the right Secrets.
func checkSecretVolumes(t *testing.T, pod, c any, hmacSecret string, extra map[string]string) {
	t.Helper()
	want := map[string]string{}
	for k, v := range extra {
		want[k] = v
	}
	if hmacSecret != "" {
		want["hmac"] = hmacSecret
	}
	got := map[string]string{}
	for _, v := range list(get(pod, "volumes")) {
		if s := get(v, "secret", "secretName"); s != nil {
			got[str(get(v, "name"))] = str(s)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("secret volumes %v, want %v", got, want)
	}
	for _, vm := range list(get(c, "volumeMounts")) {
		if get(vm, "readOnly") != true {
			t.Errorf("volumeMount %v is not readOnly", get(vm, "name"))
		}
	}
}

// TestRenderFails: values that would deploy a broken or silently wrong
// service stop the render with a message saying what to set.
func TestRenderFails(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"redis without an HMAC key", redisBase, "needs an HMAC secret"},
		{"redis without an address", cat([]string{"--set", "store=redis"}, withHMAC), "needs redis.addr"},
		{"sentinel without a master", cat(redisBase, withHMAC, []string{"--set", "redis.mode=sentinel"}), "redis.sentinelMaster"},
		{"standalone with two addresses", cat(redisBase, withHMAC, []string{"--set", "redis.mode=standalone"}), "standalone takes exactly one address"},
		{"short HMAC key", cat(redisBase, []string{"--set", "hmac.secret=short"}), "at least 16"},
		{"memory with replicas", []string{"--set", "replicaCount=3"}, "counts per pod"},
		{"memory with an HPA", []string{"--set", "autoscaling.enabled=true"}, "counts per pod"},
		{"grace shorter than drain", []string{"--set", "terminationGracePeriodSeconds=10"}, "must exceed"},
		{"one port for gRPC and admin", []string{"--set", "grpc.port=8080"}, "need different ports"},
		{"xds without a server", []string{"--set", "xds.enabled=true"}, "xds.server"},
		{"TLS CA without TLS", cat(redisBase, withHMAC, []string{"--set", "redis.tls.ca.existingSecret=ca"}), "redis.tls.enabled is false"},
		{"audit to Redis on the memory store", []string{"--set", "audit.sink=redis"}, "set store: redis"},
		{"a Redis-shared HMAC key and an HMAC secret", cat(redisBase, withHMAC, []string{"--set", "hmac.redisKey=k"}), "set one"},
		{"a Redis-shared HMAC key on the memory store", []string{"--set", "hmac.redisKey=k"}, "hmac.redisKey needs store: redis"},
		{"an admin token value that is not a token file", []string{"--set", "admin.token.value=just-a-token-0123456789"}, "one name:token line per token"},
		{"an admin token without fsGroup", []string{"--set", "admin.token.existingSecret=t", "--set", "podSecurityContext.fsGroup=null"}, "admin.token needs podSecurityContext.fsGroup"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"template", "rls", deploytest.ChartDir(t)}, tc.args...)...)
			if err == nil {
				t.Fatalf("helm template %v rendered; want a failure mentioning %q", tc.args, tc.want)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("helm template %v failed without %q:\n%s", tc.args, tc.want, out)
			}
		})
	}
	// Per-pod limits are allowed when asked for by name.
	render(t, "--set", "replicaCount=3", "--set", "memory.allowPerPodLimits=true")
}

// TestRulesDoNotRollPods: editing rules leaves the pod template unchanged (the
// service reloads the mounted directory), while a new HMAC key rolls the pods.
func TestRulesDoNotRollPods(t *testing.T) {
	template := func(args ...string) string {
		t.Helper()
		dep := one(t, render(t, args...), "Deployment")
		b, err := yaml.Marshal(get(dep, "spec", "template"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	base := cat(redisBase, withHMAC)
	a := template(base...)
	b := template(cat(base, []string{"--set-string", "rules.files.default\\.yaml=domain: other\ndescriptors: []\n"})...)
	if a != b {
		t.Errorf("changing rules.files changed the pod template, so pods would restart:\n%s\n---\n%s", a, b)
	}
	c := template(cat(redisBase, []string{"--set-string", "hmac.secret=another-test-key-0123456789"})...)
	if a == c {
		t.Error("changing hmac.secret left the pod template unchanged: pods would keep the old key")
	}
}

// TestValuesDocumented: every key in values.yaml has a comment (on its line
// or the line above), as the issue asks, and no secret has a default.
func TestValuesDocumented(t *testing.T) {
	b := chartFile(t, "values.yaml")
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := strings.TrimPrefix(path+"."+k.Value, ".")
			// Nested maps under a documented parent whose content is data
			// (rule files, security contexts, resources) need no comment each.
			documented := k.HeadComment != "" || k.LineComment != "" || v.LineComment != ""
			if !documented && !underData(p) {
				t.Errorf("values.yaml: %s (line %d) has no comment", p, k.Line)
			}
			if !underData(p) {
				walk(v, p)
			}
		}
	}
	walk(doc.Content[0], "")

	vals := deploytest.ChartValues(t)
	if s := get(vals, "hmac", "secret"); s != "" {
		t.Errorf("values.yaml hmac.secret defaults to %q; it must be empty", s)
	}
	if s := get(vals, "hmac", "existingSecret"); s != "" {
		t.Errorf("values.yaml hmac.existingSecret defaults to %q; it must be empty", s)
	}
}

// underData: keys whose children are data documented as a whole.
func underData(path string) bool {
	for _, p := range []string{"rules.files.", "resources.", "podSecurityContext.", "securityContext.", "rulesCheck.resources."} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// Guard against the test silently passing on an empty chart directory.
func TestChartFiles(t *testing.T) {
	for _, f := range []string{"Chart.yaml", "values.yaml", "templates/NOTES.txt", "templates/_helpers.tpl",
		"templates/deployment.yaml", "templates/service.yaml", "templates/configmap.yaml", "templates/secret.yaml",
		"templates/hpa.yaml", "templates/pdb.yaml", "templates/servicemonitor.yaml", "templates/serviceaccount.yaml",
		"templates/networkpolicy.yaml", "templates/rules-check.yaml", "values.schema.json", "README.md", "README.md.gotmpl"} {
		if _, err := os.Stat(filepath.Join(deploytest.ChartDir(t), f)); err != nil {
			t.Error(err)
		}
	}
	out, err := runHelm(t, "show", "chart", deploytest.ChartDir(t))
	if err != nil {
		t.Fatalf("helm show chart: %v\n%s", err, out)
	}
	var meta struct {
		APIVersion string `yaml:"apiVersion"`
		Name       string `yaml:"name"`
		Version    string `yaml:"version"`
	}
	if err := yaml.Unmarshal([]byte(out), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.APIVersion != "v2" || meta.Name != "envoy-rls" || meta.Version == "" {
		t.Errorf("Chart.yaml: %+v", meta)
	}
	if _, err := strconv.Atoi(strings.Split(meta.Version, ".")[0]); err != nil {
		t.Errorf("chart version %q is not semver", meta.Version)
	}
}

// TestGoMemLimit: with a memory limit the container gets GOMEMLIMIT from it
// through the downward API, and the store bound is left to the binary
// (automatic, sized from GOMEMLIMIT) unless memory.maxEntries is set.
func TestGoMemLimit(t *testing.T) {
	container := func(args ...string) any {
		t.Helper()
		dep := one(t, render(t, args...), "Deployment")
		return list(get(dep, "spec", "template", "spec", "containers"))[0]
	}
	envVars := func(c any) map[string]any {
		out := map[string]any{}
		for _, e := range list(get(c, "env")) {
			out[str(get(e, "name"))] = e
		}
		return out
	}

	c := container()
	ref := get(envVars(c)["GOMEMLIMIT"], "valueFrom", "resourceFieldRef")
	if get(ref, "containerName") != "envoy-rls" || get(ref, "resource") != "limits.memory" {
		t.Errorf("GOMEMLIMIT %v: want resourceFieldRef {containerName: envoy-rls, resource: limits.memory}", envVars(c)["GOMEMLIMIT"])
	}
	if got := containerEnv(t, "defaults", c)["GOMEMLIMIT"]; got != strconv.Itoa(256<<20) {
		t.Errorf("GOMEMLIMIT resolves to %q, want the 256Mi limit in bytes", got)
	}
	if v, ok := flagValue(toStrings(list(get(c, "args"))), "memory-max-entries"); ok {
		t.Errorf("--memory-max-entries=%s rendered by default; want the binary's automatic bound", v)
	}

	c = container("--set", "memory.maxEntries=50000", "--set", "resources.limits.memory=1Gi")
	if v, _ := flagValue(toStrings(list(get(c, "args"))), "memory-max-entries"); v != "50000" {
		t.Errorf("memory.maxEntries=50000 rendered --memory-max-entries=%q", v)
	}
	if got := containerEnv(t, "1Gi", c)["GOMEMLIMIT"]; got != strconv.Itoa(1<<30) {
		t.Errorf("GOMEMLIMIT resolves to %q, want the 1Gi limit in bytes", got)
	}

	if _, ok := envVars(container("--set", "resources.limits.memory=null"))["GOMEMLIMIT"]; ok {
		t.Error("GOMEMLIMIT rendered without a memory limit")
	}

	c = container("--set", "extraEnv[0].name=GOMEMLIMIT", "--set", "extraEnv[0].value=200MiB")
	var n int
	for _, e := range list(get(c, "env")) {
		if get(e, "name") == "GOMEMLIMIT" {
			n++
			if get(e, "value") != "200MiB" {
				t.Errorf("GOMEMLIMIT %v: want the one extraEnv sets", e)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d GOMEMLIMIT variables with extraEnv setting it, want 1", n)
	}
}

// valuesFile writes a values file for helm's -f and returns its path.
func valuesFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// annotation returns one metadata annotation of o.
func annotation(o obj, key string) string {
	return str(get(o, "metadata", "annotations", key))
}

// TestRulesCheckHook: the pre-install/pre-upgrade Job checks the rule files
// the release is about to install with the real `envoy-rls validate`, so a
// broken rules edit fails helm instead of a pod.
func TestRulesCheckHook(t *testing.T) {
	bin := binarytest.Build(t)
	// validate runs the Job's command on the data of the ConfigMap it mounts,
	// with the binary built from this tree; it reports whether it passed.
	validate := func(t *testing.T, job obj, cm obj) (string, bool) {
		t.Helper()
		c := list(get(job, "spec", "template", "spec", "containers"))[0]
		args := toStrings(list(get(c, "args")))
		mounts := list(get(c, "volumeMounts"))
		if len(args) != 2 || args[0] != "validate" || len(mounts) != 1 || get(mounts[0], "mountPath") != args[1] {
			t.Fatalf("Job args %q with mounts %v: want [validate <the rules mount>]", args, mounts)
		}
		dir := t.TempDir()
		data, _ := get(cm, "data").(map[string]any)
		if len(data) == 0 {
			t.Fatalf("hook ConfigMap %s has no rule files", nameOf(cm))
		}
		for name, content := range data {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(str(content)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, err := exec.Command(bin, "validate", dir).CombinedOutput()
		return string(out), err == nil
	}

	m := render(t)
	job, hookCM := one(t, m, "hook/Job"), one(t, m, "hook/ConfigMap")
	dep := one(t, m, "Deployment")
	for _, h := range []obj{job, hookCM} {
		if got := annotation(h, "helm.sh/hook"); got != "pre-install,pre-upgrade" {
			t.Errorf("%s %s: helm.sh/hook %q, want pre-install,pre-upgrade", kindOf(h), nameOf(h), got)
		}
		policy := annotation(h, "helm.sh/hook-delete-policy")
		if !strings.Contains(policy, "before-hook-creation") || !strings.Contains(policy, "hook-succeeded") {
			t.Errorf("%s %s: hook-delete-policy %q, want before-hook-creation,hook-succeeded", kindOf(h), nameOf(h), policy)
		}
	}
	cmWeight, _ := strconv.Atoi(annotation(hookCM, "helm.sh/hook-weight"))
	jobWeight, _ := strconv.Atoi(annotation(job, "helm.sh/hook-weight"))
	if cmWeight >= jobWeight {
		t.Errorf("hook weights: ConfigMap %d, Job %d; the ConfigMap must come first", cmWeight, jobWeight)
	}
	if !reflect.DeepEqual(get(hookCM, "data"), get(one(t, m, "ConfigMap"), "data")) {
		t.Error("the hook ConfigMap's rule files differ from the release's")
	}
	vols := list(get(job, "spec", "template", "spec", "volumes"))
	if len(vols) != 1 || get(vols[0], "configMap", "name") != nameOf(hookCM) {
		t.Errorf("Job volumes %v: want the hook ConfigMap %s", vols, nameOf(hookCM))
	}
	jobPod, depPod := get(job, "spec", "template", "spec"), get(dep, "spec", "template", "spec")
	jc, dc := list(get(jobPod, "containers"))[0], list(get(depPod, "containers"))[0]
	if get(jc, "image") != get(dc, "image") {
		t.Errorf("Job image %v, Deployment image %v", get(jc, "image"), get(dc, "image"))
	}
	if !reflect.DeepEqual(get(jc, "securityContext"), get(dc, "securityContext")) || !reflect.DeepEqual(get(jobPod, "securityContext"), get(depPod, "securityContext")) {
		t.Error("the Job's security contexts differ from the Deployment's")
	}
	checkContainerSecurity(t, jc, jobPod)
	if get(jobPod, "restartPolicy") != "Never" || get(job, "spec", "backoffLimit") != 0 {
		t.Errorf("Job restartPolicy %v, backoffLimit %v: want Never and 0 (a failed check is final)", get(jobPod, "restartPolicy"), get(job, "spec", "backoffLimit"))
	}
	// The chart's ServiceAccount does not exist yet before install.
	if get(jobPod, "serviceAccountName") != "default" {
		t.Errorf("Job serviceAccountName %v: want default (the chart's is created after the hook)", get(jobPod, "serviceAccountName"))
	}
	sel, _ := get(dep, "spec", "selector", "matchLabels").(map[string]any)
	labels, _ := get(job, "spec", "template", "metadata", "labels").(map[string]any)
	matches := true
	for k, v := range sel {
		matches = matches && labels[k] == v
	}
	if matches {
		t.Errorf("Job pod labels %v match the Deployment's selector: the Service and PDB would count it", labels)
	}
	if out, ok := validate(t, job, hookCM); !ok {
		t.Errorf("envoy-rls validate refuses the default rules:\n%s", out)
	}

	// A broken rules edit: the check fails, so helm install/upgrade fails.
	broken := render(t, "--set-string", "rules.files.default\\.yaml=domain: default\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 100\n")
	if out, ok := validate(t, one(t, broken, "hook/Job"), one(t, broken, "hook/ConfigMap")); ok {
		t.Errorf("envoy-rls validate passed a rule with unit fortnight:\n%s", out)
	} else if !strings.Contains(out, "fortnight") {
		t.Errorf("envoy-rls validate failed without naming the bad unit:\n%s", out)
	}

	// An existing ConfigMap is checked as it is.
	m = render(t, "--set", "rules.existingConfigMap=my-rules", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=rls-sa")
	if n := len(m["hook/ConfigMap"]); n != 0 {
		t.Errorf("%d hook ConfigMaps with rules.existingConfigMap, want 0", n)
	}
	job = one(t, m, "hook/Job")
	if v := list(get(job, "spec", "template", "spec", "volumes")); len(v) != 1 || get(v[0], "configMap", "name") != "my-rules" {
		t.Errorf("Job volumes %v: want ConfigMap my-rules", v)
	}
	if sa := get(job, "spec", "template", "spec", "serviceAccountName"); sa != "rls-sa" {
		t.Errorf("Job serviceAccountName %v, want the existing rls-sa", sa)
	}

	m = render(t, "--set", "rulesCheck.enabled=false")
	if len(m["hook/Job"])+len(m["hook/ConfigMap"]) != 0 {
		t.Error("rulesCheck.enabled=false still renders the hook")
	}
}

// checkContainerSecurity: the restricted security context every container
// of the chart runs with.
func checkContainerSecurity(t *testing.T, c, pod any) {
	t.Helper()
	name := str(get(c, "name"))
	sc, psc := get(c, "securityContext"), get(pod, "securityContext")
	if get(sc, "runAsNonRoot") != true && get(psc, "runAsNonRoot") != true {
		t.Errorf("container %s: runAsNonRoot not set", name)
	}
	if get(sc, "readOnlyRootFilesystem") != true {
		t.Errorf("container %s: readOnlyRootFilesystem not true", name)
	}
	if get(sc, "allowPrivilegeEscalation") != false {
		t.Errorf("container %s: allowPrivilegeEscalation not false", name)
	}
	if !reflect.DeepEqual(get(sc, "capabilities", "drop"), []any{"ALL"}) || get(sc, "capabilities", "add") != nil {
		t.Errorf("container %s: capabilities %v, want drop [ALL] and no add", name, get(sc, "capabilities"))
	}
	if get(sc, "seccompProfile", "type") != "RuntimeDefault" && get(psc, "seccompProfile", "type") != "RuntimeDefault" {
		t.Errorf("container %s: seccompProfile not RuntimeDefault", name)
	}
}

// TestStartupProbe: on by default on /healthz (never on /readyz: the
// process starts while Redis is unreachable), and can be turned off.
func TestStartupProbe(t *testing.T) {
	c := list(get(one(t, render(t), "Deployment"), "spec", "template", "spec", "containers"))[0]
	p := get(c, "startupProbe")
	if get(p, "httpGet", "path") != "/healthz" || get(p, "httpGet", "port") != "http-admin" || get(p, "failureThreshold") != 30 || get(p, "periodSeconds") != 2 {
		t.Errorf("startupProbe %v: want /healthz on http-admin, every 2s, 30 failures", p)
	}
	c = list(get(one(t, render(t, "--set", "startupProbe.enabled=false"), "Deployment"), "spec", "template", "spec", "containers"))[0]
	if get(c, "startupProbe") != nil {
		t.Error("startupProbe.enabled=false still renders a startup probe")
	}
}

// TestExtraVolumes: extraVolumes and extraVolumeMounts reach the pod next to
// the chart's own volumes.
func TestExtraVolumes(t *testing.T) {
	f := valuesFile(t, `
extraVolumes:
  - name: ca
    secret:
      secretName: corp-ca
extraVolumeMounts:
  - name: ca
    mountPath: /etc/corp-ca
    readOnly: true
extraEnv:
  - name: ENVOY_RLS_LOG_LEVEL
    value: debug
`)
	pod := get(one(t, render(t, "-f", f), "Deployment"), "spec", "template", "spec")
	c := list(get(pod, "containers"))[0]
	var vol, mount, rules any
	for _, v := range list(get(pod, "volumes")) {
		if get(v, "name") == "ca" {
			vol = v
		}
	}
	for _, vm := range list(get(c, "volumeMounts")) {
		switch get(vm, "name") {
		case "ca":
			mount = vm
		case "rules":
			rules = vm
		}
	}
	if get(vol, "secret", "secretName") != "corp-ca" || get(mount, "mountPath") != "/etc/corp-ca" || rules == nil {
		t.Errorf("volume %v, mount %v, rules mount %v: want the extra Secret volume mounted at /etc/corp-ca next to the rules", vol, mount, rules)
	}
	env := containerEnv(t, "extraEnv", c)
	if env["ENVOY_RLS_LOG_LEVEL"] != "debug" || env["GOMEMLIMIT"] == "" {
		t.Errorf("env %v: want extraEnv's ENVOY_RLS_LOG_LEVEL next to GOMEMLIMIT", env)
	}
}

// TestNetworkPolicy: off by default; when on, it selects the pods and admits
// the gRPC and admin ports from the configured peers, and with egress on,
// only DNS and Redis.
func TestNetworkPolicy(t *testing.T) {
	if n := len(render(t)["NetworkPolicy"]); n != 0 {
		t.Fatalf("%d NetworkPolicies by default, want 0", n)
	}
	f := valuesFile(t, `
networkPolicy:
  enabled: true
  grpcFrom:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: istio-ingress
  adminFrom:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: monitoring
  egress:
    enabled: true
    redisTo:
      - podSelector:
          matchLabels:
            app: redis
    redisPorts: [6379, 26379]
`)
	m := render(t, cat(redisBase, withHMAC, []string{"-f", f})...)
	np, dep := one(t, m, "NetworkPolicy"), one(t, m, "Deployment")
	if !reflect.DeepEqual(get(np, "spec", "podSelector", "matchLabels"), get(dep, "spec", "selector", "matchLabels")) {
		t.Errorf("NetworkPolicy podSelector %v does not select the Deployment's pods", get(np, "spec", "podSelector"))
	}
	from := map[string]string{}
	for _, rule := range list(get(np, "spec", "ingress")) {
		ports := list(get(rule, "ports"))
		if len(ports) != 1 {
			t.Fatalf("ingress rule %v: want one port", rule)
		}
		peers := list(get(rule, "from"))
		if len(peers) != 1 {
			t.Fatalf("ingress rule %v: want one peer", rule)
		}
		from[str(get(ports[0], "port"))] = str(get(peers[0], "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name"))
	}
	if want := map[string]string{"grpc": "istio-ingress", "http-admin": "monitoring"}; !reflect.DeepEqual(from, want) {
		t.Errorf("ingress port -> namespace %v, want %v", from, want)
	}
	if !reflect.DeepEqual(get(np, "spec", "policyTypes"), []any{"Ingress", "Egress"}) {
		t.Errorf("policyTypes %v, want Ingress and Egress", get(np, "spec", "policyTypes"))
	}
	egressPorts := map[string]bool{}
	for _, rule := range list(get(np, "spec", "egress")) {
		for _, p := range list(get(rule, "ports")) {
			egressPorts[fmt.Sprintf("%v/%v", get(p, "port"), get(p, "protocol"))] = true
			if get(p, "port") == 6379 && get(list(get(rule, "to"))[0], "podSelector", "matchLabels", "app") != "redis" {
				t.Errorf("Redis egress rule %v: want to the app=redis pods", rule)
			}
		}
	}
	for _, want := range []string{"53/UDP", "53/TCP", "6379/TCP", "26379/TCP"} {
		if !egressPorts[want] {
			t.Errorf("egress ports %v: missing %s", egressPorts, want)
		}
	}
	// A statsd sink is admitted on its port and protocol.
	np = one(t, render(t, "--set", "statsd.addr=statsd-exporter:9125", "--set", "statsd.protocol=udp",
		"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.enabled=true"), "NetworkPolicy")
	found := false
	for _, rule := range list(get(np, "spec", "egress")) {
		for _, p := range list(get(rule, "ports")) {
			if fmt.Sprint(get(p, "port")) == "9125" && str(get(p, "protocol")) == "UDP" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("egress does not admit the statsd port 9125/UDP: %v", get(np, "spec", "egress"))
	}

	// Ingress only, open sources: both ports admitted from anywhere.
	np = one(t, render(t, "--set", "networkPolicy.enabled=true"), "NetworkPolicy")
	if !reflect.DeepEqual(get(np, "spec", "policyTypes"), []any{"Ingress"}) || len(list(get(np, "spec", "ingress"))) != 2 {
		t.Errorf("NetworkPolicy %v: want Ingress only, two port rules", get(np, "spec"))
	}
	for _, rule := range list(get(np, "spec", "ingress")) {
		if get(rule, "from") != nil {
			t.Errorf("ingress rule %v restricts sources although none were listed", rule)
		}
	}
}

// renderNotes renders templates/NOTES.txt (which helm template skips) from
// a copy of the chart in which a template renders it into a manifest.
func renderNotes(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "envoy-rls")
	if err := os.CopyFS(dir, os.DirFS(deploytest.ChartDir(t))); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "templates", "NOTES.txt"), filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	wrapper := "kind: Notes\nnotes: {{ tpl (.Files.Get \"notes.txt\") . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes-test.yaml"), []byte(wrapper), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runHelm(t, append([]string{"template", "rls", dir, "--namespace", "rl", "--show-only", "templates/notes-test.yaml"}, args...)...)
	if err != nil {
		t.Fatalf("rendering NOTES.txt %v: %v\n%s", args, err, out)
	}
	var doc struct{ Notes string }
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil || doc.Notes == "" {
		t.Fatalf("rendering NOTES.txt %v: %v\n%s", args, err, out)
	}
	return doc.Notes
}

// TestNotes: the notes printed after install say where Envoy must point and
// warn about per-pod counting with the memory store.
func TestNotes(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		want, not []string
	}{
		{
			name: "memory defaults",
			want: []string{"rls-envoy-rls.rl.svc.cluster.local:8081", "outbound|8081||rls-envoy-rls.rl.svc.cluster.local",
				"port-forward svc/rls-envoy-rls 8080:8080", "WARNING: store: memory counts per pod", "logs job/rls-envoy-rls-rules-check"},
			not: []string{"up to\n(pods x limit)", "no resources.limits.memory", "is not the chart's appVersion"},
		},
		{
			name: "memory with per-pod limits and no memory limit",
			args: []string{"--set", "replicaCount=3", "--set", "memory.allowPerPodLimits=true", "--set", "resources.limits.memory=null"},
			want: []string{"(pods x limit)", "no resources.limits.memory"},
		},
		{
			name: "no memory limit, GOMEMLIMIT from extraEnv",
			args: []string{"--set", "resources.limits.memory=null", "--set", "extraEnv[0].name=GOMEMLIMIT", "--set-string", "extraEnv[0].value=200MiB"},
			not:  []string{"no resources.limits.memory"},
		},
		{
			name: "redis with a NetworkPolicy",
			args: cat(redisBase, withHMAC, []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.enabled=true", "--set", "rulesCheck.enabled=false"}),
			want: []string{"store:    redis (redis auto at redis-0.redis:6379,redis-1.redis:6379)", "egress only to DNS and Redis (ports 6379)"},
			not:  []string{"WARNING", "rules-check"},
		},
		{
			name: "an image tag other than appVersion",
			args: []string{"--set", "image.tag=0.0.1"},
			want: []string{"WARNING: image.tag 0.0.1 is not the chart's appVersion " + deploytest.Chart(t).AppVersion, "restart in a loop"},
		},
		{
			name: "admin API off",
			want: []string{"The admin API (/v1/...) and the console (/ui) are off (404): set\nadmin.token.existingSecret"},
			not:  []string{"explain --admin"},
		},
		{
			name: "admin API on",
			args: []string{"--set", "admin.token.existingSecret=rls-admin-token"},
			want: []string{"Secret\nrls-admin-token (key admin-tokens)", "port-forward deploy/rls-envoy-rls 8080:8080", "envoy-rls explain --admin http://127.0.0.1:8080 --token-file", "http://127.0.0.1:8080/ui"},
			not:  []string{"are off"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			notes := renderNotes(t, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES lack %q:\n%s", w, notes)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(notes, n) {
					t.Errorf("NOTES contain %q:\n%s", n, notes)
				}
			}
		})
	}
}

// helmDocsBin is helm-docs at the version scripts/ensure-tool.sh pins (the
// table layout depends on it).
func helmDocsBin(t *testing.T) string { return deploytest.Tool(t, "helm-docs") }

// TestChartReadmeCurrent: the chart README is what helm-docs makes from
// README.md.gotmpl and the values' comments, so its values table cannot
// drift from values.yaml. `make chart-docs` regenerates it.
func TestChartReadmeCurrent(t *testing.T) {
	bin := helmDocsBin(t)
	dir := filepath.Join(t.TempDir(), "envoy-rls")
	if err := os.CopyFS(dir, os.DirFS(deploytest.ChartDir(t))); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--chart-search-root", dir, "--log-level", "warning")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm-docs: %v\n%s", err, out)
	}
	want, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := chartFile(t, "README.md")
	if !bytes.Equal(got, want) {
		t.Errorf("deploy/helm/envoy-rls/README.md is not what helm-docs generates from values.yaml and README.md.gotmpl: run `make chart-docs`\n--- generated ---\n%s", want)
	}
	// Every value is in the table, so a key helm-docs skipped shows here.
	for _, key := range []string{"redis.timeout", "redis.poolSize", "memory.maxEntries", "rulesCheck.enabled", "networkPolicy.grpcFrom", "startupProbe.enabled", "extraVolumes"} {
		if !bytes.Contains(got, []byte("| "+key+" |")) {
			t.Errorf("the chart README's values table has no row for %s", key)
		}
	}
}

// TestTracingEnv: the OTEL_* variables of the values' extraEnv example
// reach the container, and the binary accepts them (render checks the
// args and environment with app.CheckServeArgs); a sampler it does not
// know would stop it at start.
func TestTracingEnv(t *testing.T) {
	values := valuesFile(t, `extraEnv:
  - name: OTEL_EXPORTER_OTLP_ENDPOINT
    value: http://otel-collector:4318
  - name: OTEL_TRACES_SAMPLER
    value: parentbased_traceidratio
  - name: OTEL_TRACES_SAMPLER_ARG
    value: "0.1"
`)
	dep := one(t, render(t, "-f", values), "Deployment")
	c := list(get(dep, "spec", "template", "spec", "containers"))[0]
	env := containerEnv(t, "tracing", c)
	if env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://otel-collector:4318" || env["OTEL_TRACES_SAMPLER_ARG"] != "0.1" {
		t.Fatalf("container env %v: want the OTEL_* variables of extraEnv", env)
	}
	args := toStrings(list(get(c, "args")))
	env["OTEL_TRACES_SAMPLER"] = "sometimes"
	err := app.CheckServeArgs(args[1:], func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), `OTEL_TRACES_SAMPLER="sometimes"`) {
		t.Fatalf("CheckServeArgs with OTEL_TRACES_SAMPLER=sometimes: %v, want it refused", err)
	}
}

// TestRuleSetLimits: rules.maxBytes and rules.maxDescriptors reach the
// pods and the rules-check Job alike (so the check accepts what the pods
// load); 0, the default, leaves the binary's defaults.
func TestRuleSetLimits(t *testing.T) {
	args := func(m map[string][]obj, kind string) []string {
		t.Helper()
		return toStrings(list(get(list(get(one(t, m, kind), "spec", "template", "spec", "containers"))[0], "args")))
	}
	m := render(t)
	for _, kind := range []string{"Deployment", "hook/Job"} {
		for _, flag := range []string{"config-max-bytes", "config-max-descriptors"} {
			if v, ok := flagValue(args(m, kind), flag); ok {
				t.Errorf("%s: --%s=%s rendered by default; want the binary's default", kind, flag, v)
			}
		}
	}
	m = render(t, "--set", "rules.maxBytes=1000000", "--set", "rules.maxDescriptors=500")
	for _, kind := range []string{"Deployment", "hook/Job"} {
		a := args(m, kind)
		if v, _ := flagValue(a, "config-max-bytes"); v != "1000000" {
			t.Errorf("%s: --config-max-bytes=%q, want 1000000 (args %q)", kind, v, a)
		}
		if v, _ := flagValue(a, "config-max-descriptors"); v != "500" {
			t.Errorf("%s: --config-max-descriptors=%q, want 500 (args %q)", kind, v, a)
		}
	}
	if a := args(m, "hook/Job"); a[len(a)-1] != "/etc/envoy-rls/rules" {
		t.Errorf("Job args %q: the rule path must come after the flags", a)
	}
}
