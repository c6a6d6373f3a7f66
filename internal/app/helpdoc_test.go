package app

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helpFlag is one flag of `envoy-rls serve --help`: its name and its
// default as printed (empty when the help prints none).
type helpFlag struct{ name, def string }

// serveHelpFlags runs `envoy-rls serve --help` and returns its flags.
func serveHelpFlags(t *testing.T) map[string]helpFlag {
	t.Helper()
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"serve", "--help"}, noEnv, &out, io.Discard); err != nil {
		t.Fatalf("serve --help: %v", err)
	}
	flags := map[string]helpFlag{}
	var last string
	metaRE := regexp.MustCompile(`\(ENVOY_RLS_[A-Z0-9_]+(?:, default (.*))?\)$`)
	for _, line := range strings.Split(out.String(), "\n") {
		if name, ok := strings.CutPrefix(line, "  --"); ok {
			last = strings.Fields(name)[0]
			flags[last] = helpFlag{name: last}
			continue
		}
		if m := metaRE.FindStringSubmatch(strings.TrimSpace(line)); m != nil && last != "" {
			def := m[1]
			if u, err := strconv.Unquote(def); err == nil {
				def = u
			}
			flags[last] = helpFlag{name: last, def: def}
		}
	}
	if len(flags) < 50 {
		t.Fatalf("serve --help: %d flags read, want them all:\n%s", len(flags), out.String())
	}
	return flags
}

// flagDoc holds the table of serve flags.
const flagDoc = "docs/cli.md"

// flagRow is one row of the table of serve flags in docs/cli.md.
type flagRow struct {
	line  int
	flags []string
	def   string
}

// docServeFlags reads the table of serve flags of docs/cli.md: the table
// whose header is "| flag | default | |".
func docServeFlags(t *testing.T) []flagRow {
	t.Helper()
	b, err := os.ReadFile("../../" + flagDoc)
	if err != nil {
		t.Fatal(err)
	}
	flagRE := regexp.MustCompile("`--([a-z0-9-]+)`")
	var rows []flagRow
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| flag | default |"):
			if in || rows != nil {
				t.Fatalf(flagDoc+":%d: a second table of serve flags", i+1)
			}
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			// The cells, between unescaped pipes.
			cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")[1:]
			if len(cells) < 3 {
				t.Fatalf(flagDoc+":%d: want | flags | default | text |: %s", i+1, line)
			}
			row := flagRow{line: i + 1, def: strings.TrimSpace(cells[1])}
			for _, m := range flagRE.FindAllStringSubmatch(cells[0], -1) {
				row.flags = append(row.flags, m[1])
			}
			if len(row.flags) == 0 {
				t.Fatalf(flagDoc+":%d: a row without a flag: %s", i+1, line)
			}
			rows = append(rows, row)
		default:
			in = false
		}
	}
	if len(rows) == 0 {
		t.Fatal(flagDoc + `: no "| flag | default | |" table`)
	}
	return rows
}

// TestServeHelpMatchesCLIDoc: every flag of `envoy-rls serve --help` has a
// row in docs/cli.md's table of serve flags and every flag there is one of
// serve's, once; where the row gives a default, it is the help's.
func TestServeHelpMatchesCLIDoc(t *testing.T) {
	help := serveHelpFlags(t)
	rows := docServeFlags(t)
	seen := map[string]int{}
	for _, row := range rows {
		defs := splitDefaults(row.def, len(row.flags))
		for k, name := range row.flags {
			if at, ok := seen[name]; ok {
				t.Errorf(flagDoc+":%d: --%s is already in the row of line %d", row.line, name, at)
			}
			seen[name] = row.line
			h, ok := help[name]
			if !ok {
				t.Errorf(flagDoc+":%d: --%s is not a flag of envoy-rls serve --help", row.line, name)
				continue
			}
			if defs != nil && !sameDefault(defs[k], h.def) {
				t.Errorf(flagDoc+":%d: --%s: the doc's default is %q, serve --help's %q", row.line, name, defs[k], h.def)
			}
		}
	}
	var missing []string
	for name := range help {
		if _, ok := seen[name]; !ok {
			missing = append(missing, "--"+name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf(flagDoc+"'s table of serve flags lacks %s (from envoy-rls serve --help): add a row each", strings.Join(missing, ", "))
	}
}

// splitDefaults splits a row's default cell into one default per flag: n
// comma-separated items, or one item for them all. It returns nil when the
// cell says something else (then it is not compared).
func splitDefaults(cell string, n int) []string {
	var items []string
	var cur strings.Builder
	inCode, depth := false, 0
	for _, r := range cell {
		switch {
		case r == '`':
			inCode = !inCode
		case r == '(' && !inCode:
			depth++
		case r == ')' && !inCode:
			depth--
		case r == ',' && !inCode && depth == 0:
			items = append(items, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	items = append(items, strings.TrimSpace(cur.String()))
	switch len(items) {
	case n:
		return items
	case 1:
		return slices.Repeat(items, n)
	}
	return nil
}

// codeRE is a default written as code, before any remark in parentheses.
var codeRE = regexp.MustCompile("^`([^`]*)`(?: \\(.*\\))?$")

// sameDefault says whether a documented default says the help's: code is the
// value itself (durations compared as durations); "off", "none", "—" or
// nothing is a default that is unset, false or zero; a remark alone in
// parentheses (e.g. "(required …)") states no value.
func sameDefault(doc, help string) bool {
	if m := codeRE.FindStringSubmatch(doc); m != nil {
		if m[1] == help {
			return true
		}
		a, errA := time.ParseDuration(m[1])
		b, errB := time.ParseDuration(help)
		return errA == nil && errB == nil && a == b
	}
	word, _, _ := strings.Cut(doc, " (")
	switch word {
	case "off", "none", "—", "":
		return help == "" || help == "false" || help == "0" || help == "0s" || help == "off"
	}
	return strings.HasPrefix(doc, "(")
}
