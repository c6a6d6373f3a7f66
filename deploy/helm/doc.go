// Package helm holds the tests of the envoy-rls Helm chart in
// deploy/helm/envoy-rls: helm lint, and helm template with the value sets
// operators use, checked manifest by manifest.
package helm
