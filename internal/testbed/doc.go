// Package testbed starts real control planes — one hub and N downstream
// kube-apiserver + etcd pairs — in the calling process, for tests, benchmarks
// and `certhub-demo`.
//
// Each control plane gets the real cert-manager CRDs (embedded from the
// cert-manager Go module by hack/sync-crds.sh). Register gives a downstream
// cluster a ServiceAccount with certhub's downstream RBAC, mints a token for
// it, and writes an Argo CD cluster Secret for it into the hub, exactly as a
// platform team would commit one to Git. RegisterNamespaced does the same for
// one namespace of a control plane, so many "clusters" can share one API
// server. StopAPIServer/StartAPIServer take a control plane's kube-apiserver
// away and bring it back with the same flags (etcd keeps running), for the
// chaos run.
//
// Binaries come from KUBEBUILDER_ASSETS or, when unset, from the cache that
// hack/ensure-envtest-assets.sh fills for the version in envtest.version (the
// one pin the Makefile reads too). Nothing is downloaded.
//
// Contract: Start returns a running Bed or an error with everything it started
// already stopped; Stop stops every control plane and is safe to call twice.
// It is linked into the certhub binary (for the demo), so it never imports
// "testing": test fixtures, waits and assertions live in test/fixture.
package testbed
