package acme

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
)

// A CertificateRequest made downstream the way istio-csr makes one (a CSR
// whose key never leaves the test, issuerRef group certhub.io naming the
// hub's ACME ClusterIssuer) is issued by real Pebble after DNS-01 through
// real BIND, with one order (Pebble saw one): one ACMEOrder in the hub, finalized with the
// request's own CSR, and no key Secret beside it. The chain verifies
// against Pebble's root for the request's key; status.ca stays empty, as
// cert-manager's ACME issuer leaves it; the TXT record is gone.
func TestACMEIssuesForACertificateRequestWithOneOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 1)
	ca, hub, ns := bed.CA, bed.Hub.Client, bed.HubNamespace()
	if err := hub.Create(ctx, fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble")

	down := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, down, "mesh")
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	name := "gateway." + ca.Zone
	crt := fixture.Certificate("mesh", "gateway", "pebble", fixture.WithNames("", name),
		fixture.WithIssuer(cmmeta.IssuerReference{Name: "pebble", Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}))
	cr, err := fixture.CertificateRequest(crt, "gateway-1", key)
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	apiutil.SetCertificateRequestCondition(cr, cmapi.CertificateRequestConditionApproved, cmmeta.ConditionTrue, "test", "approved by the test")
	if err := down.Status().Update(ctx, cr); err != nil {
		t.Fatal(err)
	}

	got := &cmapi.CertificateRequest{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := down.Get(ctx, client.ObjectKeyFromObject(cr), got); err != nil {
			return false, nil
		}
		return apiutil.CertificateRequestReadyReason(got) == cmapi.CertificateRequestReasonIssued || apiutil.CertificateRequestReadyReason(got) == cmapi.CertificateRequestReasonFailed, nil
	})
	if err != nil || apiutil.CertificateRequestReadyReason(got) != cmapi.CertificateRequestReasonIssued {
		t.Fatalf("CertificateRequest never issued (%v): %+v", err, got.Status.Conditions)
	}

	rootPEM, err := ca.Root(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	chain, err := pki.DecodeX509CertificateChainBytes(got.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter}); err != nil {
		t.Errorf("the chain does not verify for %s against Pebble's root: %v", name, err)
	}
	if ok, err := pki.PublicKeysEqual(key.Public(), chain[0].PublicKey); err != nil || !ok {
		t.Error("the certificate is not for the request's key")
	}
	if len(got.Status.CA) != 0 {
		t.Errorf("status.ca = %q; cert-manager's ACME issuer leaves it empty", got.Status.CA)
	}

	orders := &hubapi.ACMEOrderList{}
	if err := hub.List(ctx, orders, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var mine []hubapi.ACMEOrder
	for _, o := range orders.Items {
		t.Logf("ACMEOrder %s: %s/%s/%s %s keyInCluster=%t", o.Name, o.Spec.Cluster, o.Spec.Namespace, o.Spec.Certificate, o.Status.State, o.Spec.KeyInCluster)
		if o.Spec.Namespace == cr.Namespace && o.Spec.Certificate == cr.Name {
			mine = append(mine, o)
		}
	}
	if len(mine) != 1 || !mine[0].Spec.KeyInCluster {
		t.Fatalf("%d ACMEOrders for the request; want one, finalized with its CSR (keyInCluster)", len(mine))
	}
	if got := ca.Count().Orders; got != 1 {
		t.Errorf("Pebble saw %d orders; want 1", got)
	}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: mine[0].Name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a key Secret beside the request's order (%v): the key is the cluster's", err)
	}
	if got := txt(t, ca.Nameserver, "_acme-challenge."+name+"."); len(got) != 0 {
		t.Errorf("TXT _acme-challenge.%s = %v after issuance, want none", name, got)
	}
}
