package testbed

import (
	"context"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WaitTimeout bounds every wait in the helpers; issuance normally takes well under a second.
const WaitTimeout = 60 * time.Second

// Condition returns the Certificate's condition of type typ, or nil.
func Condition(crt *cmapi.Certificate, typ cmapi.CertificateConditionType) *cmapi.CertificateCondition {
	for i, c := range crt.Status.Conditions {
		if c.Type == typ {
			return &crt.Status.Conditions[i]
		}
	}
	return nil
}

// IsReady reports Ready=True for the Certificate's current generation.
func IsReady(crt *cmapi.Certificate) bool {
	c := Condition(crt, cmapi.CertificateConditionReady)
	return c != nil && c.Status == cmmeta.ConditionTrue && c.ObservedGeneration == crt.Generation
}

// NotReadyWith returns a condition function for Ready=False with reason.
func NotReadyWith(reason string) func(*cmapi.Certificate) bool {
	return func(crt *cmapi.Certificate) bool {
		c := Condition(crt, cmapi.CertificateConditionReady)
		return c != nil && c.Status == cmmeta.ConditionFalse && c.Reason == reason
	}
}

// WaitFor polls the Certificate until cond holds and returns it; it fails
// the test after WaitTimeout, naming what it waited for.
func WaitFor(t testing.TB, c client.Client, key client.ObjectKey, what string, cond func(*cmapi.Certificate) bool) *cmapi.Certificate {
	t.Helper()
	crt := &cmapi.Certificate{}
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, WaitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, crt); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cond(crt), nil
	})
	if err != nil {
		t.Fatalf("Certificate %s never became %s: %v; last status: %+v", key, what, err, crt.Status)
	}
	return crt
}

// WaitReady is WaitFor(IsReady).
func WaitReady(t testing.TB, c client.Client, key client.ObjectKey) *cmapi.Certificate {
	t.Helper()
	return WaitFor(t, c, key, "Ready", IsReady)
}

// EnsureNamespace creates namespace name if it does not exist.
func EnsureNamespace(t testing.TB, c client.Client, name string) {
	t.Helper()
	if err := ensureNamespace(context.Background(), c, name); err != nil {
		t.Fatal(err)
	}
}

// GetSecret returns the Secret named by crt.Spec.SecretName.
func GetSecret(t testing.TB, c client.Client, crt *cmapi.Certificate) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, s); err != nil {
		t.Fatalf("get Secret %s/%s: %v", crt.Namespace, crt.Spec.SecretName, err)
	}
	return s
}

// ExpectStable checks the stability invariant: over quiet, none of the Ready
// Certificates crts is issued again — each keeps its status.revision and its
// Secret its resourceVersion (so its data) — and issuances (when not nil),
// the number of issuances the hub has logged for them, does not grow. A
// certificate that is re-issued without a trigger fails the test with what
// changed.
func ExpectStable(t testing.TB, c client.Client, crts []*cmapi.Certificate, quiet time.Duration, issuances func() int) {
	t.Helper()
	type mark struct{ revision, secretVersion string }
	snapshot := func(ctx context.Context, crt *cmapi.Certificate) (mark, error) {
		cur := &cmapi.Certificate{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crt), cur); err != nil {
			return mark{}, err
		}
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: cur.Namespace, Name: cur.Spec.SecretName}, s); err != nil {
			return mark{}, err
		}
		rev := "none"
		if cur.Status.Revision != nil {
			rev = fmt.Sprint(*cur.Status.Revision)
		}
		return mark{revision: rev, secretVersion: s.ResourceVersion}, nil
	}
	ctx := context.Background()
	before := make([]mark, len(crts))
	for i, crt := range crts {
		m, err := snapshot(ctx, crt)
		if err != nil {
			t.Fatalf("stability: %v", err)
		}
		before[i] = m
	}
	logged := 0
	if issuances != nil {
		logged = issuances()
	}
	deadline := time.Now().Add(quiet)
	for time.Now().Before(deadline) {
		for i, crt := range crts {
			m, err := snapshot(ctx, crt)
			if err != nil {
				t.Fatalf("stability: %v", err)
			}
			if m != before[i] {
				t.Fatalf("Certificate %s/%s was issued again without a trigger: revision %s → %s, Secret resourceVersion %s → %s",
					crt.Namespace, crt.Name, before[i].revision, m.revision, before[i].secretVersion, m.secretVersion)
			}
		}
		if issuances != nil && issuances() != logged {
			t.Fatalf("the hub logged %d issuances for %d stable Certificates within %s", issuances()-logged, len(crts), quiet)
		}
		time.Sleep(100 * time.Millisecond) // the poll interval of a check that must hold for the whole period
	}
}
