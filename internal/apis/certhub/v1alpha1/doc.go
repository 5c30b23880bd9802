// Package v1alpha1 holds certhub's API: the Go types of its custom resources
// (ACMEOrder, IssuancePolicy) in group certhub.io, and every certhub.io/*
// annotation, label and finalizer key it reads or writes (wellknown.go).
//
// It is the one source of the CRDs: `make generate` runs controller-gen on
// this package to write zz_generated.deepcopy.go and the CRD YAML in
// kustomize/base/crds/ (the test bed installs a copy; `make lint` fails when
// either is stale). The package imports only API packages, so any
// controller, command or test can use it.
//
// +kubebuilder:object:generate=true
// +groupName=certhub.io
package v1alpha1
