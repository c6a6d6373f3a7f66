// Package compose holds the tests of the docker-compose demo in
// deploy/compose: docker-compose.yaml, envoy.yaml (checked against
// go-control-plane's types and validators), prometheus.yml and rules/; and
// of the Docker quick start (docs/deploy.md) against the Dockerfile and the chart's
// image. (The docs' Kubernetes commands are e2e/deploy/helm's tests.) No
// Docker engine is needed for them; the demo's decisions are replayed on the
// real envoy-rls binary. TestComposeUp, which starts the demo itself on
// testcontainers' compose module, is built with -tags containers (make test
// adds it when a container engine answers) and skips without an engine.
package compose
