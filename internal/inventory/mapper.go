package inventory

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// leanMapper is each downstream cluster's RESTMapper: controller-runtime's
// lazy dynamic mapper, but fed legacy (per group) discovery instead of
// aggregated discovery. Against a server that offers aggregated discovery
// the dynamic mapper loads every group and resource of the cluster on the
// first lookup (~300 KiB per cluster with only the built-in APIs and the
// cert-manager CRDs, measured with loadbench -pprof-dir); the hub maps
// only the handful of kinds it touches (Certificates, Secrets, Events,
// Ingresses, Gateways, Namespaces, ConfigMaps), so it asks for the group
// list and then only for those groups' versions: a few more requests per
// connection, a tenth of the memory.
func leanMapper(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
	lean := *hc
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	lean.Transport = legacyDiscovery{next: next}
	return apiutil.NewDynamicRESTMapper(cfg, &lean)
}

// legacyDiscovery asks the discovery roots (/api, /apis) for the legacy
// JSON lists only; client-go's discovery client falls back to them when the
// response is not an aggregated discovery document.
type legacyDiscovery struct{ next http.RoundTripper }

func (t legacyDiscovery) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && (strings.HasSuffix(r.URL.Path, "/api") || strings.HasSuffix(r.URL.Path, "/apis")) {
		r = r.Clone(r.Context())
		r.Header.Set("Accept", "application/json")
	}
	return t.next.RoundTrip(r)
}
