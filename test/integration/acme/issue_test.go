package acme

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// One ACME ClusterIssuer in the hub, with an rfc2136 solver whose TSIG
// secret exists only in the hub, issues Certificates in two downstream
// clusters: real Pebble (its default 5 % nonce rejection on, so badNonce
// retries happen) validates DNS-01 against real BIND. The chains verify
// against Pebble's root, one account serves both clusters, each
// Certificate took one order, every TXT record is gone afterwards, and
// neither the TSIG secret nor the account key is in any downstream object.
// Bad input beside it — an http01 solver, a wrong TSIG key, a name in a
// zone BIND does not serve — each ends in Ready=False with its reason and
// an Event, while the good issuer keeps issuing.
func TestACMEIssuesInTwoClustersFromTheHub(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 2)
	ca := bed.CA
	hub := bed.Hub.Client
	ns := bed.HubNamespace()
	bed.createTSIGSecret(ctx, t, "tsig-wrong", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	solver := fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig")
	for _, ci := range []*cmapi.ClusterIssuer{
		fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account", solver),
		fixture.ACMEClusterIssuer("pebble-http", ca.DirectoryURL, ca.ServerCAs, "pebble-account", func(ci *cmapi.ClusterIssuer) {
			ci.Spec.ACME.Solvers = []cmacme.ACMEChallengeSolver{{HTTP01: &cmacme.ACMEChallengeSolverHTTP01{}}}
		}),
		fixture.ACMEClusterIssuer("pebble-wrong-tsig", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
			fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig-wrong")),
	} {
		if err := hub.Create(ctx, ci); err != nil {
			t.Fatal(err)
		}
	}

	bed.runHub(t, "pebble")

	zone := ca.Zone
	good := []struct {
		cp    *testbed.ControlPlane
		crt   *cmapi.Certificate
		names []string
	}{
		{bed.Downstreams[0], fixture.Certificate("shop", "web", "pebble", fixture.WithNames("", "web."+zone)), []string{"web." + zone}},
		{bed.Downstreams[1], fixture.Certificate("shop", "apps", "pebble", fixture.WithNames("", "apps."+zone, "*.apps."+zone)), []string{"apps." + zone, "x.apps." + zone}},
	}
	bad := []struct {
		crt    *cmapi.Certificate
		reason string
	}{
		{fixture.Certificate("shop", "http", "pebble-http", fixture.WithNames("", "http."+zone)), acme.ReasonUnsupportedSolver},
		{fixture.Certificate("shop", "wrong-tsig", "pebble-wrong-tsig", fixture.WithNames("", "tsig."+zone)), acme.ReasonPresentFailed},
		{fixture.Certificate("shop", "other-zone", "pebble", fixture.WithNames("", "www.other.invalid")), acme.ReasonSolverConfig},
	}
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, "shop")
	}
	for _, b := range bad {
		b.crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
		if err := bed.Downstreams[0].Client.Create(ctx, b.crt); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Now()
	for _, g := range good {
		g.crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
		if err := g.cp.Client.Create(ctx, g.crt); err != nil {
			t.Fatal(err)
		}
	}

	roots := pebbleRoots(ctx, t, ca)
	for _, g := range good {
		fixture.WaitReady(t, g.cp.Client, client.ObjectKeyFromObject(g.crt))
		t.Logf("%s Ready %s after the Certificates were created (polled every 100ms; not a benchmark)", g.crt.Name, time.Since(created).Round(10*time.Millisecond))
		sec := fixture.GetSecret(t, g.cp.Client, g.crt)
		chain := verifyChain(t, g.crt.Name, sec.Data[corev1.TLSCertKey], roots, g.names...)
		key, err := pki.DecodePrivateKeyBytes(sec.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := pki.PublicKeysEqual(key.Public(), chain[0].PublicKey); err != nil || !ok {
			t.Errorf("%s: tls.key is not the certificate's key", g.crt.Name)
		}
	}
	for _, b := range bad {
		fixture.WaitFor(t, bed.Downstreams[0].Client, client.ObjectKeyFromObject(b.crt), "Ready=False/"+b.reason, fixture.NotReadyWith(b.reason))
		fixture.WaitEvent(t, bed.Downstreams[0].Client, "shop", b.crt.Name, b.reason, "")
	}

	if got := ca.Count(); got.Accounts != 1 {
		t.Errorf("Pebble holds %d accounts, want 1 (one per ClusterIssuer key, shared by every cluster)", got.Accounts)
	}
	orders := &hubapi.ACMEOrderList{}
	if err := hub.List(ctx, orders, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	perCert := map[string]int{}
	for _, o := range orders.Items {
		perCert[o.Spec.Certificate]++
		t.Logf("ACMEOrder %s: %s %s %s", o.Name, o.Status.State, o.Status.Reason, o.Status.Message)
	}
	for _, g := range good {
		if perCert[g.crt.Name] != 1 {
			t.Errorf("%s: %d ACMEOrders, want 1", g.crt.Name, perCert[g.crt.Name])
		}
	}
	for _, fqdn := range []string{"_acme-challenge.web." + zone + ".", "_acme-challenge.apps." + zone + ".", "_acme-challenge.tsig." + zone + "."} {
		if got := txt(t, ca.Nameserver, fqdn); len(got) != 0 {
			t.Errorf("TXT %s = %v after issuance, want none", fqdn, got)
		}
	}

	account := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pebble-account"}, account); err != nil {
		t.Fatal(err)
	}
	secrets := map[string][]byte{"TSIG secret": []byte(ca.TSIGSecret), "account key": account.Data[corev1.TLSPrivateKeyKey]}
	for i, cp := range bed.Downstreams {
		for _, list := range []client.ObjectList{&corev1.SecretList{}, &corev1.ConfigMapList{}, &cmapi.CertificateList{}, &eventsv1.EventList{}, &corev1.EventList{}} {
			if err := cp.Client.List(ctx, list); err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(list)
			if err != nil {
				t.Fatal(err)
			}
			for what, v := range secrets {
				if bytes.Contains(raw, v) || bytes.Contains(raw, []byte(jsonBytes(v))) {
					t.Errorf("downstream %d: the %s appears in a %T", i, what, list)
				}
			}
		}
	}
}

// jsonBytes is v as encoding/json writes a []byte (base64).
func jsonBytes(v []byte) string {
	b, _ := json.Marshal(v)
	return string(bytes.Trim(b, `"`))
}
