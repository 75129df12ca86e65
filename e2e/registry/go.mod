// Wrapper module for a small local OCI registry (see e2e/images/README.md), built
// by e2e/registry/build.sh from go-containerregistry's pkg/registry.

module valkey-operator/e2e/registry

go 1.26.0

require github.com/google/go-containerregistry v0.22.1
