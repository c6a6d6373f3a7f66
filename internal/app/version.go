package app

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/envoy-rls/envoy-rls/internal/buildinfo"
	"github.com/envoy-rls/envoy-rls/internal/options"
)

// versionJSON is the shape of `envoy-rls version --output json`; the keys
// match the fields of the start-up log line.
type versionJSON struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"go_version"`
	BuildDate string `json:"build_date"`
	Modified  bool   `json:"modified"`
}

// versionCommand prints which build this binary is: as aligned text, or as
// one JSON object with --output json.
func versionCommand(args []string, stdout io.Writer) error {
	return writeVersion(args, buildinfo.Get(), stdout)
}

const versionUsage = `Usage: envoy-rls version [--output text|json]

Prints the version, commit, Go version and build date of this binary.

Flags:
  --output FORMAT
      text (default) or json: one JSON object for scripts
`

func writeVersion(args []string, in buildinfo.Info, stdout io.Writer) error {
	fs := flag.NewFlagSet("envoy-rls version", flag.ContinueOnError)
	output := "text"
	fs.StringVar(&output, "output", output, "output format: text or json")
	// The version command reads no environment variables.
	if _, err := options.Parse(fs, args, func(string) string { return "" }); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, versionUsage)
			return err
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version takes no arguments (got %q): envoy-rls version [--output text|json]", fs.Args())
	}
	switch output {
	case "text":
		_, err := fmt.Fprintf(stdout, "version:    %s\nrevision:   %s\ngo version: %s\nbuild date: %s\nmodified:   %s\n",
			in.Version, in.Revision, in.GoVersion, in.Date, strconv.FormatBool(in.Modified))
		return err
	case "json":
		b, err := json.Marshal(versionJSON{
			Version: in.Version, Revision: in.Revision, GoVersion: in.GoVersion,
			BuildDate: in.Date, Modified: in.Modified,
		})
		if err != nil {
			return fmt.Errorf("encoding the version: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return fmt.Errorf("--output=%q: must be text or json", output)
}
