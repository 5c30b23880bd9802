package testbed

import (
	"context"
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
