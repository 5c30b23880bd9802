package inventory

import (
	"net/http"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	dynamic, err := apiutil.NewDynamicRESTMapper(cfg, &lean)
	if err != nil {
		return nil, err
	}
	return knownMapper{dynamic}, nil
}

// wellKnown maps the kinds the hub reads and writes downstream whose
// resource and scope are the same in every cluster it can serve: core/v1
// Secrets, ConfigMaps, Namespaces and Events, events.k8s.io/v1 Events,
// networking.k8s.io/v1 Ingresses, coordination.k8s.io/v1 Leases (cert-manager's
// leader election, internal/writegate), and cert-manager.io/v1 Certificates
// (the connection probe has listed them). Asking a cluster's discovery for one
// loads its whole group version (all of core/v1: ~50 KiB per cluster,
// P6'). Gateway API kinds are not here: whether a cluster serves them is
// the cluster's to say. Each kind's list kind is mapped too, as client-go's
// discovery mapper does: a namespace-scoped registration's cache asks for
// the scope of the list it fills ("SecretList"), and a miss there loaded
// core/v1 for every such cluster (41.6 MB in a replica owning 2,036 of
// them, the 10,000-cluster heap profile).
var wellKnown = func() *meta.DefaultRESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{corev1.SchemeGroupVersion, eventsv1.SchemeGroupVersion,
		networkingv1.SchemeGroupVersion, cmapi.SchemeGroupVersion, coordinationv1.SchemeGroupVersion})
	for _, gvk := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("Secret"),
		corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		corev1.SchemeGroupVersion.WithKind("Event"),
		eventsv1.SchemeGroupVersion.WithKind("Event"),
		networkingv1.SchemeGroupVersion.WithKind("Ingress"),
		cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind),
		cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateRequestKind),
		coordinationv1.SchemeGroupVersion.WithKind("Lease"),
	} {
		m.Add(gvk, meta.RESTScopeNamespace)
		m.Add(gvk.GroupVersion().WithKind(gvk.Kind+"List"), meta.RESTScopeNamespace)
	}
	m.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	m.Add(corev1.SchemeGroupVersion.WithKind("NamespaceList"), meta.RESTScopeRoot)
	return m
}()

// knownMapper answers for wellKnown's kinds itself and asks the cluster's
// mapper for everything else.
type knownMapper struct{ meta.RESTMapper }

func (m knownMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if mp, err := wellKnown.RESTMapping(gk, versions...); err == nil {
		return mp, nil
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

func (m knownMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	if mps, err := wellKnown.RESTMappings(gk, versions...); err == nil && len(mps) > 0 {
		return mps, nil
	}
	return m.RESTMapper.RESTMappings(gk, versions...)
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
