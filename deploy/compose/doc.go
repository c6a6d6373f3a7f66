// Package compose holds the tests of the docker-compose demo in this
// directory: docker-compose.yaml, envoy.yaml (checked against
// go-control-plane's types and validators) and rules/. No Docker engine is
// needed; the demo's decisions are replayed on the real envoy-rls binary.
package compose
