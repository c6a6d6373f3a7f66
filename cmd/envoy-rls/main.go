// Command envoy-rls is a global rate-limit service for Envoy and Istio. See
// internal/app for the commands and flags, and README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/envoy-rls/envoy-rls/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := app.Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, app.ErrFailed) {
			fmt.Fprintln(os.Stderr, "envoy-rls:", err)
		}
		os.Exit(1)
	}
}
