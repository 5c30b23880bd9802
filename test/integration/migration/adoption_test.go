package migration

import (
	"context"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/writegate"
	"github.com/certhub/certhub/test/fixture"
)

// deniedTries is how many Certificates try the adoption at once: each is
// decided on its own, so one run is that many tries of the race.
const deniedTries = 20

// Issue 56: cert-manager wrote Secrets holding certificates of the hub's
// own CA (its ClusterIssuer holds the same key pair) for names an
// IssuancePolicy denies. When the hub takes the cluster over, none of them
// is adopted: each Certificate ends PolicyDenied, its Secret left as
// cert-manager wrote it, while a neighbour the policy allows is adopted
// and kept. Before, such a Secret was adopted Ready=True in one try of two.
func TestDeniedNamesAreNeverAdopted(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[4]
	const cluster = "denied-adoption"
	p := fixture.PolicyObject(fixture.Policy("adoption-allowed-names", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchNames: []string{cluster}}},
		Allowed:  hubapi.PolicyAllowed{DNSNames: fixture.Values("*.allowed.example.com")},
	}))
	if err := bed.Hub.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), p) })

	cm := startCertManagerClusterIssuer(t, cp)
	ref := cmmeta.IssuerReference{Name: sameIssuer, Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}
	var denied []*cmapi.Certificate
	for i := range deniedTries {
		name := fmt.Sprintf("denied-%02d", i)
		denied = append(denied, fixture.Certificate(ns, name, sameIssuer, fixture.WithNames("", name+".denied.example.com"), fixture.WithIssuer(ref)))
	}
	neighbour := fixture.Certificate(ns, "neighbour", sameIssuer, fixture.WithNames("", "neighbour.allowed.example.com"), fixture.WithIssuer(ref))
	for _, crt := range append([]*cmapi.Certificate{neighbour}, denied...) {
		if err := cp.Client.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	for _, crt := range append([]*cmapi.Certificate{neighbour}, denied...) {
		fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt)) // cert-manager issued it, with the hub's CA
	}
	before := serials(t, cp, append([]*cmapi.Certificate{neighbour}, denied...))

	proxy, err := cp.StartProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	if _, err := bed.RegisterThrough(ctx, cp, cluster, proxy, map[string]string{hubapi.ModeLabel: hubapi.ModeIssue}); err != nil {
		t.Fatal(err)
	}
	waitReport(t, cluster, "ClusterConflict", func(r writegate.Report) bool { return r.Conflict })
	start := time.Now()
	cm.stop() // the hub takes every Certificate over, each on its own
	waitTakenOver(t, cp, []*cmapi.Certificate{neighbour})
	t.Logf("neighbour adopted %s after cert-manager stopped", time.Since(start).Round(time.Millisecond))
	if c, _ := leaf(t, cp, neighbour); c.SerialNumber.String() != before[neighbour.Name] {
		t.Errorf("neighbour: re-issued (serial %s → %s); the policy allows it and the same CA signed it, it must be kept", before[neighbour.Name], c.SerialNumber)
	}
	adopted := 0
	for _, crt := range denied {
		cur := fixture.WaitFor(t, cp.Client, client.ObjectKeyFromObject(crt), "PolicyDenied", fixture.NotReadyWith(reasons.PolicyDenied))
		c, s := leaf(t, cp, crt)
		if s.Labels[hubapi.ManagedByLabel] == hubapi.ManagedByValue || c.SerialNumber.String() != before[crt.Name] {
			adopted++
			t.Errorf("%s: its Secret was taken over (labels %v, serial %s → %s); the policy denies %v", crt.Name, s.Labels, before[crt.Name], c.SerialNumber, cur.Spec.DNSNames)
		}
	}
	// Nothing flips later: the hub has decided every one, none turns Ready.
	var flipped string
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, crt := range denied {
			cur := &cmapi.Certificate{}
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(crt), cur); err == nil && fixture.IsReady(cur) {
				flipped = fmt.Sprintf("%s: %+v", crt.Name, fixture.Condition(cur, cmapi.CertificateConditionReady))
				return true, nil
			}
		}
		return false, nil
	})
	if flipped != "" {
		t.Errorf("a Certificate the policy denies became Ready after it was refused: %s", flipped)
	}
	t.Logf("%d of %d Certificates the policy denies adopted (want 0)", adopted, deniedTries)
}
