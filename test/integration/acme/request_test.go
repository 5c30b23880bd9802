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
	"github.com/certhub/certhub/test/fixture/cmrunner"
)

// External issuer mode with ACME, cert-manager v1.21's own controllers
// running downstream (test/fixture/cmrunner, its approver included): a
// CertificateRequest made the way istio-csr makes one (a CSR whose key
// never leaves the test) and a cert-manager Certificate, both naming the
// hub's ACME ClusterIssuer through group certhub.io, are issued by real
// Pebble after DNS-01 through real BIND, each with one order (Pebble saw
// two): one ACMEOrder in the hub per request, finalized with the request's
// own CSR, and no key Secret beside it. The chains verify against Pebble's
// root for the requests' keys (the Certificate's key is the one
// cert-manager generated, in its Secret); status.ca stays empty, as
// cert-manager's ACME issuer leaves it; no TXT record is left.
func TestACMEIssuesForACertificateRequestWithOneOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 1)
	ca, hub, ns := bed.CA, bed.Hub.Client, bed.HubNamespace()
	if err := hub.Create(ctx, fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))); err != nil {
		t.Fatal(err)
	}
	down := bed.Downstreams[0].Client
	reg := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: bed.ArgoNamespace(), Name: bed.Downstreams[0].Name}, reg); err != nil {
		t.Fatal(err)
	}
	reg.Labels[hubapi.ModeLabel] = hubapi.ModeExternal // cert-manager runs there
	if err := hub.Update(ctx, reg); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := bed.Downstreams[0].WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmrunner.Start(ctx, cmrunner.Options{Kubeconfig: kubeconfig}); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble")

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
	web := fixture.Certificate("mesh", "web", "pebble", fixture.WithNames("", "web."+ca.Zone),
		fixture.WithIssuer(cmmeta.IssuerReference{Name: "pebble", Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}))
	if err := down.Create(ctx, web); err != nil {
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

	roots := pebbleRoots(ctx, t, ca)
	chain := verifyChain(t, "the request", got.Status.Certificate, roots, name)
	if ok, err := pki.PublicKeysEqual(key.Public(), chain[0].PublicKey); err != nil || !ok {
		t.Error("the certificate is not for the request's key")
	}
	if len(got.Status.CA) != 0 {
		t.Errorf("status.ca = %q; cert-manager's ACME issuer leaves it empty", got.Status.CA)
	}
	if c := apiutil.GetCertificateRequestCondition(got, cmapi.CertificateRequestConditionApproved); c == nil || c.Reason != "cert-manager.io" {
		t.Errorf("Approved %+v; want cert-manager's approver's", c)
	}

	fixture.WaitReady(t, down, client.ObjectKeyFromObject(web))
	sec := fixture.GetSecret(t, down, web)
	webChain, err := pki.DecodeX509CertificateChainBytes(sec.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	webKey, err := pki.DecodePrivateKeyBytes(sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := pki.PublicKeysEqual(webKey.Public(), webChain[0].PublicKey); err != nil || !ok {
		t.Error("the Certificate's tls.crt is not for the key cert-manager generated")
	}
	if _, err := webChain[0].Verify(x509.VerifyOptions{DNSName: "web." + ca.Zone, Roots: roots, Intermediates: pool(webChain[1:])}); err != nil {
		t.Errorf("the Certificate's chain does not verify against Pebble's root: %v", err)
	}

	orders := &hubapi.ACMEOrderList{}
	if err := hub.List(ctx, orders, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, o := range orders.Items {
		t.Logf("ACMEOrder %s: %s/%s/%s %s keyInCluster=%t", o.Name, o.Spec.Cluster, o.Spec.Namespace, o.Spec.Certificate, o.Status.State, o.Spec.KeyInCluster)
		if !o.Spec.KeyInCluster {
			t.Errorf("ACMEOrder %s holds a key in the hub; every request's key is the cluster's", o.Name)
		}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.Name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("a key Secret beside ACMEOrder %s (%v): the key is the cluster's", o.Name, err)
		}
	}
	if len(orders.Items) != 2 {
		t.Errorf("%d ACMEOrders; want 2, one per request (the direct one, the Certificate's)", len(orders.Items))
	}
	if got := ca.Count().Orders; got != 2 {
		t.Errorf("Pebble saw %d orders; want 2, one per request", got)
	}
	for _, n := range []string{name, "web." + ca.Zone} {
		if got := txt(t, ca.Nameserver, "_acme-challenge."+n+"."); len(got) != 0 {
			t.Errorf("TXT _acme-challenge.%s = %v after issuance, want none", n, got)
		}
	}
}
