package certsync

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
)

// fakePolicy answers every Evaluate with d (pending: not loaded yet).
type fakePolicy struct {
	d       policy.Decision
	pending bool
}

func (f *fakePolicy) Evaluate(string, *cmapi.Certificate, *x509.Certificate) (policy.Decision, bool) {
	return f.d, f.pending
}
func (f *fakePolicy) Subscribe(func()) {}

func withPolicy(h *reconcilerHarness) *fakePolicy {
	p := &fakePolicy{d: policy.Decision{Allowed: true}}
	h.r.opts.Policy = p
	return p
}

func TestReconcilePolicyDecisions(t *testing.T) {
	t.Run("denied: Ready=False, a Warning Event, nothing written", func(t *testing.T) {
		h := newReconcilerHarness(t, nil, testCertificate())
		withPolicy(h).d = policy.Decision{Message: `denied by every IssuancePolicy that selects it (dev); dev: spec.dnsNames "x" is not allowed`}
		if res := h.reconcile("web"); res.RequeueAfter != 0 {
			t.Errorf("requeue after %s; a denial waits for a policy change", res.RequeueAfter)
		}
		c := ready(h.certificate("web"))
		if c == nil || c.Status != cmmeta.ConditionFalse || c.Reason != reasons.PolicyDenied || !strings.Contains(c.Message, `(dev); dev: spec.dnsNames "x"`) {
			t.Fatalf("Ready %+v", c)
		}
		if h.secret("web-tls") != nil {
			t.Errorf("a Secret was written for a denied Certificate")
		}
		if ev := h.events(); !strings.Contains(ev, "Warning "+reasons.PolicyDenied) {
			t.Errorf("events %q", ev)
		}
	})
	t.Run("pending: retried soon, nothing written", func(t *testing.T) {
		h := newReconcilerHarness(t, nil, testCertificate())
		withPolicy(h).pending = true
		if res := h.reconcile("web"); res.RequeueAfter != policyPendingRequeue {
			t.Errorf("requeue after %s, want %s", res.RequeueAfter, policyPendingRequeue)
		}
		if ready(h.certificate("web")) != nil || h.secret("web-tls") != nil {
			t.Errorf("wrote before the policies were loaded")
		}
	})
	t.Run("an allowed sub-CA carries the policy's path length and name constraints", func(t *testing.T) {
		crt := testCertificate()
		crt.Spec.IsCA = true
		h := newReconcilerHarness(t, nil, crt)
		two := 2
		set, err := policy.Compile([]hubapi.IssuancePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "sub-ca"}, Spec: hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
			CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: &hubapi.StringValues{Values: []string{"*.example.com"}}, IsCA: true, MaxPathLen: &two}}}}, policy.Deny)
		if err != nil {
			t.Fatal(err)
		}
		h.r.opts.Policy = evaluator{set}
		h.reconcile("web")
		cert, err := pki.DecodeX509CertificateBytes(h.secret("web-tls").Data[corev1.TLSCertKey])
		if err != nil {
			t.Fatal(err)
		}
		if !cert.IsCA || cert.MaxPathLen != 2 {
			t.Errorf("IsCA %v MaxPathLen %d, want a CA with 2", cert.IsCA, cert.MaxPathLen)
		}
		if !slices.Equal(cert.PermittedDNSDomains, []string{".example.com"}) || !slices.Contains(cert.ExcludedEmailAddresses, "") || len(cert.ExcludedIPRanges) != 2 {
			t.Errorf("name constraints: permitted DNS %v, excluded email %v, IP %v; want the policy's", cert.PermittedDNSDomains, cert.ExcludedEmailAddresses, cert.ExcludedIPRanges)
		}
	})
	t.Run("default allow, a CA: signed by a SelfSigned issuer, denied for a hub CA", func(t *testing.T) {
		set, err := policy.Compile(nil, policy.Allow)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name       string
			selfSigned bool
		}{{"SelfSigned ClusterIssuer", true}, {"CA ClusterIssuer", false}} {
			crt := testCertificate()
			crt.Spec.IsCA = true
			h := newReconcilerHarness(t, nil, crt)
			h.r.opts.Policy = evaluator{set}
			if tc.selfSigned { // the hub's own resolver, reading a SelfSigned ClusterIssuer
				ci := &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}}}
				res, err := issuers.New(issuers.Options{Client: fake.NewClientBuilder().WithScheme(h.c.Scheme()).WithObjects(ci).Build(), Namespace: "hub"})
				if err != nil {
					t.Fatal(err)
				}
				h.r.opts.Issuers = res
			}
			h.reconcile("web")
			c := ready(h.certificate("web"))
			if tc.selfSigned {
				cert, err := pki.DecodeX509CertificateBytes(h.secret("web-tls").Data[corev1.TLSCertKey])
				if err != nil || !cert.IsCA || !issuers.IsSelfSigned(cert) || c == nil || c.Status != cmmeta.ConditionTrue {
					t.Errorf("%s: Ready %+v, certificate %v (%v); want a self-signed CA issued", tc.name, c, cert != nil && cert.IsCA, err)
				}
				continue
			}
			if c == nil || c.Reason != reasons.PolicyDenied || !strings.Contains(c.Message, "needs an IssuancePolicy that selects the Certificate and allows it (allowed.isCA: true") {
				t.Errorf("%s: Ready %+v; want PolicyDenied naming the policy it needs", tc.name, c)
			}
			if h.secret("web-tls") != nil {
				t.Errorf("%s: a Secret was written", tc.name)
			}
		}
	})
	t.Run("a kept sub-CA is re-issued when the policy now constrains it otherwise", func(t *testing.T) {
		crt := testCertificate()
		crt.Spec.IsCA, crt.Spec.CommonName, crt.Spec.DNSNames = true, "Team CA", nil // allowed before and after
		h := newReconcilerHarness(t, nil, crt)
		subCA := func(dns string, pathLen int) evaluator {
			set, err := policy.Compile([]hubapi.IssuancePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "sub-ca"}, Spec: hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
				CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: &hubapi.StringValues{Values: []string{dns}}, IsCA: true, MaxPathLen: &pathLen}}}}, policy.Deny)
			if err != nil {
				t.Fatal(err)
			}
			return evaluator{set}
		}
		h.r.opts.Policy = subCA("*.example.com", 1)
		h.reconcile("web")
		first, err := pki.DecodeX509CertificateBytes(h.secret("web-tls").Data[corev1.TLSCertKey])
		if err != nil {
			t.Fatal(err)
		}
		h.reconcile("web") // the same policy: kept
		if again, _ := pki.DecodeX509CertificateBytes(h.secret("web-tls").Data[corev1.TLSCertKey]); again.SerialNumber.Cmp(first.SerialNumber) != 0 {
			t.Fatal("re-issued under an unchanged policy")
		}
		h.r.opts.Policy = subCA("*.dev.example.com", 0) // narrowed
		h.reconcile("web")
		cert, err := pki.DecodeX509CertificateBytes(h.secret("web-tls").Data[corev1.TLSCertKey])
		if err != nil {
			t.Fatal(err)
		}
		if cert.SerialNumber.Cmp(first.SerialNumber) == 0 || cert.MaxPathLen != 0 || !cert.MaxPathLenZero || !slices.Equal(cert.PermittedDNSDomains, []string{".dev.example.com"}) {
			t.Fatalf("after narrowing: serial kept %v, maxPathLen %d, permitted DNS %v; want re-issued with the new powers", cert.SerialNumber.Cmp(first.SerialNumber) == 0, cert.MaxPathLen, cert.PermittedDNSDomains)
		}
		if diff := certspec.CAPowersDiffer(first, cert); !strings.Contains(diff, "maxPathLen 1 → 0") || !strings.Contains(diff, `permitted DNS [".example.com"] → [".dev.example.com"]`) {
			t.Errorf("the re-issue's reason says %q", diff)
		}
	})
	t.Run("narrowed after issuance: flagged, not revoked; cleared when allowed again", func(t *testing.T) {
		h := newReconcilerHarness(t, nil, testCertificate())
		p := withPolicy(h)
		h.reconcile("web")
		issued := h.secret("web-tls").ResourceVersion
		p.d = policy.Decision{Message: "denied by every IssuancePolicy that selects it (prod)"}
		h.reconcile("web")
		crt := h.certificate("web")
		v := apiutilCondition(crt, ConditionPolicyViolation)
		if c := ready(crt); c == nil || c.Status != cmmeta.ConditionTrue {
			t.Fatalf("Ready %+v: a violating certificate stays Ready", c)
		}
		if v == nil || v.Status != cmmeta.ConditionTrue || v.Reason != reasons.PolicyDenied || !strings.Contains(v.Message, "(prod)") {
			t.Fatalf("PolicyViolation %+v", v)
		}
		if h.secret("web-tls").ResourceVersion != issued {
			t.Errorf("the Secret was rewritten")
		}
		if n := h.r.metrics.Violations("east"); n != 1 {
			t.Errorf("violations counted for east: %d, want 1", n)
		}
		p.d = policy.Decision{Allowed: true}
		h.reconcile("web")
		if apiutilCondition(h.certificate("web"), ConditionPolicyViolation) != nil || h.r.metrics.Violations("east") != 0 {
			t.Errorf("the violation was not cleared once allowed again")
		}
	})
}

func apiutilCondition(crt *cmapi.Certificate, typ cmapi.CertificateConditionType) *cmapi.CertificateCondition {
	for i := range crt.Status.Conditions {
		if crt.Status.Conditions[i].Type == typ {
			return &crt.Status.Conditions[i]
		}
	}
	return nil
}

// evaluator adapts a policy.Set to Policy.
type evaluator struct{ set *policy.Set }

func (e evaluator) Evaluate(cluster string, crt *cmapi.Certificate, tmpl *x509.Certificate) (policy.Decision, bool) {
	return e.set.Evaluate(policy.Request{Cluster: cluster, Certificate: crt, Template: tmpl}), false
}
func (evaluator) Subscribe(func()) {}
