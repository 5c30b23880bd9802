package issuance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/test/fixture"
)

// A second writer replaces tls.key after every issuance, so every issuance
// looks broken a moment later (KeyMismatch). The loop guard stops the
// Certificate after DefaultLoopMaxIssuances issuances with a reason naming
// the loop and the trigger, a Warning Event and the metric; nothing more is
// issued while the writer goes on; a manual trigger issues again.
func TestLoopGuardStopsAFightOverTheSecret(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "loop")
	crt := fixture.Certificate("loop", "fought", issuerName)
	if err := c.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	loopsBefore, _ := fixture.Gauge(t, "certhub_certificate_issuance_loops_total", map[string]string{"cluster": bed.Downstreams[0].Name})

	foreign, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	foreignPEM, err := pki.EncodePrivateKey(foreign, cmapi.PKCS1)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var overwrites int
	wg.Go(func() {
		key := client.ObjectKey{Namespace: "loop", Name: crt.Spec.SecretName}
		_ = wait.PollUntilContextCancel(contextUntil(stop), 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			s := &corev1.Secret{}
			if err := c.Get(ctx, key, s); err != nil || string(s.Data[corev1.TLSPrivateKeyKey]) == string(foreignPEM) {
				return false, nil
			}
			patch := client.MergeFrom(s.DeepCopy())
			s.Data[corev1.TLSPrivateKeyKey] = foreignPEM
			if c.Patch(ctx, s, patch) == nil {
				overwrites++
			}
			return false, nil
		})
	})
	stopWriter := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWriter()

	stopped := fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "Ready=False/"+reasons.IssuanceLoop, fixture.NotReadyWith(reasons.IssuanceLoop))
	msg := fixture.Condition(stopped, cmapi.CertificateConditionReady).Message
	t.Logf("stopped at revision %d: %s", revision(stopped), msg)
	if revision(stopped) != certsync.DefaultLoopMaxIssuances {
		t.Errorf("revision %d when the guard tripped, want %d (one generation, no other trigger)", revision(stopped), certsync.DefaultLoopMaxIssuances)
	}
	for _, want := range []string{"issued 5 times", "generation 1", reasons.KeyMismatch, "paused until"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if stopped.Status.LastFailureTime == nil || stopped.Status.FailedIssuanceAttempts == nil || *stopped.Status.FailedIssuanceAttempts != 1 {
		t.Errorf("lastFailureTime %v failedIssuanceAttempts %v, want set and 1", stopped.Status.LastFailureTime, stopped.Status.FailedIssuanceAttempts)
	}
	waitWarningEvent(t, c, crt, reasons.IssuanceLoop)
	if loops, _ := fixture.Gauge(t, "certhub_certificate_issuance_loops_total", map[string]string{"cluster": bed.Downstreams[0].Name}); loops != loopsBefore+1 {
		t.Errorf("certhub_certificate_issuance_loops_total went %v → %v, want +1", loopsBefore, loops)
	}

	// The writer keeps breaking the Secret: nothing is issued meanwhile.
	logged := issuancesLogged("loop", "fought")
	if logged != certsync.DefaultLoopMaxIssuances {
		t.Errorf("the hub logged %d issuances, want %d", logged, certsync.DefaultLoopMaxIssuances)
	}
	fixture.ExpectStable(t, c, []*cmapi.Certificate{stopped}, stableFor, func() int { return issuancesLogged("loop", "fought") })
	stopWriter()
	t.Logf("the second writer overwrote tls.key %d times", overwrites)

	// A manual trigger (`cmctl renew`) is a fresh start.
	cur := &cmapi.Certificate{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(crt), cur); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	cur.Status.Conditions = append(cur.Status.Conditions, cmapi.CertificateCondition{Type: cmapi.CertificateConditionIssuing,
		Status: cmmeta.ConditionTrue, Reason: "ManuallyTriggered", LastTransitionTime: &now, ObservedGeneration: cur.Generation})
	if err := c.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	healed := fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	if revision(healed) != certsync.DefaultLoopMaxIssuances+1 || healed.Status.FailedIssuanceAttempts != nil {
		t.Errorf("after the manual trigger: revision %d failedIssuanceAttempts %v, want %d and none",
			revision(healed), healed.Status.FailedIssuanceAttempts, certsync.DefaultLoopMaxIssuances+1)
	}
	expectStable(t, c, healed)
}

// contextUntil is a context cancelled when stop is closed.
func contextUntil(stop <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	return ctx
}

// An issuerRef naming an external issuer group gets a terminal Ready=False
// naming the group, and the hub never tries to issue it (it used to try
// every IssuerRetryInterval — 1s in these tests — and log each attempt).
func TestExternalIssuerGroupIsTerminal(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "external")
	crt := fixture.Certificate("external", "pca", "my-pca")
	crt.Spec.IssuerRef = cmmeta.IssuerReference{Name: "my-pca", Kind: "AWSPCAClusterIssuer", Group: "awspca.cert-manager.io"}
	if err := c.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	got := fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "Ready=False/"+issuers.ReasonIssuerNotSupported, fixture.NotReadyWith(issuers.ReasonIssuerNotSupported))
	if msg := fixture.Condition(got, cmapi.CertificateConditionReady).Message; !strings.Contains(msg, `"awspca.cert-manager.io"`) {
		t.Errorf("message %q does not name the group", msg)
	}
	deadline := time.Now().Add(3 * time.Second) // three of the hub's 1s issuer retries
	for time.Now().Before(deadline) {
		if n := issuancesLogged("external", "pca"); n != 0 {
			t.Fatalf("the hub tried to issue for an external issuer group %d times", n)
		}
		time.Sleep(100 * time.Millisecond) // the poll interval of a check that must hold for the whole period
	}
}
