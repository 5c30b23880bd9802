package acme

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/acme"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// webhookSolver makes an ACME ClusterIssuer's only solver a dns01 webhook
// of group (solver rfc2136), configured to write to nameserver with the
// TSIG secret in the hub Secret secretName.
func webhookSolver(group, nameserver, keyName, alg, secretName string) func(*cmapi.ClusterIssuer) {
	return func(ci *cmapi.ClusterIssuer) {
		cfg, _ := json.Marshal(cmacme.ACMEIssuerDNS01ProviderRFC2136{Nameserver: nameserver, TSIGKeyName: keyName, TSIGAlgorithm: alg,
			Protocol: cmacme.RFC2136UpdateProtocolTCP, TSIGSecret: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: secretName}, Key: fixture.TSIGSecretKey}})
		ci.Spec.ACME.Solvers = []cmacme.ACMEChallengeSolver{{DNS01: &cmacme.ACMEChallengeSolverDNS01{Webhook: &cmacme.ACMEIssuerDNS01ProviderWebhook{
			GroupName: group, SolverName: "rfc2136", Config: &apiextensionsv1.JSON{Raw: cfg}}}}}
	}
}

// DNS-01 through a webhook solver, the contract every community solver
// (Hetzner, OVH, Gandi, …) implements: a real aggregated API server built
// with cert-manager's webhook library (test/fixture/dnswebhook, its one
// solver cert-manager's rfc2136), registered in the hub API server, writing
// to the bed's BIND. Certificates in two downstream clusters (one with an
// apex and its wildcard: two TXT values under one name) are issued from
// the hub's one account and verify against Pebble's root; every TXT record
// is gone afterwards; the TSIG secret, read by the solver from the hub
// namespace, reaches no downstream object. Beside them, refused
// credentials (a wrong TSIG key), a solver that is not registered and a
// zone BIND does not serve each end Ready=False with the reason and the
// solver's message, and leave no TXT record.
func TestACMESolvesThroughAWebhookSolver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBedWith(ctx, t, testbed.Options{Downstreams: 2, HubAggregation: true})
	ca := bed.CA
	hub := bed.Hub.Client
	bin, err := testbed.BuildWebhookSolver(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	solver, err := bed.RunWebhookSolver(ctx, bin, t.TempDir(), "acme.certhub.test", "dns01-solvers")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("webhook solver log:\n%s", solver.Log())
		}
		_ = solver.Stop()
	})
	bed.createTSIGSecret(ctx, t, "tsig-wrong", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	for _, ci := range []*cmapi.ClusterIssuer{
		fixture.ACMEClusterIssuer("pebble-webhook", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
			webhookSolver(solver.GroupName, ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig")),
		fixture.ACMEClusterIssuer("pebble-webhook-wrong", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
			webhookSolver(solver.GroupName, ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig-wrong")),
		fixture.ACMEClusterIssuer("pebble-webhook-absent", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
			webhookSolver("absent.certhub.test", ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig")),
	} {
		if err := hub.Create(ctx, ci); err != nil {
			t.Fatal(err)
		}
	}
	bed.runHub(t, "pebble-webhook")

	zone := ca.Zone
	good := []struct {
		cp    *testbed.ControlPlane
		crt   *cmapi.Certificate
		names []string
	}{
		{bed.Downstreams[0], fixture.Certificate("shop", "web", "pebble-webhook", fixture.WithNames("", "web."+zone)), []string{"web." + zone}},
		{bed.Downstreams[1], fixture.Certificate("shop", "apps", "pebble-webhook", fixture.WithNames("", "apps."+zone, "*.apps."+zone)), []string{"apps." + zone, "x.apps." + zone}},
	}
	bad := []struct {
		crt     *cmapi.Certificate
		reason  string
		message string // the solver's (or the hub's) words in the condition
	}{
		{fixture.Certificate("shop", "wrong-tsig", "pebble-webhook-wrong", fixture.WithNames("", "tsig."+zone)), acme.ReasonPresentFailed, "webhook solver acme.certhub.test/rfc2136"},
		{fixture.Certificate("shop", "absent", "pebble-webhook-absent", fixture.WithNames("", "absent."+zone)), acme.ReasonPresentFailed, "absent.certhub.test"},
		{fixture.Certificate("shop", "other-zone", "pebble-webhook", fixture.WithNames("", "www.other.invalid")), acme.ReasonSolverConfig, "other.invalid"},
	}
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, "shop")
	}
	for _, c := range append([]*cmapi.Certificate{good[0].crt, good[1].crt}, bad[0].crt, bad[1].crt, bad[2].crt) {
		c.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
	}
	for _, b := range bad {
		if err := bed.Downstreams[0].Client.Create(ctx, b.crt); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range good {
		if err := g.cp.Client.Create(ctx, g.crt); err != nil {
			t.Fatal(err)
		}
	}

	roots := pebbleRoots(ctx, t, ca)
	for _, g := range good {
		fixture.WaitReady(t, g.cp.Client, client.ObjectKeyFromObject(g.crt))
		verifyChain(t, g.crt.Name, fixture.GetSecret(t, g.cp.Client, g.crt).Data[corev1.TLSCertKey], roots, g.names...)
	}
	for _, b := range bad {
		got := fixture.WaitFor(t, bed.Downstreams[0].Client, client.ObjectKeyFromObject(b.crt), "Ready=False/"+b.reason, fixture.NotReadyWith(b.reason))
		msg := fixture.Condition(got, cmapi.CertificateConditionReady).Message
		t.Logf("%s: Ready=False %s: %s", b.crt.Name, b.reason, msg)
		if !strings.Contains(msg, b.message) {
			t.Errorf("%s: condition message %q does not carry %q", b.crt.Name, msg, b.message)
		}
		if strings.Contains(msg, ca.TSIGSecret) {
			t.Errorf("%s: the condition carries the TSIG secret", b.crt.Name)
		}
		fixture.WaitEvent(t, bed.Downstreams[0].Client, "shop", b.crt.Name, b.reason, "")
	}
	if got := ca.Count(); got.Accounts != 1 {
		t.Errorf("Pebble holds %d accounts, want 1", got.Accounts)
	}
	for _, name := range []string{"web", "apps", "tsig", "absent"} {
		fqdn := "_acme-challenge." + name + "." + zone + "."
		if got := txt(t, ca.Nameserver, fqdn); len(got) != 0 {
			t.Errorf("TXT %s = %v after issuance, want none", fqdn, got)
		}
	}
	for i, cp := range bed.Downstreams {
		list := &corev1.SecretList{}
		if err := cp.Client.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(list)
		if strings.Contains(string(raw), ca.TSIGSecret) || strings.Contains(string(raw), jsonBytes([]byte(ca.TSIGSecret))) {
			t.Errorf("downstream %d: the TSIG secret appears in a Secret", i)
		}
	}
}
