package inventory

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// The downstream mapper never asks for aggregated discovery and fetches
// only the groups it is asked to map; the core/v1 kinds the hub touches are
// mapped without asking (wellKnown).
func TestLeanMapperAsksOnlyForWhatItMaps(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		if strings.Contains(r.Header.Get("Accept"), "apidiscovery") {
			t.Errorf("%s asked for aggregated discovery (Accept %q)", r.URL.Path, r.Header.Get("Accept"))
		}
		var body any
		switch r.URL.Path {
		case "/api":
			body = metav1.APIVersions{Versions: []string{"v1"}}
		case "/apis":
			body = metav1.APIGroupList{Groups: []metav1.APIGroup{
				{Name: "cert-manager.io", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "cert-manager.io/v1", Version: "v1"}},
					PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "cert-manager.io/v1", Version: "v1"}},
				{Name: "networking.k8s.io", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "networking.k8s.io/v1", Version: "v1"}},
					PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "networking.k8s.io/v1", Version: "v1"}},
			}}
		case "/api/v1":
			body = metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "secrets", Kind: "Secret", Namespaced: true}}}
		case "/apis/cert-manager.io/v1":
			body = metav1.APIResourceList{GroupVersion: "cert-manager.io/v1", APIResources: []metav1.APIResource{{Name: "certificates", Kind: "Certificate", Namespaced: true}}}
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := leanMapper(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	for gk, want := range map[schema.GroupKind]string{{Kind: "Secret"}: "secrets", {Group: "cert-manager.io", Kind: "Certificate"}: "certificates"} {
		mp, err := m.RESTMapping(gk)
		if err != nil {
			t.Fatalf("RESTMapping(%v): %v", gk, err)
		}
		if mp.Resource.Resource != want || mp.Scope.Name() != "namespace" {
			t.Errorf("RESTMapping(%v) = %v (%s), want %s, namespaced", gk, mp.Resource, mp.Scope.Name(), want)
		}
	}
	if mp, err := m.RESTMapping(schema.GroupKind{Kind: "Namespace"}, "v1"); err != nil || mp.Scope.Name() != "root" || mp.Resource.Resource != "namespaces" {
		t.Errorf("RESTMapping(Namespace) = %v, %v; want namespaces, cluster-scoped", mp, err)
	}
	// A namespace-scoped registration's cache asks for the scope of the
	// list it fills (controller-runtime's multiNamespaceCache.List).
	for _, gk := range []schema.GroupKind{{Kind: "SecretList"}, {Group: "cert-manager.io", Kind: "CertificateList"}, {Group: "networking.k8s.io", Kind: "IngressList"}} {
		if mp, err := m.RESTMapping(gk, "v1"); err != nil || mp.Scope.Name() != "namespace" {
			t.Errorf("RESTMapping(%v) = %v, %v; want namespaced", gk, mp, err)
		}
	}
	fetched := func(path string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range asked {
			if p == path {
				return true
			}
		}
		return false
	}
	if fetched("/api/v1") || fetched("/apis/cert-manager.io/v1") {
		t.Errorf("discovery fetched for kinds the hub maps itself (all: %v)", asked)
	}
	// Any other core kind is the cluster's to answer.
	if _, err := m.RESTMapping(schema.GroupKind{Kind: "Pod"}); err == nil || !fetched("/api/v1") {
		t.Errorf("RESTMapping(Pod) = %v, /api/v1 fetched %v; want the cluster's answer (not served here)", err, fetched("/api/v1"))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range asked {
		if strings.HasPrefix(p, "/apis/networking.k8s.io") {
			t.Errorf("fetched %s, a group nothing asked to map (all: %v)", p, asked)
		}
	}
}
