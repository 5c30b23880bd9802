package revocation

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/test/fixture"
)

func TestSelection(t *testing.T) {
	created := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	recorded := issued.Entry{Serial: "A1B2", Issuer: issued.ClusterIssuer("platform-ca"), Cluster: "prod-eu", Namespace: "shop", Kind: issued.KindCertificate,
		Name: "web", NotBefore: created.Add(-time.Hour), RecordedAt: created.Add(-time.Hour), Why: "DoesNotExist"}
	rev := func(spec hubapi.CertificateRevocationSpec) *hubapi.CertificateRevocation {
		return &hubapi.CertificateRevocation{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}, Spec: spec}
	}
	before := metav1.NewTime(created.Add(-2 * time.Hour))
	for _, tc := range []struct {
		name    string
		spec    hubapi.CertificateRevocationSpec
		cluster string
		entry   func(*issued.Entry)
		want    bool
	}{
		{name: "serial as written with colons and case", spec: hubapi.CertificateRevocationSpec{Serials: []string{"00:a1:B2"}}, want: true},
		{name: "another serial", spec: hubapi.CertificateRevocationSpec{Serials: []string{"A1B3"}}, want: false},
		{name: "issuer", spec: hubapi.CertificateRevocationSpec{IssuerName: "platform-ca"}, want: true},
		{name: "another issuer", spec: hubapi.CertificateRevocationSpec{IssuerName: "other-ca"}, want: false},
		{name: "a namespaced Issuer of the same name", spec: hubapi.CertificateRevocationSpec{IssuerName: "platform-ca"},
			entry: func(e *issued.Entry) { e.Issuer = issued.NamespacedIssuer("shop", "platform-ca") }, want: false},
		{name: "namespace glob", spec: hubapi.CertificateRevocationSpec{Namespace: "sh*", Certificate: "web"}, want: true},
		{name: "another name", spec: hubapi.CertificateRevocationSpec{Certificate: "api"}, want: false},
		{name: "a CertificateRequest by its name", spec: hubapi.CertificateRevocationSpec{Certificate: "web-*"},
			entry: func(e *issued.Entry) {
				e.Kind, e.Name, e.Why = issued.KindCertificateRequest, "web-1", issued.WhyRequest
			}, want: true},
		{name: "cluster glob", spec: hubapi.CertificateRevocationSpec{Clusters: []string{"prod-*"}}, cluster: "prod-eu", want: true},
		{name: "another cluster", spec: hubapi.CertificateRevocationSpec{Clusters: []string{"prod-*"}}, cluster: "dev", want: false},
		{name: "issued before the cutoff", spec: hubapi.CertificateRevocationSpec{IssuedBefore: &metav1.Time{Time: created}}, want: true},
		{name: "issued after the cutoff", spec: hubapi.CertificateRevocationSpec{IssuedBefore: &before}, want: false},
		{name: "recorded after the revocation was created", spec: hubapi.CertificateRevocationSpec{IssuerName: "platform-ca"},
			entry: func(e *issued.Entry) { e.RecordedAt = created.Add(2 * time.Second) }, want: false},
		{name: "a renewal a revocation asked for, in the second of creation", spec: hubapi.CertificateRevocationSpec{IssuerName: "platform-ca"},
			entry: func(e *issued.Entry) { e.RecordedAt, e.Why = created.Add(300*time.Millisecond), reasons.Revocation }, want: false},
		{name: "a renewal for another reason, in the second of creation", spec: hubapi.CertificateRevocationSpec{IssuerName: "platform-ca"},
			entry: func(e *issued.Entry) { e.RecordedAt, e.Why = created.Add(300*time.Millisecond), reasons.Renewing }, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, cluster := recorded, "prod-eu"
			if tc.entry != nil {
				tc.entry(&e)
			}
			if tc.cluster != "" {
				cluster = tc.cluster
			}
			r := rev(tc.spec)
			if got := selectsCluster(r, cluster) && selectsEntry(r, e); got != tc.want {
				t.Errorf("selected %v, want %v", got, tc.want)
			}
		})
	}
}

// record is a record holding fixed entries.
type record []issued.Entry

func (r record) Cluster(name string) []issued.Entry {
	var out []issued.Entry
	for _, e := range r {
		if e.Cluster == name {
			out = append(out, e)
		}
	}
	return out
}

// newTestController is a Controller on a fake hub holding a CA ClusterIssuer.
func newTestController(t *testing.T, objs ...client.Object) (*Controller, client.Client, *x509.Certificate, *clocktesting.FakeClock) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{hubapi.AddToScheme, cmapi.AddToScheme, fakeCoreScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	caSecret, caCert := fixture.CAKeyPair(t, "certhub", "platform-ca-key")
	ci := &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "platform-ca"},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: caSecret.Name}}}}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, caSecret, ci)...).
		WithStatusSubresource(&hubapi.CertificateRevocation{}).Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
	c, err := New(Options{Namespace: "certhub", Hub: hub, Live: hub, Record: record(nil), Registerer: prometheus.NewRegistry(), clock: clk,
		Leaf: func(context.Context, multicluster.ClusterName, cluster.Cluster, client.ObjectKey) (*x509.Certificate, error) {
			return nil, nil
		},
		Clusters: func() map[multicluster.ClusterName]map[string]string {
			return map[multicluster.ClusterName]map[string]string{"east": nil, "west": nil}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return c, hub, caCert, clk
}

// The CRL lists each serial once with its reason, is signed by the CA,
// numbered upwards, signed again when half its validity is gone, and
// served as DER and PEM.
func TestCRL(t *testing.T) {
	ctx := context.Background()
	c, hub, caCert, clk := newTestController(t)
	for _, serial := range []string{"A1", "B2", "A1"} {
		if err := c.crls.revoke(ctx, "platform-ca", serial, 1); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	get := func(path string) (*x509.RevocationList, int) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, resp.StatusCode
		}
		der, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := pem.Decode(der); b != nil {
			der = b.Bytes
		}
		crl, err := x509.ParseRevocationList(der)
		if err != nil {
			t.Fatal(err)
		}
		return crl, resp.StatusCode
	}
	crl, _ := get(CRLPath + "platform-ca")
	if err := crl.CheckSignatureFrom(caCert); err != nil {
		t.Fatalf("CRL signature: %v", err)
	}
	if len(crl.RevokedCertificateEntries) != 2 || crl.RevokedCertificateEntries[0].ReasonCode != 1 || crl.Number.Int64() != 2 {
		t.Fatalf("CRL number %v entries %+v: want number 2 (one per change), A1 and B2 with reason 1", crl.Number, crl.RevokedCertificateEntries)
	}
	if pemCRL, _ := get(CRLPath + "platform-ca.pem"); pemCRL == nil || pemCRL.Number.Cmp(crl.Number) != 0 {
		t.Error("the PEM form is not the same CRL")
	}
	if _, code := get(CRLPath + "other-ca"); code != http.StatusNotFound {
		t.Errorf("an unknown issuer's CRL: %d, want 404", code)
	}
	cms := listCRLs(t, hub)
	if err := c.crls.refresh(ctx, &cms[0]); err != nil {
		t.Fatal(err)
	}
	if again, _ := get(CRLPath + "platform-ca"); again.Number.Cmp(crl.Number) != 0 {
		t.Error("a fresh CRL was signed again")
	}
	clk.Step(DefaultCRLValidity/2 + time.Minute)
	if err := c.crls.refresh(ctx, &cms[0]); err != nil {
		t.Fatal(err)
	}
	again, _ := get(CRLPath + "platform-ca")
	if again.Number.Int64() != 3 || !again.NextUpdate.After(crl.NextUpdate) || len(again.RevokedCertificateEntries) != 2 {
		t.Errorf("after half its validity: number %v next update %v (was %v), %d entries", again.Number, again.NextUpdate, crl.NextUpdate, len(again.RevokedCertificateEntries))
	}
}

// Status entries only advance and are merged one by one: a writer holding
// an older view never drops another's entries or moves one back.
func TestStatusMergeNeverLosesEntries(t *testing.T) {
	ctx := context.Background()
	rev := &hubapi.CertificateRevocation{ObjectMeta: metav1.ObjectMeta{Name: "incident"}, Status: hubapi.CertificateRevocationStatus{
		Certificates: []hubapi.RevokedCertificate{
			{Serial: "A1", Cluster: "east", IssuerKind: KindCA, State: hubapi.RevocationRevoked},
			{Serial: "B2", Cluster: "west", IssuerKind: KindCA, State: hubapi.RevocationRenewing},
		}}}
	c, hub, _, _ := newTestController(t, rev)
	// east's owner, from a view where A1 was still renewing, and a new C3.
	mine := map[string]hubapi.RevokedCertificate{
		"A1": {Serial: "A1", Cluster: "east", IssuerKind: KindCA, State: hubapi.RevocationRenewing},
		"C3": {Serial: "C3", Cluster: "east", IssuerKind: KindCA, State: hubapi.RevocationRenewing},
	}
	if err := c.writeStatus(ctx, "incident", map[string]hubapi.RevocationClusterStatus{"east": {Cluster: "east", Selected: 2}}, mine); err != nil {
		t.Fatal(err)
	}
	got := &hubapi.CertificateRevocation{}
	if err := hub.Get(ctx, client.ObjectKey{Name: "incident"}, got); err != nil {
		t.Fatal(err)
	}
	states := map[string]hubapi.RevokedCertificateState{}
	for _, e := range got.Status.Certificates {
		states[e.Serial] = e.State
	}
	if states["A1"] != hubapi.RevocationRevoked || states["B2"] != hubapi.RevocationRenewing || states["C3"] != hubapi.RevocationRenewing {
		t.Errorf("entries %v: want A1 still Revoked, west's B2 kept, C3 added", states)
	}
	if got.Status.Phase != hubapi.RevocationInProgress || got.Status.Pending != 2 || got.Status.Revoked != 1 {
		t.Errorf("phase %s pending %d revoked %d: want InProgress, 2, 1 (west not seen yet)", got.Status.Phase, got.Status.Pending, got.Status.Revoked)
	}
}

// MustRenew answers for the serial a revocation selected only, and wakes
// certsync once per newly selected Certificate.
func TestMustRenew(t *testing.T) {
	c, _, _, _ := newTestController(t)
	var woken []string
	c.Subscribe(func(cluster, namespace, name string) { woken = append(woken, cluster+"/"+namespace+"/"+name) })
	c.setWant("east/shop/web", "A1", "incident")
	c.setWant("east/shop/web", "A1", "incident")
	selected := &x509.Certificate{SerialNumber: big.NewInt(0xA1)}
	other := &x509.Certificate{SerialNumber: big.NewInt(0xB2)}
	if _, ok := c.MustRenew("east", "shop", "web", selected); !ok {
		t.Error("the selected serial is not to be renewed")
	}
	if _, ok := c.MustRenew("east", "shop", "web", other); ok {
		t.Error("another serial (its renewal) is to be renewed")
	}
	if _, ok := c.MustRenew("west", "shop", "web", selected); ok {
		t.Error("the same Certificate in another cluster is to be renewed")
	}
	if len(woken) != 1 {
		t.Errorf("woken %v, want once", woken)
	}
}

func fakeCoreScheme(s *runtime.Scheme) error { return corev1.AddToScheme(s) }

func listCRLs(t *testing.T, c client.Client) []corev1.ConfigMap {
	t.Helper()
	list := &corev1.ConfigMapList{}
	if err := c.List(context.Background(), list, client.MatchingLabels{hubapi.CRLLabel: "true"}); err != nil || len(list.Items) != 1 {
		t.Fatalf("CRL ConfigMaps: %d (%v)", len(list.Items), err)
	}
	return list.Items
}
