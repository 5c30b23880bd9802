package chaos

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"math/big"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// requestNamespace holds the CertificateRequests of the run.
const requestNamespace = "chaos-requests"

// createRequests creates and approves n CertificateRequests for the hub's
// issuer (group certhub.io) in cp, spread over window from start; an
// operation that fails (an outage) is retried.
func createRequests(ctx context.Context, cp *testbed.ControlPlane, start time.Time, window time.Duration, n int, errs func()) {
	for i := 0; i < n; {
		pause(ctx, time.Until(start.Add(time.Duration(i)*window/time.Duration(max(n, 1)))))
		if err := createRequest(ctx, cp, fmt.Sprintf("req-%03d", i)); err != nil {
			errs()
			pause(ctx, 500*time.Millisecond)
			continue
		}
		i++
	}
}

func createRequest(ctx context.Context, cp *testbed.ControlPlane, name string) error {
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: requestNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	crt := fixture.Certificate(requestNamespace, name, issuerName, fixture.WithNames("", name+".requests.chaos.example.com"),
		fixture.WithIssuer(cmmeta.IssuerReference{Name: issuerName, Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}))
	cr, err := fixture.CertificateRequest(crt, name, key)
	if err != nil {
		return err
	}
	if err := cp.Client.Create(ctx, cr); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur := &cmapi.CertificateRequest{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(cr), cur); err != nil {
		return err
	}
	if apiutil.CertificateRequestIsApproved(cur) {
		return nil
	}
	apiutil.SetCertificateRequestCondition(cur, cmapi.CertificateRequestConditionApproved, cmmeta.ConditionTrue, "chaos", "approved by the chaos driver")
	return cp.Client.Status().Update(ctx, cur)
}

// requestSerials waits until every request of the run carries its
// certificate and returns their serials (decimal) by where they are.
func requestSerials(t testing.TB, n int, timeout time.Duration) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		clear(out)
		for _, cp := range bed.Downstreams {
			list := &cmapi.CertificateRequestList{}
			if err := cp.Client.List(ctx, list, client.InNamespace(requestNamespace)); err != nil {
				return false, nil
			}
			for _, cr := range list.Items {
				if len(cr.Status.Certificate) == 0 {
					return false, nil
				}
				leaf, err := pki.DecodeX509CertificateBytes(cr.Status.Certificate)
				if err != nil {
					return false, fmt.Errorf("%s/%s: %w", cp.Name, cr.Name, err)
				}
				out[leaf.SerialNumber.String()] = cp.Name + "/" + cr.Namespace + "/" + cr.Name
			}
		}
		return len(out) == n, nil
	})
	if err != nil {
		t.Fatalf("%d of %d CertificateRequests carry their certificate: %v", len(out), n, err)
	}
	return out
}

// checkRecordMatches: the hub's record of what it signed holds exactly the
// certificates that reached the fleet — every serial any managed Secret
// carried (the auditor saw each) and every request's — none missing, none
// twice; entries whose certificate never left the hub (a replica killed
// between recording and writing) are marked undelivered by the entry that
// replaced them.
func checkRecordMatches(t testing.TB, audit *fleet.Auditor, nRequests int, rep *report) {
	t.Helper()
	reached := audit.SerialsSeen()
	for sn, where := range requestSerials(t, nRequests, 3*time.Minute) {
		reached[sn] = where
	}
	list := &corev1.ConfigMapList{}
	if err := bed.Hub.Client.List(context.Background(), list, client.InNamespace(bed.HubNamespace()),
		client.MatchingLabels{issued.RecordLabel: issued.RecordChunk}); err != nil {
		t.Fatal(err)
	}
	entries, bad := issued.Entries(list.Items)
	if len(bad) > 0 {
		t.Errorf("undecodable record entries: %v", bad)
	}
	undelivered := issued.Undelivered(entries)
	recorded := map[string]issued.Entry{}
	for _, e := range entries {
		if undelivered[e.Key()] {
			rep.RecordUndelivered++
			continue
		}
		n, _ := new(big.Int).SetString(e.Serial, 16)
		sn := n.String()
		if prev, twice := recorded[sn]; twice {
			t.Errorf("serial %s recorded twice: %+v and %+v", e.Serial, prev, e)
		}
		recorded[sn] = e
	}
	for sn, where := range reached {
		if _, ok := recorded[sn]; !ok {
			t.Errorf("%s carried serial %s, which the hub's record does not hold", where, sn)
		}
	}
	// A downstream outage hides writes from the auditor (its watch relists
	// after a back-off and sees only the last certificate); a later entry
	// that replaced a serial shows the hub read that serial in the Secret.
	replaced := map[string]bool{}
	for _, e := range entries {
		if e.Replaces != "" {
			replaced[e.Issuer+"/"+e.Replaces] = true
		}
	}
	for sn, e := range recorded {
		if _, ok := reached[sn]; !ok && replaced[e.Issuer+"/"+e.Serial] {
			rep.RecordSeenReplaced++
			continue
		}
		if _, ok := reached[sn]; !ok {
			t.Errorf("the record holds serial %s for %s/%s/%s/%s (%s), which never reached it", e.Serial, e.Cluster, e.Kind, e.Namespace, e.Name, e.Why)
		}
	}
	rep.RecordEntries, rep.Reached = len(recorded), len(reached)
	rep.Checks = append(rep.Checks, fmt.Sprintf("record: %d certificates seen reaching the fleet (Secrets and requests) and %d more the hub replaced in a Secret the auditor's watch missed; %d delivered entries recorded, none missing, none twice (%d recorded but never delivered, marked so)",
		len(reached), rep.RecordSeenReplaced, len(recorded), rep.RecordUndelivered))
}
