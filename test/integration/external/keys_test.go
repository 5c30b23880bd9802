package external

import (
	"context"
	"strings"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// signedAfter makes a request in cp's namespace ns (approving it unless
// cert-manager's approver runs there) and waits until the hub has signed
// it: the hub has handled the cluster's news up to then (its watches
// stream within milliseconds; the request takes a round of work).
func signedAfter(t *testing.T, cp *testbed.ControlPlane, ns, name string, approve bool) {
	t.Helper()
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	cr := request(t, ns, name, key, name+".mesh.example.com")
	if err := cp.Client.Create(context.Background(), cr); err != nil {
		t.Fatal(err)
	}
	if approve {
		setCondition(t, cp.Client, cr, cmapi.CertificateRequestConditionApproved, "test")
	}
	waitRequest(t, cp.Client, cr, "signed", func(cr *cmapi.CertificateRequest) bool {
		return apiutil.CertificateRequestReadyReason(cr) == cmapi.CertificateRequestReasonIssued
	})
}

// tenantTLSSecret is a kubernetes.io/tls Secret with a private key that a
// tenant labels as certhub's own.
func tenantTLSSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodePrivateKey(key, cmapi.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{hubapi.ManagedByLabel: hubapi.ManagedByValue}},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: keyPEM}}
}

// Issue 56, external mode: a Secret labelled certhub.io/managed-by (here
// through the Certificate's secretTemplate, as any tenant can) is not
// certhub's, and no component reads it: no response the hub received
// carried private-key bytes. Before, the labelled-Secret informer ran in
// every cluster, whatever its mode, and streamed such Secrets whole.
func TestLabelledSecretsInExternalModeStayDownstream(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[0]
	const ns = "labelled"
	before := len(keepsKeys.PrivateKeyReads()) // TestCertificatesKeepTheirKeys's control reads a key through the proxy
	fixture.EnsureNamespace(t, cp.Client, ns)
	crt := fixture.Certificate(ns, "svc", hubIssuer, fixture.WithNames("", "svc.mesh.example.com"), fixture.WithIssuer(hubRef),
		fixture.WithSpec(func(s *cmapi.CertificateSpec) {
			s.SecretTemplate = &cmapi.CertificateSecretTemplate{Labels: map[string]string{hubapi.ManagedByLabel: hubapi.ManagedByValue}}
		}))
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	if s := fixture.GetSecret(t, cp.Client, crt); s.Labels[hubapi.ManagedByLabel] != hubapi.ManagedByValue || len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
		t.Fatalf("cert-manager wrote no labelled Secret with a key: labels %v", s.Labels)
	}
	if err := cp.Client.Create(ctx, tenantTLSSecret(t, ns, "by-hand")); err != nil {
		t.Fatal(err)
	}
	signedAfter(t, cp, ns, "after", false) // cert-manager's approver runs there
	if keys := keepsKeys.PrivateKeyReads()[before:]; len(keys) > 0 {
		t.Errorf("private-key bytes reached the hub in %d responses: %v", len(keys), keys)
	}
}

// Issue 56, a switch to external: a cluster the hub issued in (its
// managed Secret, with the key the hub generated, cached and watched) is
// relabelled external. From then on no private-key bytes reach the hub,
// whatever the cluster's tenants write (the hub's own Secret changed, a
// new labelled kubernetes.io/tls Secret), discovery included, and without
// a new engagement of the cluster.
func TestSwitchToExternalStopsEveryRead(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[2]
	proxy, err := cp.StartProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	const name = "switched"
	sec, err := env.Bed.RegisterThrough(ctx, cp, name, proxy, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Bed.Hub.Client.Delete(context.Background(), sec) })
	const ns = "shop"
	fixture.EnsureNamespace(t, cp.Client, ns)
	crt := fixture.Certificate(ns, "web", hubIssuer, fixture.WithNames("", "web.shop.example.com"))
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt)) // issued by the hub: it generated the key

	cur := &corev1.Secret{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKeyFromObject(sec), cur); err != nil {
		t.Fatal(err)
	}
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	cur.Labels[hubapi.ModeLabel] = hubapi.ModeExternal
	if err := env.Bed.Hub.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		v, ok := fixture.Gauge(t, "certhub_cluster_mode", map[string]string{"cluster": name, "mode": hubapi.ModeExternal})
		return ok && v == 1, nil
	})
	if err != nil {
		t.Fatal("the hub never saw the cluster switched to external")
	}
	proxy.ResetKeys() // the hub read keys where it issued; none from here on
	start := len(proxy.Writes())

	s := fixture.GetSecret(t, cp.Client, crt)
	s.Annotations["tenant"] = "changed"
	if err := cp.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, tenantTLSSecret(t, ns, "by-hand")); err != nil {
		t.Fatal(err)
	}
	signedAfter(t, cp, ns, "after-switch", true)
	if keys := proxy.PrivateKeyReads(); len(keys) > 0 {
		t.Errorf("after the switch to external, private-key bytes reached the hub in %d responses: %v", len(keys), keys)
	}
	for _, w := range proxy.Writes()[start:] {
		if w != "" && !strings.Contains(w, "/certificaterequests/") && !strings.Contains(w, "/events") {
			t.Errorf("after the switch the hub wrote %s; in external mode it writes only CertificateRequest status and Events", w)
		}
	}
}
