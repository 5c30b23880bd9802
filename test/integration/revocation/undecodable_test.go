package revocation

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
)

// Issue 55: a Certificate the API server accepts and cert-manager's Go
// types cannot decode (`duration: "1 day"`; downstream has no webhook),
// in the same namespace as a leaked certificate, does not stop its
// revocation: it completes and the CRL lists the serial. Before, the
// revocation listed Certificates through a typed cache, whose list failed
// for good ("time: unknown unit \\" day\\""): the revocation never got a phase.
func TestUndecodableCertificateStopsNoRevocation(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[0]
	const ns = "undecodable"
	crt, leaked := issue(t, cp, ns, "leaked")
	fixture.UndecodableCertificate(t, cp.Client, ns, "one-day", issuerName, nil)
	rev := &hubapi.CertificateRevocation{ObjectMeta: metav1.ObjectMeta{Name: "beside-undecodable"}, Spec: hubapi.CertificateRevocationSpec{
		Serials: []string{fmt.Sprintf("%x", leaked.SerialNumber)}, Reason: hubapi.RevocationKeyCompromise}}
	if err := env.Bed.Hub.Client.Create(ctx, rev); err != nil {
		t.Fatal(err)
	}
	waitRenewed(t, cp, crt, leaked)
	rev = waitComplete(t, rev.Name)
	if rev.Status.Revoked != 1 || !listed(fetchCRL(t), leaked.SerialNumber) {
		t.Errorf("revoked %d, CRL lists %X: %v; want it revoked and listed", rev.Status.Revoked, leaked.SerialNumber, listed(fetchCRL(t), leaked.SerialNumber))
	}
}
