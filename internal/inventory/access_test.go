package inventory

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// GrantAccess is idempotent and grants cluster-wide or per-namespace.
func TestGrantAccess(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	for range 2 { // the second run finds everything in place
		if err := GrantAccess(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	cr := &rbacv1.ClusterRole{}
	if err := c.Get(ctx, client.ObjectKey{Name: DownstreamClusterRole}, cr); err != nil || len(cr.Rules) != len(DownstreamRules()) {
		t.Fatalf("ClusterRole: %v %+v", err, cr.Rules)
	}
	if err := GrantAccess(ctx, c, []string{"team-a", "team-b"}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		rb := &rbacv1.RoleBinding{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: DownstreamClusterRole}, rb); err != nil || rb.Subjects[0].Name != DownstreamServiceAccount {
			t.Errorf("RoleBinding in %s: %v", ns, err)
		}
	}
}

// MintToken asks the TokenRequest API for the requested lifetime.
func TestMintToken(t *testing.T) {
	cs := kubefake.NewClientset()
	var asked int64
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr, ok := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest)
		if !ok || a.GetSubresource() != "token" {
			return false, nil, nil
		}
		asked = *tr.Spec.ExpirationSeconds
		tr.Status.Token = "minted"
		return true, tr, nil
	})
	tok, err := MintToken(context.Background(), cs, 2*time.Hour)
	if err != nil || tok != "minted" || asked != 7200 {
		t.Fatalf("MintToken = %q, %v (asked %ds)", tok, err, asked)
	}
}

// probe turns the first request's answer into a reason a user can act on.
func TestProbe(t *testing.T) {
	for _, tt := range []struct {
		code int
		want string
	}{
		{http.StatusOK, ""},
		{http.StatusUnauthorized, "refused the credentials (401 Unauthorized)"},
		{http.StatusForbidden, "may not list Certificates"},
		{http.StatusNotFound, "cert-manager's CRDs are not installed"},
		{http.StatusInternalServerError, "failed to reach API server"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/namespaces/team-a/certificates") {
				t.Errorf("probe asked for %s, want the registered namespace's Certificates", r.URL.Path)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tt.code)
			if tt.code == http.StatusOK {
				_, _ = w.Write([]byte(`{"apiVersion":"cert-manager.io/v1","kind":"CertificateList","items":[]}`))
				return
			}
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":` + strconv.Itoa(tt.code) + `}`))
		}))
		p, err := New(Options{Scheme: runtime.NewScheme(), ConnectTimeout: 5 * time.Second, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		err = p.probe(context.Background(), &rest.Config{Host: srv.URL}, srv.Client(), &Cluster{Name: "x", Namespaces: []string{"team-a"}})
		srv.Close()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%d: %v", tt.code, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%d: %v, want %q", tt.code, err, tt.want)
		}
	}
}

// The in-cluster server validates offline and is marked for run-time resolution.
func TestValidateSecretInCluster(t *testing.T) {
	c, err := ValidateSecret(registration("in-cluster", "local", InClusterServer, "override"))
	if err != nil || !c.InCluster || c.Config.Host != InClusterServer || c.Config.BearerToken != "override" {
		t.Fatalf("ValidateSecret(in-cluster) = %+v, %v", c, err)
	}
	if _, err := ParseSecret(registration("in-cluster", "local", InClusterServer, "t")); err == nil {
		t.Fatalf("ParseSecret resolved the in-cluster server outside a cluster")
	}
}
