package adversarial

import (
	"context"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/test/fixture"
)

// Item 5 (first part): two Certificates in one namespace with the same
// secretName used to re-issue against each other for as long as they
// existed (1,546 revisions each in 60 s), both Ready while the Secret held
// one of them. Now the older one owns the Secret (cert-manager's
// CertificateOwnsSecret), the other is Ready=False/DuplicateSecretName with
// an Event, nothing is re-issued, and a neighbour issues meanwhile.
func TestSharedSecretNameIsOwnedByOne(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[1].Client
	fixture.EnsureNamespace(t, c, "shared-secret")
	fixture.EnsureNamespace(t, c, "shared-neighbour")
	first := fixture.Certificate("shared-secret", "first", issuerName, func(crt *cmapi.Certificate) { crt.Spec.SecretName = "shared-tls" })
	if err := c.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	owner := fixture.WaitReady(t, c, client.ObjectKeyFromObject(first))
	second := fixture.Certificate("shared-secret", "second", issuerName, func(crt *cmapi.Certificate) { crt.Spec.SecretName = "shared-tls" })
	if err := c.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	neighbourIssues(t, c, "shared-neighbour", "neighbour", "two Certificates sharing a Secret")

	dup := fixture.WaitFor(t, c, client.ObjectKeyFromObject(second), "Ready=False/"+reasons.DuplicateSecretName, fixture.NotReadyWith(reasons.DuplicateSecretName))
	if msg := fixture.Condition(dup, cmapi.CertificateConditionReady).Message; !strings.Contains(msg, `"first" owns it`) {
		t.Errorf("message %q does not name the owner", msg)
	}
	s := fixture.GetSecret(t, c, owner)
	if s.Annotations[cmapi.CertificateNameKey] != "first" {
		t.Errorf("the Secret names Certificate %q, want first", s.Annotations[cmapi.CertificateNameKey])
	}
	// Nothing fights: the owner keeps its certificate, the duplicate gets none.
	fixture.ExpectStable(t, c, []*cmapi.Certificate{owner}, 3*time.Second, nil)
	if dup.Status.Revision != nil {
		t.Errorf("the duplicate has revision %d; it must not be issued", *dup.Status.Revision)
	}
}
