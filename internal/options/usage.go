package options

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ServeUsage heads the help of the serve flags.
const ServeUsage = `Usage: envoy-rls serve --config PATH [flags]

Serves Envoy's RateLimitService over gRPC (--grpc-addr) and the admin HTTP
API (--admin-addr) until SIGTERM or SIGINT.

Every flag also reads the environment variable shown with it; a flag on the
command line wins over its variable, and an empty variable counts as unset.
The HMAC secret itself can be given as ` + SecretEnv + `.

Flags:
`

// HelpWidth is the column help text wraps at.
const HelpWidth = 80

// PrintUsage writes header, then every flag of fs in name order: its
// double-dash spelling with a placeholder for its value, its environment
// variable and default, and its description wrapped at HelpWidth.
func PrintUsage(w io.Writer, header string, fs *flag.FlagSet) {
	var b strings.Builder
	b.WriteString(header)
	fs.VisitAll(func(f *flag.Flag) {
		b.WriteString("  --" + f.Name)
		if p := placeholder(f); p != "" {
			b.WriteString(" " + p)
		}
		b.WriteString("\n")
		wrap(&b, f.Usage, "      ")
		meta := EnvName(f.Name)
		if f.DefValue != "" {
			d := f.DefValue
			if p := placeholder(f); p != "" && p != "N" && p != "DURATION" {
				d = fmt.Sprintf("%q", d)
			}
			meta += ", default " + d
		}
		wrap(&b, "("+meta+")", "      ")
	})
	_, _ = io.WriteString(w, b.String())
}

// placeholders name the values of the flags that take a word. Read only.
var placeholders = map[string]string{
	"store": "STORE", "log-level": "LEVEL", "default-headers": "MODE", "redis-mode": "MODE",
	"redis-username": "NAME", "redis-sentinel-master": "NAME",
	"reference-metrics-path": "PATH", "reference-metrics-mapping": "PATH",
}

// placeholder names a flag's value in help: none for a boolean flag.
func placeholder(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	if p, ok := placeholders[f.Name]; ok {
		return p
	}
	switch {
	case f.Name == "config":
		return "PATH"
	case strings.HasSuffix(f.Name, "-file"), strings.HasPrefix(f.Name, "redis-tls-"):
		return "PATH"
	case f.Name == "redis-addr":
		return "HOST:PORT[,...]"
	case strings.HasSuffix(f.Name, "-addr"):
		return "[HOST]:PORT"
	}
	if _, err := time.ParseDuration(f.DefValue); err == nil && f.DefValue != "0" {
		return "DURATION"
	}
	if _, err := strconv.Atoi(f.DefValue); err == nil {
		return "N"
	}
	return "VALUE"
}

// wrap writes text word-wrapped at HelpWidth, each line indented.
func wrap(b *strings.Builder, text, indent string) {
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > HelpWidth {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
}
