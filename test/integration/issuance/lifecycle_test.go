package issuance

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/fixture"
)

func revision(c *cmapi.Certificate) int {
	if c.Status.Revision == nil {
		return 0
	}
	return *c.Status.Revision
}

// leafAndKey parses the Secret's certificate and the DER of its public key.
func leafAndKey(t *testing.T, s *corev1.Secret) (*x509.Certificate, []byte) {
	t.Helper()
	leaf, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return leaf, der
}

// Renewal at renewalTime: with duration 1h and renewBefore 59m55s the
// certificate is due 5s after issuance. The revision goes up; the key rotates
// under rotationPolicy Always and is kept under Never.
func TestRenewalRotatesKeyPerPolicy(t *testing.T) {
	for _, policy := range []cmapi.PrivateKeyRotationPolicy{cmapi.RotationPolicyAlways, cmapi.RotationPolicyNever} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			c := bed.Downstreams[1].Client
			fixture.EnsureNamespace(t, c, "renewal")
			crt := fixture.Certificate("renewal", "rotate-"+strings.ToLower(string(policy)), issuerName)
			crt.Spec.Duration = &metav1.Duration{Duration: time.Hour}
			crt.Spec.RenewBefore = &metav1.Duration{Duration: 59*time.Minute + 55*time.Second}
			crt.Spec.PrivateKey.RotationPolicy = policy
			if err := c.Create(context.Background(), crt); err != nil {
				t.Fatal(err)
			}
			first := fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
			leaf1, key1 := leafAndKey(t, fixture.GetSecret(t, c, first))
			if want := leaf1.NotAfter.Add(-(59*time.Minute + 55*time.Second)); !first.Status.RenewalTime.Time.Equal(want) {
				t.Errorf("renewalTime %v, want %v", first.Status.RenewalTime, want)
			}
			second := fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "renewed", func(c *cmapi.Certificate) bool {
				return fixture.IsReady(c) && revision(c) == revision(first)+1
			})
			leaf2, key2 := leafAndKey(t, fixture.GetSecret(t, c, second))
			if leaf2.SerialNumber.Cmp(leaf1.SerialNumber) == 0 || !leaf2.NotBefore.After(leaf1.NotBefore.Add(-time.Second)) {
				t.Errorf("not a new certificate: serials %v %v", leaf1.SerialNumber, leaf2.SerialNumber)
			}
			if rotated := string(key1) != string(key2); rotated != (policy == cmapi.RotationPolicyAlways) {
				t.Errorf("rotationPolicy %s: key rotated = %v", policy, rotated)
			}
		})
	}
}

// `cmctl renew` sets Issuing=True on the status; certhub issues exactly once
// more and clears the condition.
func TestIssuingConditionTriggersOneReissue(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[1].Client
	fixture.EnsureNamespace(t, c, "renewal")
	crt := fixture.Certificate("renewal", "manual", issuerName)
	if err := c.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	first := fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	leaf1, _ := leafAndKey(t, fixture.GetSecret(t, c, first))

	now := metav1.Now()
	first.Status.Conditions = append(first.Status.Conditions, cmapi.CertificateCondition{
		Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue, Reason: "ManuallyTriggered",
		Message: "Certificate re-issuance manually triggered", LastTransitionTime: &now, ObservedGeneration: first.Generation,
	})
	if err := c.Status().Update(ctx, first); err != nil {
		t.Fatalf("set Issuing=True: %v", err)
	}
	second := fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "re-issued with Issuing cleared", func(c *cmapi.Certificate) bool {
		return fixture.IsReady(c) && revision(c) == revision(first)+1 && fixture.Condition(c, cmapi.CertificateConditionIssuing) == nil
	})
	leaf2, _ := leafAndKey(t, fixture.GetSecret(t, c, second))
	if leaf2.SerialNumber.Cmp(leaf1.SerialNumber) == 0 {
		t.Errorf("Issuing=True did not produce a new certificate")
	}
	// Exactly once: a later, unrelated reconcile (a label on the Certificate) issues nothing.
	patch := client.MergeFrom(second.DeepCopy())
	second.Labels = map[string]string{"touched": "yes"}
	if err := c.Patch(ctx, second, patch); err != nil {
		t.Fatal(err)
	}
	third := fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "reconciled after the label", func(c *cmapi.Certificate) bool {
		return fixture.IsReady(c) && c.Labels["touched"] == "yes"
	})
	if revision(third) != revision(second) {
		t.Errorf("revision went from %d to %d without a trigger", revision(second), revision(third))
	}
}

// Issue 30 (cert-manager 1.21 semantics): spec.renewal.policy Disabled is
// issued once, with no renewal time, and stays still: a later reconcile
// (a label on the Certificate) issues nothing. (It used to fail its first
// status write: a nil renewal time.)
func TestRenewalDisabledIsIssuedOnce(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[1].Client
	fixture.EnsureNamespace(t, c, "renewal")
	crt := fixture.Certificate("renewal", "disabled", issuerName, func(crt *cmapi.Certificate) {
		crt.Spec.Renewal = &cmapi.CertificateRenewal{Policy: cmapi.CertificateRenewalPolicyDisabled}
	})
	if err := c.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	first := fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	if revision(first) != 1 || first.Status.RenewalTime != nil {
		t.Fatalf("revision %d, renewal time %v; want 1 and none", revision(first), first.Status.RenewalTime)
	}
	patch := client.MergeFrom(first.DeepCopy())
	first.Labels = map[string]string{"touched": "yes"}
	if err := c.Patch(ctx, first, patch); err != nil {
		t.Fatal(err)
	}
	later := fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "reconciled after the label", func(c *cmapi.Certificate) bool {
		return fixture.IsReady(c) && c.Labels["touched"] == "yes"
	})
	if revision(later) != 1 || later.Status.RenewalTime != nil {
		t.Errorf("revision %d, renewal time %v after a reconcile; want 1 and none", revision(later), later.Status.RenewalTime)
	}
}
