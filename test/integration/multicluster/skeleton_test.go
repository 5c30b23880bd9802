package multicluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/issuers"
)

// Every downstream cluster gets its Certificates issued by the hub, in more
// than one namespace.
func TestIssuesInEveryDownstreamCluster(t *testing.T) {
	ctx := context.Background()
	for _, cp := range bed.Downstreams {
		t.Run(cp.Name, func(t *testing.T) {
			for _, ns := range []string{"team-a", "team-b"} {
				ensureNamespace(t, cp.Client, ns)
				crt := newCertificate(ns, "web", fmt.Sprintf("web.%s.%s.example.com", ns, cp.Name), "web."+ns+".svc")
				if err := cp.Client.Create(ctx, crt); err != nil {
					t.Fatalf("create Certificate: %v", err)
				}
				got := waitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
				checkIssued(t, cp.Client, got)
				if *got.Status.Revision != 1 {
					t.Errorf("%s: revision = %d, want 1", ns, *got.Status.Revision)
				}
			}
		})
	}
}

// Deleting the TLS Secret makes the hub issue and write it again.
func TestDeletedSecretIsWrittenAgain(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[0]
	ensureNamespace(t, cp.Client, "recreate")
	crt := newCertificate("recreate", "db", "db.recreate.example.com")
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatalf("create Certificate: %v", err)
	}
	first := waitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	oldSecret, oldLeaf := checkIssued(t, cp.Client, first)

	if err := cp.Client.Delete(ctx, oldSecret); err != nil {
		t.Fatalf("delete Secret: %v", err)
	}
	second := waitFor(t, cp.Client, client.ObjectKeyFromObject(crt), "re-issued", func(c *cmapi.Certificate) bool {
		return isReady(c) && c.Status.Revision != nil && *c.Status.Revision == *first.Status.Revision+1
	})
	newSecret, newLeaf := checkIssued(t, cp.Client, second)
	if newSecret.UID == oldSecret.UID {
		t.Errorf("Secret was not recreated (same UID)")
	}
	if newLeaf.SerialNumber.Cmp(oldLeaf.SerialNumber) == 0 {
		t.Errorf("re-issued certificate has the old serial number")
	}
}

// A Secret certhub did not write is never overwritten silently: the
// Certificate says so, until whoever may write the Secret grants it with the
// adopt annotation on the Secret (looked at again every
// --issuer-retry-interval).
func TestForeignSecretIsNotOverwrittenUntilAdopted(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[1]
	ensureNamespace(t, cp.Client, "foreign")
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "foreign", Name: "legacy-tls"},
		Data:       map[string][]byte{"tls.crt": []byte("hand-made")},
	}
	if err := cp.Client.Create(ctx, foreign); err != nil {
		t.Fatalf("create foreign Secret: %v", err)
	}
	crt := newCertificate("foreign", "legacy", "legacy.example.com")
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatalf("create Certificate: %v", err)
	}
	key := client.ObjectKeyFromObject(crt)
	notReady := waitFor(t, cp.Client, key, "Ready=False/SecretNotOwned", func(c *cmapi.Certificate) bool {
		rc := readyCondition(c)
		return rc != nil && rc.Status == cmmeta.ConditionFalse && rc.Reason == reasons.SecretNotOwned
	})
	if msg := readyCondition(notReady).Message; !bytes.Contains([]byte(msg), []byte(hubapi.AdoptSecretAnnotation)) {
		t.Errorf("message %q does not tell the user how to opt in", msg)
	}
	got := &corev1.Secret{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatalf("get foreign Secret: %v", err)
	}
	if string(got.Data["tls.crt"]) != "hand-made" || len(got.Data) != 1 {
		t.Fatalf("foreign Secret was modified: %v", got.Data)
	}

	// Adoption is granted on the Secret, by whoever may write it.
	patch := client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{hubapi.AdoptSecretAnnotation: crt.Name}
	if err := cp.Client.Patch(ctx, got, patch); err != nil {
		t.Fatalf("annotate Secret: %v", err)
	}
	adopted := waitReady(t, cp.Client, key)
	s, _ := checkIssuedKeepType(t, cp.Client, adopted, corev1.SecretTypeOpaque)
	if s.Labels[hubapi.ManagedByLabel] != hubapi.ManagedByValue {
		t.Errorf("adopted Secret lacks the ownership label")
	}
}

// A Certificate naming an issuer that does not exist in the hub says so.
func TestMissingIssuerIsReported(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[0]
	ensureNamespace(t, cp.Client, "noissuer")
	crt := newCertificate("noissuer", "orphan", "orphan.example.com")
	crt.Spec.IssuerRef.Name = "does-not-exist"
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatalf("create Certificate: %v", err)
	}
	waitFor(t, cp.Client, client.ObjectKeyFromObject(crt), "Ready=False/IssuerNotFound", func(c *cmapi.Certificate) bool {
		rc := readyCondition(c)
		return rc != nil && rc.Status == cmmeta.ConditionFalse && rc.Reason == issuers.ReasonIssuerNotFound
	})
	err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "noissuer", Name: "orphan-tls"}, &corev1.Secret{})
	if err == nil {
		t.Errorf("a Secret was written although the issuer does not exist")
	}
}

// Creates Certificates one after another and reports the wall time from
// Create to Ready as seen by a client (the number the closing note quotes).
func TestCreateToReadyWallTime(t *testing.T) {
	const n = 12
	ctx := context.Background()
	cp := bed.Downstreams[1]
	ensureNamespace(t, cp.Client, "latency")
	durations := make([]time.Duration, 0, n)
	for i := range n {
		crt := newCertificate("latency", fmt.Sprintf("c%02d", i), fmt.Sprintf("c%02d.latency.example.com", i))
		start := time.Now()
		if err := cp.Client.Create(ctx, crt); err != nil {
			t.Fatalf("create Certificate: %v", err)
		}
		got := &cmapi.Certificate{}
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(crt), got); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return isReady(got), nil
		})
		if err != nil {
			t.Fatalf("Certificate %s never became Ready: %v", crt.Name, err)
		}
		durations = append(durations, time.Since(start))
		checkIssued(t, cp.Client, got)
	}
	slices.Sort(durations)
	t.Logf("create→Ready wall time over %d Certificates: median %s, min %s, max %s",
		n, durations[n/2].Round(time.Millisecond), durations[0].Round(time.Millisecond), durations[n-1].Round(time.Millisecond))
}
