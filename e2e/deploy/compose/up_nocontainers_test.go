//go:build !containers

package compose_test

import "testing"

// TestComposeUp needs the compose module, built only with -tags containers:
// `make test` adds the tag when a container engine answers (docs/testing.md).
func TestComposeUp(t *testing.T) {
	t.Skip("the compose demo test is built with -tags containers, which make test sets when a container engine answers (docs/testing.md)")
}
