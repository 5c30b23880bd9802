package hub

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/certhub/certhub/internal/inventory"
)

// A hub that drops connections (restarting) is waited for, and so is one
// that answers but does not serve certhub.io/v1alpha1 yet (after a restart
// its CRDs come a moment later); one that answers with an error fails at once.
func TestWaitForHub(t *testing.T) {
	var calls, groupAsked atomic.Int32
	restarting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/apis/certhub.io/v1alpha1" {
			if groupAsked.Add(1) <= 2 {
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"certhub.io/v1alpha1","resources":[{"name":"acmeorders","namespaced":true,"kind":"ACMEOrder","verbs":["get","list"]}]}`))
			return
		}
		if calls.Add(1) <= 2 {
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("the test server cannot hijack connections")
				return
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close() // what a client sees from a server going down
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	defer restarting.Close()
	if err := waitForHub(context.Background(), &rest.Config{Host: restarting.URL}); err != nil {
		t.Fatalf("waitForHub: %v", err)
	}
	if n, g := calls.Load(), groupAsked.Load(); n != 5 || g != 3 {
		t.Errorf("hub asked for its version %d times and for certhub.io/v1alpha1 %d times, want 5 and 3 (two dropped connections, then twice not served yet, then served)", n, g)
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`, http.StatusUnauthorized)
	}))
	defer refusing.Close()
	err := waitForHub(context.Background(), &rest.Config{Host: refusing.URL})
	if err == nil || !strings.Contains(err.Error(), "refused certhub") {
		t.Errorf("waitForHub against a 401 = %v, want a refusal", err)
	}
}

// The hub caches only cluster Secrets in Argo CD's namespace.
func TestHubSecretCache(t *testing.T) {
	o := NewOptions()
	o.Namespace, o.ClusterSecretNamespace = "certhub", "argocd"
	c := hubSecretCache(o)
	if sel := c["argocd"].LabelSelector; sel == nil || sel.String() != "argocd.argoproj.io/secret-type=cluster" {
		t.Errorf("argocd namespace selector %v, want the cluster Secret label", sel)
	}
	if sel := c["certhub"].LabelSelector; sel != nil {
		t.Errorf("hub namespace selector %v, want none (CA key pairs carry no label)", sel)
	}
	o.ClusterSecretNamespace = "certhub"
	if c := hubSecretCache(o); len(c) != 1 || c["certhub"].LabelSelector != nil {
		t.Errorf("one namespace for both: %+v, want it cached whole", c)
	}
}

// Each downstream client may carry the whole --issuance-rate (one cluster can
// have all the work), so its limit grows with the rate, never below
// inventory's default.
func TestDownstreamQPS(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		qps   float32
		burst int
	}{
		{rate: 0, qps: inventory.DefaultQPS, burst: inventory.DefaultBurst},
		{rate: 5, qps: inventory.DefaultQPS, burst: inventory.DefaultBurst},
		{rate: 20, qps: 80, burst: 160},
		{rate: 100, qps: 400, burst: 800},
	} {
		if qps, burst := downstreamQPS(tc.rate); qps != tc.qps || burst != tc.burst {
			t.Errorf("downstreamQPS(%v) = %v/%d, want %v/%d", tc.rate, qps, burst, tc.qps, tc.burst)
		}
	}
}
