package certsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/issuers"
)

// A new Certificate is issued: the Secret in cert-manager's format with
// certhub's marks, status Ready with revision 1, a Normal Event; requeued at
// the renewal time. A second reconcile changes nothing.
func TestReconcileIssuesOnceThenStaysStill(t *testing.T) {
	h := newReconcilerHarness(t, nil, testCertificate())
	res := h.reconcile("web")
	crt := h.certificate("web")
	s := h.secret("web-tls")
	if s == nil || s.Labels[hubapi.ManagedByLabel] != hubapi.ManagedByValue || s.Annotations[hubapi.WrittenByAnnotation] != "replica-0/3" ||
		!strings.HasPrefix(s.Annotations[hubapi.IssuancesAnnotation], "generation=0,count=1,") {
		t.Fatalf("Secret %+v", s)
	}
	if c := ready(crt); c == nil || c.Status != cmmeta.ConditionTrue || rev(crt) != 1 {
		t.Fatalf("status %+v", crt.Status)
	}
	if want := crt.Status.RenewalTime.Sub(h.clk.Now()); res.RequeueAfter != want {
		t.Errorf("requeue after %s, want the renewal time (%s)", res.RequeueAfter, want)
	}
	if ev := h.events(); !strings.Contains(ev, "Normal "+reasons.Issuing) {
		t.Errorf("events %q", ev)
	}
	version := s.ResourceVersion
	h.reconcile("web")
	if s2 := h.secret("web-tls"); s2.ResourceVersion != version || rev(h.certificate("web")) != 1 {
		t.Errorf("a second reconcile of an up-to-date Certificate wrote again")
	}
}

// Each trigger leads to a new revision; each bad input to Ready=False with its reason.
func TestReconcileTriggersAndOutcomes(t *testing.T) {
	tests := []struct {
		name string
		// before runs after a first issuance (when issued) and before the reconcile under test.
		issued  bool
		crt     func(*cmapi.Certificate)
		before  func(h *reconcilerHarness)
		reason  string // Ready=False reason, or "" for Ready=True
		rev     int
		requeue time.Duration // 0: not checked; -1: no requeue
	}{
		{name: "renewal time reached", issued: true, before: func(h *reconcilerHarness) { h.clk.Step(61 * 24 * time.Hour) }, rev: 2},
		{name: "spec changed", issued: true, before: func(h *reconcilerHarness) {
			c := h.certificate("web")
			c.Spec.DNSNames = append(c.Spec.DNSNames, "www.example.com")
			c.Generation++
			if err := h.c.Update(context.Background(), c); err != nil {
				h.t.Fatal(err)
			}
		}, rev: 2},
		{name: "manual trigger (cmctl renew)", issued: true, before: func(h *reconcilerHarness) {
			c := h.certificate("web")
			c.Status.Conditions = append(c.Status.Conditions, cmapi.CertificateCondition{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue})
			if err := h.c.Status().Update(context.Background(), c); err != nil {
				h.t.Fatal(err)
			}
		}, rev: 2},
		{name: "Secret deleted", issued: true, before: func(h *reconcilerHarness) {
			if err := h.c.Delete(context.Background(), h.secret("web-tls")); err != nil {
				h.t.Fatal(err)
			}
		}, rev: 2},
		{name: "Secret metadata drifted: repaired, not re-issued", issued: true, before: func(h *reconcilerHarness) {
			s := h.secret("web-tls")
			delete(s.Annotations, cmapi.CommonNameAnnotationKey)
			if err := h.c.Update(context.Background(), s); err != nil {
				h.t.Fatal(err)
			}
		}, rev: 1},
		{name: "invalid spec", crt: func(c *cmapi.Certificate) { c.Spec.CommonName, c.Spec.DNSNames = "", nil }, reason: reasons.InvalidNames, requeue: -1},
		{name: "external issuer group", crt: func(c *cmapi.Certificate) {
			c.Spec.IssuerRef = cmmeta.IssuerReference{Name: "pca", Kind: "AWSPCAClusterIssuer", Group: "awspca.cert-manager.io"}
		}, reason: issuers.ReasonIssuerNotSupported, requeue: -1},
		{name: "issuer not found: retried", before: func(h *reconcilerHarness) {
			h.issue.err = &issuers.Error{Reason: issuers.ReasonIssuerNotFound, Message: "ClusterIssuer \"ca\" not found in the hub"}
		}, reason: issuers.ReasonIssuerNotFound, requeue: DefaultIssuerRetryInterval},
		{name: "issuer kind not supported: terminal", before: func(h *reconcilerHarness) {
			h.issue.err = &issuers.Error{Reason: issuers.ReasonIssuerNotSupported, Message: "x", Terminal: true}
		}, reason: issuers.ReasonIssuerNotSupported, requeue: -1},
		{name: "a Secret certhub did not write", before: func(h *reconcilerHarness) {
			if err := h.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-tls"}}); err != nil {
				h.t.Fatal(err)
			}
		}, reason: reasons.SecretNotOwned},
		{name: "keystore password Secret missing", crt: func(c *cmapi.Certificate) {
			c.Spec.Keystores = &cmapi.CertificateKeystores{PKCS12: &cmapi.PKCS12Keystore{Create: true,
				PasswordSecretRef: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: "pw"}, Key: "k"}}}
		}, reason: reasons.KeystorePasswordNotFound, requeue: DefaultIssuerRetryInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crt := testCertificate()
			if tt.crt != nil {
				tt.crt(crt)
			}
			h := newReconcilerHarness(t, nil, crt)
			if tt.issued {
				h.reconcile("web")
				h.events()
			}
			if tt.before != nil {
				tt.before(h)
			}
			res := h.reconcile("web")
			got := h.certificate("web")
			c := ready(got)
			if c == nil {
				t.Fatalf("no Ready condition: %+v", got.Status)
			}
			if tt.reason == "" {
				if c.Status != cmmeta.ConditionTrue || rev(got) != tt.rev {
					t.Fatalf("Ready %s/%s revision %d, want True revision %d", c.Status, c.Reason, rev(got), tt.rev)
				}
				return
			}
			if c.Status != cmmeta.ConditionFalse || c.Reason != tt.reason {
				t.Fatalf("Ready %s/%s (%s), want False/%s", c.Status, c.Reason, c.Message, tt.reason)
			}
			if ev := h.events(); !strings.Contains(ev, "Warning "+tt.reason) {
				t.Errorf("no Warning %s event: %q", tt.reason, ev)
			}
			switch {
			case tt.requeue == -1 && res.RequeueAfter != 0:
				t.Errorf("requeued after %s; a terminal problem waits for a change", res.RequeueAfter)
			case tt.requeue > 0 && res.RequeueAfter != tt.requeue:
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tt.requeue)
			}
			if tt.reason != reasons.SecretNotOwned && h.secret("web-tls") != nil && !tt.issued {
				t.Errorf("a Secret was written for a Certificate that cannot be issued")
			}
		})
	}
}

// A replica that does not own the cluster writes nothing.
func TestReconcileNotOwner(t *testing.T) {
	h := newReconcilerHarness(t, nil, testCertificate())
	h.own.owned = false
	h.reconcile("web")
	if h.secret("web-tls") != nil || ready(h.certificate("web")) != nil {
		t.Fatalf("a replica that does not own the cluster wrote")
	}
}

// A status write that meets a concurrent change is requeued quietly, and
// decided again on fresh data.
func TestReconcileStatusConflict(t *testing.T) {
	conflicts := 0
	funcs := &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if conflicts < 1 {
			conflicts++
			return apierrors.NewConflict(schema.GroupResource{Group: "cert-manager.io", Resource: "certificates"}, obj.GetName(), errors.New("modified"))
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}}
	crt := testCertificate()
	crt.Spec.CommonName, crt.Spec.DNSNames = "", nil // invalid: a status-only write
	h := newReconcilerHarness(t, funcs, crt)
	if res := h.reconcile("web"); res.RequeueAfter != conflictRequeue {
		t.Fatalf("a conflict was not requeued (result %+v)", res)
	}
	h.reconcile("web")
	if c := ready(h.certificate("web")); c == nil || c.Reason != reasons.InvalidNames {
		t.Fatalf("not decided again after the conflict: %+v", c)
	}
}

// A Secret broken after every issuance (a second writer) is issued
// LoopMaxIssuances times, then paused with IssuanceLoopDetected until the
// back-off is over; deleting the Certificate forgets it.
func TestReconcileLoopGuard(t *testing.T) {
	h := newReconcilerHarness(t, nil, testCertificate())
	other, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	otherPEM, err := pki.EncodePrivateKey(other, cmapi.PKCS1)
	if err != nil {
		t.Fatal(err)
	}
	var res reconcile.Result
	for i := 0; i < 10; i++ {
		res = h.reconcile("web")
		if s := h.secret("web-tls"); s != nil {
			s.Data[corev1.TLSPrivateKeyKey] = otherPEM
			if err := h.c.Update(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		}
	}
	crt := h.certificate("web")
	c := ready(crt)
	if c == nil || c.Reason != reasons.IssuanceLoop || rev(crt) != DefaultLoopMaxIssuances {
		t.Fatalf("after 10 reconciles of a fought-over Secret: Ready %+v revision %d", c, rev(crt))
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > DefaultLoopBackoff {
		t.Errorf("requeue after %s, want the back-off", res.RequeueAfter)
	}
	if ev := h.events(); strings.Count(ev, "Warning "+reasons.IssuanceLoop) != 1 {
		t.Errorf("want exactly one %s event: %q", reasons.IssuanceLoop, ev)
	}
	h.clk.Step(DefaultLoopBackoff)
	h.reconcile("web")
	if got := rev(h.certificate("web")); got != DefaultLoopMaxIssuances+1 {
		t.Errorf("revision %d after the back-off, want one more try (%d)", got, DefaultLoopMaxIssuances+1)
	}
	if err := h.c.Delete(context.Background(), h.certificate("web")); err != nil {
		t.Fatal(err)
	}
	h.reconcile("web")
}

// Two Certificates name one Secret: the older one owns it and is issued; the
// other gets Ready=False/DuplicateSecretName, is not issued, and is looked at
// again in 3 minutes, as cert-manager's trigger controller does. The same
// with the Certificates found by the spec.secretName index (the hub's way)
// and by listing the namespace; a third Certificate with its own Secret,
// older than both, changes nothing.
func TestReconcileDuplicateSecretName(t *testing.T) {
	for _, indexed := range []bool{true, false} {
		t.Run(fmt.Sprintf("indexed %t", indexed), func(t *testing.T) { duplicateSecretName(t, indexed) })
	}
}

func duplicateSecretName(t *testing.T, indexed bool) {
	older := testCertificate()
	older.Name = "older"
	older.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	web := testCertificate()
	web.CreationTimestamp = metav1.NewTime(time.Now())
	oldest := testCertificate()
	oldest.Name, oldest.Spec.SecretName = "api", "api-tls"
	oldest.CreationTimestamp = metav1.NewTime(time.Now().Add(-2 * time.Hour))
	h := newHarness(t, nil, indexed, older, web, oldest)
	res := h.reconcile("web")
	c := ready(h.certificate("web"))
	if c == nil || c.Reason != reasons.DuplicateSecretName || !strings.Contains(c.Message, `"older" owns it`) || res.RequeueAfter != duplicateRequeue {
		t.Fatalf("the younger duplicate: %+v, requeue %s", c, res.RequeueAfter)
	}
	if h.secret("web-tls") != nil {
		t.Fatalf("the duplicate wrote the Secret")
	}
	h.reconcile("older")
	if s := h.secret("web-tls"); s == nil || s.Annotations[cmapi.CertificateNameKey] != "older" {
		t.Fatalf("the owner was not issued: %+v", s)
	}
	// The Secret's annotation decides over age once it exists.
	h.reconcile("web")
	if c := ready(h.certificate("web")); c == nil || c.Reason != reasons.DuplicateSecretName {
		t.Fatalf("after the owner's issuance: %+v", c)
	}
}

// Adoption of a Secret certhub did not write is granted on the Secret, for
// one Certificate; the Certificate cannot grant it to itself; typed Secrets
// are never taken over.
func TestAdoptionIsGrantedOnTheSecret(t *testing.T) {
	foreign := func(typ corev1.SecretType, ann map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-tls", Annotations: ann}, Type: typ}
	}
	selfServed := testCertificate()
	selfServed.Annotations = map[string]string{hubapi.AdoptSecretAnnotation: "true"}
	for _, tc := range []struct {
		name   string
		crt    *cmapi.Certificate
		secret *corev1.Secret
		adopt  bool
		says   string
	}{
		{"granted on the Secret", testCertificate(), foreign(corev1.SecretTypeOpaque, map[string]string{hubapi.AdoptSecretAnnotation: "web"}), true, ""},
		{"granted to another Certificate", testCertificate(), foreign(corev1.SecretTypeOpaque, map[string]string{hubapi.AdoptSecretAnnotation: "api"}), false, `annotate the Secret (whoever may write it): certhub.io/adopt-secret: "web"`},
		{"self-served from the Certificate", selfServed, foreign(corev1.SecretTypeTLS, nil), false, "annotate the Secret"},
		{"a typed Secret, even granted", testCertificate(), foreign(corev1.SecretTypeDockerConfigJson, map[string]string{hubapi.AdoptSecretAnnotation: "web"}), false, "never takes over typed Secrets"},
		{"a service-account token, even granted", testCertificate(), foreign(corev1.SecretTypeServiceAccountToken, map[string]string{hubapi.AdoptSecretAnnotation: "web"}), false, "kubernetes.io/service-account-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.secret.Type == corev1.SecretTypeDockerConfigJson {
				tc.secret.Data = map[string][]byte{corev1.DockerConfigJsonKey: []byte("{}")}
			}
			h := newReconcilerHarness(t, nil, tc.crt, tc.secret)
			res := h.reconcile("web")
			c := ready(h.certificate("web"))
			if tc.adopt {
				if c == nil || c.Status != cmmeta.ConditionTrue || h.secret("web-tls").Labels[hubapi.ManagedByLabel] != hubapi.ManagedByValue {
					t.Fatalf("not adopted: Ready %+v", c)
				}
				return
			}
			if c == nil || c.Reason != reasons.SecretNotOwned || !strings.Contains(c.Message, tc.says) {
				t.Fatalf("Ready %+v, want SecretNotOwned saying %q", c, tc.says)
			}
			if res.RequeueAfter != h.r.opts.IssuerRetryInterval {
				t.Errorf("requeue after %s, want %s (to look for a grant)", res.RequeueAfter, h.r.opts.IssuerRetryInterval)
			}
			if s := h.secret("web-tls"); s.Labels[hubapi.ManagedByLabel] == hubapi.ManagedByValue {
				t.Errorf("the Secret was taken over")
			}
		})
	}
}

// At most MaxConcurrentLargeKeys workers generate large keys; a Certificate
// that finds every slot taken frees its worker and comes back shortly.
func TestLargeKeysTakeASlot(t *testing.T) {
	crt := testCertificate()
	crt.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: 4096}
	h := newReconcilerHarness(t, nil, crt)
	h.r.largeKeys <- struct{}{} // another worker holds the only slot
	if res := h.reconcile("web"); res.RequeueAfter != largeKeyRetry || h.secret("web-tls") != nil {
		t.Fatalf("with the slot taken: requeue %s, Secret %v; want %s and nothing written", res.RequeueAfter, h.secret("web-tls") != nil, largeKeyRetry)
	}
	<-h.r.largeKeys
	h.reconcile("web")
	if h.secret("web-tls") == nil || len(h.r.largeKeys) != 0 {
		t.Fatalf("with the slot free: Secret written %v, slots held after %d", h.secret("web-tls") != nil, len(h.r.largeKeys))
	}
	small := testCertificate() // ECDSA: never waits for a slot
	small.Name, small.Spec.SecretName = "small", "small-tls"
	h2 := newReconcilerHarness(t, nil, small)
	h2.r.largeKeys <- struct{}{}
	h2.reconcile("small")
	if h2.secret("small-tls") == nil {
		t.Errorf("a small key waited for a large-key slot")
	}
}

// A Certificate the budget holds back says so once (Issuing=True, reason
// RateLimited), is asked again after the budget's wait, is issued when
// admitted, and the wait is no trigger of its own: once up to date, the
// budget is told it no longer waits.
func TestReconcileWaitsForTheBudget(t *testing.T) {
	crt := testCertificate()
	crt.CreationTimestamp = metav1.NewTime(time.Now())
	h := newReconcilerHarness(t, nil, crt)
	b := &fakeBudget{wait: 700 * time.Millisecond}
	h.r.opts.Budget = b
	res := h.reconcile("web")
	got := h.certificate("web")
	issuing := apiutil.GetCertificateCondition(got, cmapi.CertificateConditionIssuing)
	if res.RequeueAfter != b.wait || h.secret("web-tls") != nil || issuing == nil || issuing.Status != cmmeta.ConditionTrue || issuing.Reason != reasons.RateLimited {
		t.Fatalf("held back: requeue %s, Issuing %+v, Secret written %v", res.RequeueAfter, issuing, h.secret("web-tls") != nil)
	}
	if want := got.CreationTimestamp.Add(newCertificateBudgetDelay); !b.asked[0].Equal(want) || b.lanes[0] != budget.Urgent {
		t.Errorf("a new Certificate asked with due %s in lane %v, want creation + %s, urgent (it has no Secret)", b.asked[0], b.lanes[0], newCertificateBudgetDelay)
	}
	rv := got.ResourceVersion
	h.reconcile("web") // still waiting: nothing written again
	if h.certificate("web").ResourceVersion != rv {
		t.Error("a second wait wrote the status again")
	}
	b.open = true
	h.reconcile("web")
	got = h.certificate("web")
	if apiutil.GetCertificateCondition(got, cmapi.CertificateConditionIssuing) != nil || ready(got) == nil || ready(got).Status != cmmeta.ConditionTrue || rev(got) != 1 {
		t.Fatalf("admitted: status %+v", got.Status)
	}
	b.asked = nil
	h.reconcile("web")
	if len(b.asked) != 0 || len(b.forgot) == 0 || b.forgot[len(b.forgot)-1] != "east/shop/web" {
		t.Errorf("up to date: asked %v, forgot %v", b.asked, b.forgot)
	}
	// A renewal asks with its renewal time + half the rest of its life.
	h.clk.SetTime(got.Status.RenewalTime.Add(time.Minute))
	b.open = false
	h.reconcile("web")
	rt, na := got.Status.RenewalTime.Time, got.Status.NotAfter.Time
	if want := rt.Add(na.Sub(rt) / 2); len(b.asked) != 1 || !b.asked[0].Equal(want) || b.lanes[len(b.lanes)-1] != budget.Routine {
		t.Errorf("renewal asked with due %v in lanes %v, want %s, routine (the certificate still serves)", b.asked, b.lanes, want)
	}
	// The Secret lost (a replacement cluster, a restore): urgent again.
	if err := h.c.Delete(context.Background(), h.secret("web-tls")); err != nil {
		t.Fatal(err)
	}
	h.reconcile("web")
	if l := b.lanes[len(b.lanes)-1]; l != budget.Urgent {
		t.Errorf("its Secret deleted, the Certificate asked in lane %v, want urgent", l)
	}
}

// A status is output, never input: Issuing=True with reason OrderPending
// written by a downstream user, with no order in the hub, neither triggers
// an issuance of an up-to-date Certificate nor lets a new one skip the
// budget.
func TestForgedOrderPendingGetsNothing(t *testing.T) {
	forge := func(h *reconcilerHarness) {
		t.Helper()
		crt := h.certificate("web")
		apiutil.SetCertificateCondition(crt, crt.Generation, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue, issuers.ReasonOrderPending, "forged")
		if err := h.c.Status().Update(context.Background(), crt); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("up to date", func(t *testing.T) {
		h := newReconcilerHarness(t, nil, testCertificate())
		h.reconcile("web")
		version := h.secret("web-tls").ResourceVersion
		forge(h)
		h.reconcile("web")
		got := h.certificate("web")
		if h.secret("web-tls").ResourceVersion != version || rev(got) != 1 {
			t.Errorf("a forged OrderPending issued again (revision %d)", rev(got))
		}
		if c := apiutil.GetCertificateCondition(got, cmapi.CertificateConditionIssuing); c != nil {
			t.Errorf("the forged condition stays: %+v", c)
		}
	})
	t.Run("new", func(t *testing.T) {
		crt := testCertificate()
		crt.CreationTimestamp = metav1.NewTime(time.Now())
		h := newReconcilerHarness(t, nil, crt)
		b := &fakeBudget{wait: time.Second}
		h.r.opts.Budget = b
		forge(h)
		h.reconcile("web")
		if len(b.asked) != 1 || h.secret("web-tls") != nil {
			t.Errorf("budget asked %d times, Secret written %v: a forged OrderPending skipped the budget", len(b.asked), h.secret("web-tls") != nil)
		}
	})
}

// renewal.policy Disabled (cert-manager 1.21): issued once, no renewal
// time, no requeue, and still after its renewal time and its expiry.
func TestRenewalDisabledIsIssuedOnceAndStaysStill(t *testing.T) {
	crt := testCertificate()
	crt.Spec.Renewal = &cmapi.CertificateRenewal{Policy: cmapi.CertificateRenewalPolicyDisabled}
	h := newReconcilerHarness(t, nil, crt)
	if res := h.reconcile("web"); res.RequeueAfter != 0 {
		t.Errorf("requeued after %s with renewal disabled", res.RequeueAfter)
	}
	got := h.certificate("web")
	if c := ready(got); c == nil || c.Status != cmmeta.ConditionTrue || rev(got) != 1 || got.Status.RenewalTime != nil {
		t.Fatalf("status %+v", got.Status)
	}
	for _, at := range []time.Time{got.Status.NotAfter.Add(-time.Minute), got.Status.NotAfter.Add(time.Hour)} {
		h.clk.SetTime(at)
		h.reconcile("web")
		if r := rev(h.certificate("web")); r != 1 {
			t.Fatalf("at %s: revision %d, want 1 (never renewed)", at, r)
		}
	}
	if c := ready(h.certificate("web")); c == nil || c.Status != cmmeta.ConditionFalse || c.Reason != reasons.Expired {
		t.Errorf("expired with renewal disabled: Ready %+v, want False, %s", c, reasons.Expired)
	}
}
