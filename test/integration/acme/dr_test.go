package acme

import (
	"context"
	"crypto/x509"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed/acmebed"
)

// A hub rebuilt from nothing — its API server and etcd destroyed, a new
// empty one started — with its ACME account key restored (as External
// Secrets would) and Git's ClusterIssuer and registrations applied,
// carries on with the same account: it looks the key's account up first
// (onlyReturnExisting), Pebble still holds one account, and nothing valid
// is ordered again. Its budget ledger (orders=3/1h, 2 spent) was lost
// with the hub: the rebuilt hub does not take it as full — new
// Certificates wait (RateLimited) and no order reaches Pebble, where a
// fresh budget would have let 3 more through within the hour.
func TestRebuiltHubKeepsTheACMEAccount(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 1)
	ca := bed.CA
	if err := bed.Hub.Client.Create(ctx, fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"), func(ci *cmapi.ClusterIssuer) {
			metav1.SetMetaDataAnnotation(&ci.ObjectMeta, hubapi.ACMELimitsAnnotation, "orders=3/1h")
		})); err != nil {
		t.Fatal(err)
	}
	first := bed.runHub(t, "pebble")
	cp := bed.Downstreams[0]
	fixture.EnsureNamespace(t, cp.Client, "shop")
	var crts []*cmapi.Certificate
	for _, name := range []string{"web", "api"} {
		crt := fixture.Certificate("shop", name, "pebble", fixture.WithNames("", "dr-"+name+"."+ca.Zone))
		crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
		if err := cp.Client.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
		crts = append(crts, crt)
	}
	issued := map[string]*x509.Certificate{}
	for _, crt := range crts {
		fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
		issued[crt.Name] = leaf(t, cp, crt)
	}
	if got := ca.Count(); got.Accounts != 1 || got.Orders != 2 {
		t.Fatalf("before the disaster Pebble holds %d accounts and %d orders, want 1 and 2", got.Accounts, got.Orders)
	}

	bed.loseAndRebuildHub(ctx, t, first, "pebble", "pebble-account", "tsig")
	second := bed.runHub(t, "pebble")
	// The new replica has decided the Certificate (its metrics say Ready),
	// then a quiet spell: nothing is ordered again.
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		m, err := second.Metrics(ctx)
		return err == nil && m.Sum("certhub_certificates", map[string]string{"ready": "True"}) == float64(len(crts)), nil
	})
	if err != nil {
		t.Fatalf("the rebuilt hub never decided the Certificates Ready")
	}
	fixture.ExpectStable(t, cp.Client, crts, 5*time.Second, nil)
	for _, crt := range crts {
		if now := leaf(t, cp, crt); now.SerialNumber.Cmp(issued[crt.Name].SerialNumber) != 0 {
			t.Errorf("%s: the valid certificate was issued again after the rebuild", crt.Name)
		}
	}
	fixture.WaitEvent(t, bed.Hub.Client, "default", "pebble", acme.ReasonAccountRegistered, "exists at the ACME server and is used again")
	fixture.WaitEvent(t, bed.Hub.Client, "default", "pebble", acme.ReasonBudgetHistoryUnknown, "every bucket starts empty")

	// New Certificates wait for the budget to refill: none is ordered.
	for _, name := range []string{"new-1", "new-2"} {
		next := fixture.Certificate("shop", name, "pebble", fixture.WithNames("", "dr-"+name+"."+ca.Zone))
		next.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
		if err := cp.Client.Create(ctx, next); err != nil {
			t.Fatal(err)
		}
		fixture.WaitFor(t, cp.Client, client.ObjectKeyFromObject(next), "Issuing=True/RateLimited", func(c *cmapi.Certificate) bool {
			cond := fixture.Condition(c, cmapi.CertificateConditionIssuing)
			return cond != nil && cond.Reason == acme.ReasonRateLimited
		})
	}
	if got := ca.Count(); got.Accounts != 1 || got.Orders != 2 {
		t.Errorf("after the rebuild Pebble holds %d accounts and %d orders, want 1 and 2 (the limit allows 1 more this hour)", got.Accounts, got.Orders)
	}
}

// loseAndRebuildHub destroys the hub — replica r SIGKILLed, the API server
// and etcd gone — and starts an empty one holding only what survives it:
// Git's objects (ClusterIssuer issuer, the registrations) and the secret
// manager's (the hub-namespace Secrets named by secrets), as External
// Secrets would restore them.
func (b *issuanceBed) loseAndRebuildHub(ctx context.Context, t *testing.T, r *fleet.Replica, issuer string, secrets ...string) {
	t.Helper()
	ci := &cmapi.ClusterIssuer{}
	if err := b.Hub.Client.Get(ctx, client.ObjectKey{Name: issuer}, ci); err != nil {
		t.Fatal(err)
	}
	ci.Status = cmapi.IssuerStatus{}
	kept := []client.Object{fixture.Restorable(ci)}
	for _, name := range secrets {
		s := &corev1.Secret{}
		if err := b.Hub.Client.Get(ctx, client.ObjectKey{Namespace: b.HubNamespace(), Name: name}, s); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, fixture.Restorable(s))
	}
	regs := &corev1.SecretList{}
	if err := b.Hub.Client.List(ctx, regs, client.InNamespace(b.ArgoNamespace()), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
		t.Fatal(err)
	}
	for i := range regs.Items {
		kept = append(kept, fixture.Restorable(&regs.Items[i]))
	}
	if err := r.Stop(syscall.SIGKILL); err != nil {
		t.Logf("stopping %s: %v", r, err)
	}
	if err := b.RebuildHub(ctx); err != nil {
		t.Fatal(err)
	}
	for _, obj := range kept {
		if err := b.Hub.Client.Create(ctx, obj); err != nil {
			t.Fatalf("restoring %s: %v", obj.GetName(), err)
		}
	}
	var err error
	if b.Kubeconfig, err = b.Hub.WriteKubeconfig(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// An order the hub loses after the CA validated its authorizations (here:
// the certificate was delivered, then its Secret is lost downstream after
// the hub was rebuilt) is ordered again on the same account, and the CA's
// valid authorizations are reused (Pebble with PEBBLE_AUTHZREUSE=100, as
// Let's Encrypt reuses an account's valid authorizations): the new
// ACMEOrder presents no challenge and names the authorization the lost
// order validated; Pebble holds one account.
func TestLostOrderIsOrderedAgainReusingValidAuthorizations(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 1, func(o *acmebed.Options) { o.Env = append(o.Env, "PEBBLE_AUTHZREUSE=100") })
	ca, cp := bed.CA, bed.Downstreams[0]
	if err := bed.Hub.Client.Create(ctx, fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))); err != nil {
		t.Fatal(err)
	}
	first := bed.runHub(t, "pebble")
	fixture.EnsureNamespace(t, cp.Client, "shop")
	crt := fixture.Certificate("shop", "web", "pebble", fixture.WithNames("", "reuse-web."+ca.Zone))
	crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	before := leaf(t, cp, crt)
	validated := authorizations(ctx, t, bed, false)
	if len(validated) != 1 {
		t.Fatalf("before the loss: %d validated authorizations in the hub's orders, want 1", len(validated))
	}

	bed.loseAndRebuildHub(ctx, t, first, "pebble", "pebble-account", "tsig")
	bed.runHub(t, "pebble")
	if err := cp.Client.Delete(ctx, fixture.GetSecret(t, cp.Client, crt)); err != nil {
		t.Fatal(err)
	}
	// The Certificate's status still says Ready (written before): wait for
	// the Secret itself, with a new certificate.
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		s := &corev1.Secret{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, s); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		c, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
		return err == nil && c.SerialNumber.Cmp(before.SerialNumber) != 0, nil
	})
	if err != nil {
		t.Fatalf("the lost Secret was not issued again: %v", err)
	}
	reused := authorizations(ctx, t, bed, true)
	if len(reused) != 1 || reused[0] != validated[0] {
		t.Errorf("the order made again reused authorizations %v, want the one validated before the loss %v", reused, validated)
	}
	if got := ca.Count(); got.Accounts != 1 || got.Orders != 2 {
		t.Errorf("Pebble holds %d accounts and %d orders, want 1 and 2", got.Accounts, got.Orders)
	}
}

// authorizations lists the authorization URLs of the hub's Valid
// ACMEOrders; reused: only those the CA held valid when the order began
// (no challenge was chosen for them), else only those solved.
func authorizations(ctx context.Context, t *testing.T, bed *issuanceBed, reused bool) []string {
	t.Helper()
	orders := &hubapi.ACMEOrderList{}
	if err := bed.Hub.Client.List(ctx, orders, client.InNamespace(bed.HubNamespace())); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range orders.Items {
		if o.Status.State != hubapi.ACMEOrderValid {
			continue
		}
		for _, ch := range o.Status.Challenges {
			if reused == (ch.Valid && ch.URL == "") {
				out = append(out, ch.AuthorizationURL)
			}
		}
	}
	return out
}
