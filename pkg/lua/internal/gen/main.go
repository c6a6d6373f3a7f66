// Command gen writes pkg/lua's assembled programs: run in pkg/lua (`go
// generate ./pkg/lua`), it assembles every template of src/ with the
// fragments of src/fragments (internal/luagen) and writes each program
// next to the package under the template's name.
package main

import (
	"fmt"
	"os"

	"github.com/envoy-rls/envoy-rls/pkg/lua/internal/luagen"
)

func main() {
	progs, err := luagen.Generate(os.DirFS("src"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for name, text := range progs {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
