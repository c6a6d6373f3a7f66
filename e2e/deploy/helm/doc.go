// Package helm holds the tests of the envoy-rls Helm chart in
// deploy/helm/envoy-rls: helm lint, and helm template with the value sets
// operators use, checked manifest by manifest; and of the Kubernetes commands
// in the repository's Markdown: every helm install/upgrade renders and the
// binary accepts its args, and the kubectl and helm commands agree with each
// other and the chart (Secrets, namespaces, Service names, ports).
package helm
