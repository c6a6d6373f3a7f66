package deploytest

import (
	"fmt"
	"strings"
)

// IsHelmInstall tells a helm install or helm upgrade command, even one
// whose words could not all be split.
func IsHelmInstall(c DocCommand) bool {
	if len(c.Words) >= 2 && c.Words[0] == "helm" {
		return c.Words[1] == "install" || c.Words[1] == "upgrade"
	}
	return strings.HasPrefix(c.Text, "helm install ") || strings.HasPrefix(c.Text, "helm upgrade ")
}

// HelmCommand is a documented `helm install|upgrade [flags] NAME CHART
// [flags]`, read flag by flag.
type HelmCommand struct {
	DocCommand
	Verb            string // install or upgrade
	Release, Chart  string
	Namespace       string // -n, --namespace
	CreateNamespace bool
	Reuse           bool              // starts from the release's earlier values
	Flags           []string          // the value flags helm template takes, in order
	Set             map[string]string // --set, --set-string, --set-literal, --set-json: key -> value
	SetFile         map[string]string // --set-file: key -> path
	ValuesFiles     []string          // -f, --values
}

// Flags of helm install/upgrade that carry a value, kept for helm template.
var keptValueFlags = map[string]bool{
	"--set": true, "--set-string": true, "--set-file": true, "--set-json": true, "--set-literal": true,
	"-f": true, "--values": true, "-n": true, "--namespace": true, "--kube-version": true,
}

// Flags with a value that only matter to a live install.
var droppedValueFlags = map[string]bool{
	"--version": true, "--timeout": true, "--description": true, "--repo": true,
}

// Boolean flags that do not change what is rendered.
var droppedBoolFlags = map[string]bool{
	"--create-namespace": true, "--wait": true, "--wait-for-jobs": true, "--atomic": true, "--install": true,
	"-i": true, "--debug": true, "--reuse-values": true, "--reset-then-reuse-values": true, "--cleanup-on-fail": true,
	"--dry-run": true, "--devel": true, "--force": true,
}

// ParseHelm reads a documented helm install or upgrade command. A flag the
// tables above do not know is an error: the test must be taught whether it
// changes the render. A command with an Err is an error too.
func ParseHelm(c DocCommand) (HelmCommand, error) {

	h := HelmCommand{DocCommand: c, Set: map[string]string{}, SetFile: map[string]string{}}
	if c.Err != nil {
		return h, fmt.Errorf("%s: %w", c, c.Err)
	}
	if !IsHelmInstall(c) {
		return h, fmt.Errorf("%s: not a helm install or upgrade", c)
	}
	h.Verb = c.Words[1]
	var pos []string
	w := c.Words[2:]
	for i := 0; i < len(w); i++ {
		a := w[i]
		if !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		flag, val, hasVal := strings.Cut(a, "=")
		switch {
		case keptValueFlags[flag] || droppedValueFlags[flag]:
			if !hasVal {
				if i+1 >= len(w) {
					return h, fmt.Errorf("%s: %s has no value", c, flag)
				}
				i++
				val = w[i]
			}
			if !keptValueFlags[flag] {
				continue
			}
			h.Flags = append(h.Flags, flag, val)
			k, v, _ := strings.Cut(val, "=")
			switch flag {
			case "--set", "--set-string", "--set-literal", "--set-json":
				h.Set[k] = v
			case "--set-file":
				h.SetFile[k] = v
			case "-f", "--values":
				h.ValuesFiles = append(h.ValuesFiles, val)
			case "-n", "--namespace":
				h.Namespace = val
			}
		case droppedBoolFlags[flag]:
			switch flag {
			case "--create-namespace":
				h.CreateNamespace = true
			case "--reuse-values", "--reset-then-reuse-values":
				h.Reuse = true
			}
		default:
			return h, fmt.Errorf("%s: flag %s is unknown to the docs test; teach it whether the flag changes the render", c, flag)
		}
	}
	if len(pos) != 2 {
		return h, fmt.Errorf("%s: want a release name and a chart, got %q", c, pos)
	}
	h.Release, h.Chart = pos[0], pos[1]
	return h, nil
}
