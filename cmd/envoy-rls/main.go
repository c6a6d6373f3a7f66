// Command envoy-rls is a global rate-limit service for Envoy and Istio. See
// internal/app for the commands and flags, and docs/cli.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	// The IANA time zone database, embedded in the binary, used by
	// calendar windows (time_zone) when the machine has none (a scratch
	// image).
	_ "time/tzdata"

	"github.com/envoy-rls/envoy-rls/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := app.RunAs(ctx, os.Args[0], os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		// ErrFailed has been reported already; anything else is printed
		// here, one line per problem.
		if !errors.Is(err, app.ErrFailed) {
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintln(os.Stderr, "envoy-rls:", line)
			}
		}
		os.Exit(1)
	}
}
