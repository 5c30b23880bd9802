package certsync

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"strconv"
	"strings"
	"sync"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/writegate"
)

// fakeMigration is a cluster's mode and Writes answer, recording the plan.
type fakeMigration struct {
	mode   writegate.Mode
	writes bool
	// held: namespaces whose status writes are held back, with why.
	held map[string]string

	mu   sync.Mutex
	plan map[string]writegate.Verdict
}

func (f *fakeMigration) Mode(multicluster.ClusterName) writegate.Mode { return f.mode }
func (f *fakeMigration) Writes(multicluster.ClusterName) bool         { return f.writes }
func (f *fakeMigration) HoldsStatus(_ multicluster.ClusterName, ns string) string {
	return f.held[ns]
}
func (f *fakeMigration) Plan(_ multicluster.ClusterName, v writegate.Verdict) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plan == nil {
		f.plan = map[string]writegate.Verdict{}
	}
	f.plan[v.Namespace+"/"+v.Name] = v
}
func (f *fakeMigration) Forget(_ multicluster.ClusterName, ns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.plan, ns+"/"+name)
}
func (f *fakeMigration) Subscribe(func(multicluster.ClusterName)) {}

// vouchingCA is caIssuer that tells whether it signed a certificate
// (issuers.Voucher, as the CA issuer does): same says.
type vouchingCA struct {
	caIssuer
	same bool
}

func (v vouchingCA) Issued(*x509.Certificate) bool { return v.same }

// cmIssuerRef is cert-manager's own CA Issuer, before the move.
var cmIssuerRef = cmmeta.IssuerReference{Name: "cm-ca", Kind: cmapi.IssuerKind, Group: "cert-manager.io"}

// certManagersSecret is the Secret cert-manager's issuing controller wrote
// for crt from its issuer ref (signed by the test CA), without any mark
// of the hub; and the request of that revision.
func certManagersSecret(t *testing.T, crt *cmapi.Certificate, ref cmmeta.IssuerReference) (*corev1.Secret, *cmapi.CertificateRequest) {
	t.Helper()
	old := crt.DeepCopy()
	old.Spec.IssuerRef = ref
	s := issuedSecret(t, old, false)
	delete(s.Labels, hubapi.ManagedByLabel)
	for k := range s.Annotations {
		if strings.HasPrefix(k, "certhub.io/") {
			delete(s.Annotations, k)
		}
	}
	key, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	return s, request(t, old, 1, key)
}

// request is cert-manager's CertificateRequest for revision rev of crt,
// with a CSR of key.
func request(t *testing.T, crt *cmapi.Certificate, rev int, key crypto.Signer) *cmapi.CertificateRequest {
	t.Helper()
	csr, err := pki.GenerateCSR(crt)
	if err != nil {
		t.Fatal(err)
	}
	der, err := pki.EncodeCSR(csr, key)
	if err != nil {
		t.Fatal(err)
	}
	r := strconv.Itoa(rev)
	return &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: crt.Namespace, Name: crt.Name + "-" + r,
			Annotations:     map[string]string{cmapi.CertificateRequestRevisionAnnotationKey: r, cmapi.CertificateNameKey: crt.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(crt, cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind))}},
		Spec: cmapi.CertificateRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			IssuerRef: crt.Spec.IssuerRef, Duration: crt.Spec.Duration, Usages: crt.Spec.Usages},
	}
}

// A Certificate whose Secret cert-manager wrote, now pointed at a hub
// issuer: taken over without a hand annotation. Kept when the issuer vouches
// for the certificate (the same CA), re-issued otherwise; in a cluster the
// hub only observes, the same decision is planned and nothing is written.
func TestTakeOverFromCertManager(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sameName  bool             // cert-manager's issuer had the hub issuer's name
		sameCA    bool             // and its CA (the hub's issuer vouches)
		migration *fakeMigration   // nil: no migration gate (issue)
		action    writegate.Action // planned, when observed
		kept      bool
		reissued  bool
	}{
		{name: "same CA: kept, cert-manager's stale requests dropped", sameCA: true, kept: true},
		{name: "another CA: re-issued", reissued: true},
		{name: "same name, same CA: kept", sameName: true, sameCA: true, kept: true},
		{name: "same name, another CA: re-issued", sameName: true, reissued: true},
		{name: "observed, same CA: Adopt planned, nothing written", sameCA: true, migration: &fakeMigration{mode: writegate.Observe}, action: writegate.ActionAdopt},
		{name: "observed, another CA: Reissue planned, nothing written", migration: &fakeMigration{mode: writegate.Observe}, action: writegate.ActionReissue},
		{name: "issue, cert-manager active: nothing written", sameCA: true, migration: &fakeMigration{mode: writegate.Issue}, action: writegate.ActionAdopt},
		{name: "off: nothing decided", sameCA: true, migration: &fakeMigration{mode: writegate.Off}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crt := testCertificate()
			crt.UID = types.UID("uid-web")
			ref := cmIssuerRef
			if tc.sameName {
				ref = crt.Spec.IssuerRef
			}
			secret, current := certManagersSecret(t, crt, ref)
			// cert-manager saw the new issuerRef before it stopped: Issuing
			// with a request in flight for revision 2.
			crt.Status.Revision = ptr.To(1)
			crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
				Reason: "IncorrectIssuer", Message: "Issuing certificate as Secret was previously issued by Issuer \"cm-ca\""}}
			key, err := pki.GenerateECPrivateKey(256)
			if err != nil {
				t.Fatal(err)
			}
			inFlight := request(t, crt, 2, key)
			other := testCertificate()
			other.Name, other.UID = "api", "uid-api"
			unrelated := request(t, other, 2, key)
			h := newReconcilerHarness(t, nil, crt, secret, current, inFlight, unrelated)
			h.issue.voucher = vouchingCA{same: tc.sameCA}
			if tc.migration != nil {
				h.r.opts.Migration = tc.migration
			}
			before := leafOf(t, secret)

			h.reconcile("web")

			got, s := h.certificate("web"), h.secret("web-tls")
			after := leafOf(t, s)
			written := s.Labels[hubapi.ManagedByLabel] == hubapi.ManagedByValue
			if tc.kept || tc.reissued {
				if c := ready(got); c == nil || c.Status != cmmeta.ConditionTrue || !written {
					t.Fatalf("not taken over: Ready %+v, Secret labels %v", c, s.Labels)
				}
				if kept := after.SerialNumber.Cmp(before.SerialNumber) == 0; kept != tc.kept || (rev(got) == 1) != tc.kept {
					t.Errorf("serial kept %t, revision %d; want kept %t", kept, rev(got), tc.kept)
				}
				if apiutilCondition(got, cmapi.CertificateConditionIssuing) != nil {
					t.Error("cert-manager's Issuing condition outlived the take-over")
				}
				// In flight: gone. The current one: gone when it names
				// cert-manager's old issuer (cert-manager back would see
				// RequestChanged), kept when it still matches.
				for cr, gone := range map[*cmapi.CertificateRequest]bool{inFlight: true, current: !tc.sameName} {
					err := h.c.Get(context.Background(), client.ObjectKeyFromObject(cr), &cmapi.CertificateRequest{})
					if (err != nil) != gone {
						t.Errorf("request %s: deleted %t; want %t", cr.Name, err != nil, gone)
					}
				}
			} else {
				if written || after.SerialNumber.Cmp(before.SerialNumber) != 0 || rev(got) != 1 || ready(got) != nil {
					t.Errorf("wrote while not writing: Secret labels %v, revision %d, Ready %+v", s.Labels, rev(got), ready(got))
				}
				for _, cr := range []*cmapi.CertificateRequest{current, inFlight} {
					if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(cr), &cmapi.CertificateRequest{}); err != nil {
						t.Errorf("request %s: %v; nothing may be deleted", cr.Name, err)
					}
				}
				if ev := h.events(); ev != "" {
					t.Errorf("Events while not writing: %s", ev)
				}
			}
			if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(unrelated), &cmapi.CertificateRequest{}); err != nil {
				t.Errorf("another Certificate's request: %v", err)
			}
			if m := tc.migration; m != nil {
				v, ok := m.plan["shop/web"]
				if (tc.action != "") != ok || v.Action != tc.action || (ok && !v.Adopting) {
					t.Errorf("plan %+v (planned %t); want %q, adopting", v, ok, tc.action)
				}
			}
		})
	}
}

func leafOf(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	c, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStaleRequest(t *testing.T) {
	crt := testCertificate()
	crt.UID = "uid-web"
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	moved := crt.DeepCopy()
	moved.Spec.IssuerRef = cmIssuerRef
	other := crt.DeepCopy()
	other.UID = "uid-other"
	for _, tc := range []struct {
		name    string
		cr      *cmapi.CertificateRequest
		current int
		stale   string // fragment of why; "" : kept
	}{
		{name: "the current revision, matching", cr: request(t, crt, 3, key), current: 3},
		{name: "the current revision, another issuerRef", cr: request(t, moved, 3, key), current: 3, stale: "spec.issuerRef"},
		{name: "in flight", cr: request(t, crt, 4, key), current: 3, stale: "in flight for revision 4"},
		{name: "an older revision, even mismatching", cr: request(t, moved, 2, key), current: 3},
		{name: "another Certificate's", cr: request(t, other, 4, key), current: 3},
		{name: "no revision annotation", cr: func() *cmapi.CertificateRequest {
			r := request(t, crt, 4, key)
			delete(r.Annotations, cmapi.CertificateRequestRevisionAnnotationKey)
			return r
		}(), current: 3},
		{name: "an unparsable CSR (cert-manager ignores it too)", cr: func() *cmapi.CertificateRequest {
			r := request(t, moved, 3, key)
			r.Spec.Request = []byte("garbage")
			return r
		}(), current: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := staleRequest(tc.cr, crt, tc.current)
			if (why == "") != (tc.stale == "") || !strings.Contains(why, tc.stale) {
				t.Errorf("staleRequest = %q; want %q", why, tc.stale)
			}
		})
	}
}

// A Certificate naming the hub through certhub.io is cert-manager's to run
// (the hub signs its requests, crsign): certsync writes nothing on it, in
// any mode, valid or not; another external group is still refused.
func TestCertificatesForCRSignAreLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		group   string
		refused bool
	}{
		{name: "certhub.io: left", group: hubapi.GroupName},
		{name: "another external issuer: refused", group: "awspca.cert-manager.io", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crt := testCertificate()
			crt.Spec.IssuerRef.Group = tc.group
			h := newReconcilerHarness(t, nil, crt)
			h.reconcile("web")
			got := h.certificate("web")
			if c := ready(got); (c != nil) != tc.refused {
				t.Errorf("Ready %+v; want a condition only when refused (%t)", c, tc.refused)
			}
			if h.secret("web-tls") != nil {
				t.Error("a Secret was written")
			}
			if ev := h.events(); (ev != "") != tc.refused {
				t.Errorf("Events %q", ev)
			}
		})
	}
}

// A namespace where a field manager named like cert-manager's wrote lately
// gets its Secret, not its status, until the hold ends; the neighbouring
// namespace gets both.
func TestHeldNamespaceGetsNoStatusWrite(t *testing.T) {
	held, neighbour := testCertificate(), testCertificate()
	held.Namespace, neighbour.Namespace = "tenant", "shop"
	h := newReconcilerHarness(t, nil, held, neighbour)
	h.r.opts.Migration = &fakeMigration{mode: writegate.Issue, writes: true, held: map[string]string{"tenant": "Certificate tenant/x was written by a field manager named like cert-manager's"}}
	for _, ns := range []string{"tenant", "shop"} {
		if _, err := h.r.Reconcile(context.Background(), mcreconcile.Request{ClusterName: "east", Request: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "web"}}}); err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
	}
	get := func(ns string) (*cmapi.Certificate, *corev1.Secret) {
		crt, s := &cmapi.Certificate{}, &corev1.Secret{}
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, crt); err != nil {
			t.Fatal(err)
		}
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web-tls"}, s); err != nil {
			t.Fatalf("%s: the Secret was not written: %v", ns, err)
		}
		return crt, s
	}
	if crt, _ := get("tenant"); ready(crt) != nil {
		t.Errorf("tenant: status written while held: %+v", crt.Status)
	}
	if crt, _ := get("shop"); ready(crt) == nil || ready(crt).Status != cmmeta.ConditionTrue {
		t.Errorf("shop: Ready %+v; want the neighbour's status written", ready(crt))
	}
}

// A certificate cert-manager wrote, from the same CA, for a name today's
// policy denies is never taken over: Ready=False/PolicyDenied, nothing
// written, the Secret left as cert-manager wrote it — every time.
func TestNoAdoptionOfWhatThePolicyDenies(t *testing.T) {
	for i := range 20 {
		crt := testCertificate()
		crt.UID = types.UID("uid-web")
		secret, current := certManagersSecret(t, crt, crt.Spec.IssuerRef)
		h := newReconcilerHarness(t, nil, crt, secret, current)
		h.issue.voucher = vouchingCA{same: true}
		withPolicy(h).d = policy.Decision{Message: `denied by every IssuancePolicy that selects it (prod); prod: spec.dnsNames "web.example.com" is not allowed`}
		before := h.secret("web-tls").ResourceVersion
		h.reconcile("web")
		c := ready(h.certificate("web"))
		if c == nil || c.Reason != reasons.PolicyDenied || !strings.Contains(c.Message, "Not taken over from cert-manager") {
			t.Fatalf("try %d: Ready %+v; want PolicyDenied, not taken over", i, c)
		}
		if s := h.secret("web-tls"); s.ResourceVersion != before || s.Labels[hubapi.ManagedByLabel] == hubapi.ManagedByValue {
			t.Fatalf("try %d: cert-manager's Secret was written (labels %v)", i, s.Labels)
		}
	}
}
