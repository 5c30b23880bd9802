package certsync

import (
	"crypto/x509"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
)

// selfSignedSecret issues crt with a self-signed certificate and returns the
// Secret certhub would write for it, for the policies to judge.
func selfSignedSecret(t *testing.T, crt *cmapi.Certificate) *corev1.Secret {
	t.Helper()
	return issuedSecret(t, crt, true)
}

func testCertificate() *cmapi.Certificate {
	return &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: cmapi.CertificateSpec{
			SecretName: "web-tls",
			CommonName: "web.example.com",
			DNSNames:   []string{"web.example.com"},
			Duration:   &metav1.Duration{Duration: 90 * 24 * time.Hour},
			IssuerRef:  cmmeta.IssuerReference{Name: "ca", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"},
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256},
		},
	}
}

// withUsages asks for client auth too: a CA that decides usages itself
// (ACME) may issue without it.
func withUsages(c *cmapi.Certificate) {
	c.Spec.Usages = []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth, cmapi.UsageClientAuth}
}

// mustRequestHash is requestHash of testCertificate changed by mutate.
func mustRequestHash(t *testing.T, mutate func(*cmapi.Certificate)) string {
	t.Helper()
	c := testCertificate()
	if mutate != nil {
		mutate(c)
	}
	h, err := certspec.RequestHash(c)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// recordedAs is a record holding the Secret's certificate for
// testCertificate in cluster c1, changed by entry; view changes the view.
func recordedAs(view func(*recordView), entry func(*issued.Entry)) func(*corev1.Secret) *recordView {
	return func(s *corev1.Secret) *recordView {
		obj := issued.Object{Cluster: "c1", Kind: issued.KindCertificate, Namespace: "shop", Name: "web"}
		cert, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
		if err != nil {
			panic(err)
		}
		e := issued.For(cert, issued.ClusterIssuer("ca"), obj, "")
		if entry != nil {
			entry(&e)
		}
		v := &recordView{issuer: issued.ClusterIssuer("ca"), object: obj, lookup: func(issuer, serial string, _ issued.Object) (issued.Entry, bool) {
			return e, issuer == e.Issuer && serial == e.Serial
		}}
		if view != nil {
			view(v)
		}
		return v
	}
}

func TestTriggerChain(t *testing.T) {
	base := testCertificate()
	good := selfSignedSecret(t, base)
	other := selfSignedSecret(t, base) // same spec, different key pair
	now := time.Now()

	tests := []struct {
		name   string
		crt    func(*cmapi.Certificate)
		secret func(*corev1.Secret) *corev1.Secret
		now    time.Time
		// record, when set, is the record's view given the Secret.
		record   func(*corev1.Secret) *recordView
		adopting bool
		// unvouched: the issuer cannot tell whether it signed (ACME).
		unvouched bool
		reason    string // "" means no reissue
	}{
		{name: "up to date", reason: ""},
		{name: "secret missing", secret: func(*corev1.Secret) *corev1.Secret { return nil }, reason: reasons.DoesNotExist},
		{name: "no tls.key", secret: func(s *corev1.Secret) *corev1.Secret { delete(s.Data, corev1.TLSPrivateKeyKey); return s }, reason: reasons.MissingData},
		{name: "garbage key", secret: func(s *corev1.Secret) *corev1.Secret { s.Data[corev1.TLSPrivateKeyKey] = []byte("x"); return s }, reason: reasons.InvalidKey},
		{name: "garbage certificate", secret: func(s *corev1.Secret) *corev1.Secret { s.Data[corev1.TLSCertKey] = []byte("x"); return s }, reason: reasons.InvalidCertificate},
		{name: "key of another certificate", secret: func(s *corev1.Secret) *corev1.Secret {
			s.Data[corev1.TLSPrivateKeyKey] = other.Data[corev1.TLSPrivateKeyKey]
			return s
		}, reason: reasons.KeyMismatch},
		{name: "issuer changed", crt: func(c *cmapi.Certificate) { c.Spec.IssuerRef.Name = "other-ca" }, reason: reasons.IncorrectIssuer},
		{name: "secret of another Certificate", secret: func(s *corev1.Secret) *corev1.Secret {
			s.Annotations[cmapi.CertificateNameKey] = "api"
			return s
		}, reason: reasons.SecretMismatch},
		{name: "key algorithm changed", crt: func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: 2048}
		}, reason: reasons.IncorrectCertificate},
		{name: "DNS name added", crt: func(c *cmapi.Certificate) { c.Spec.DNSNames = append(c.Spec.DNSNames, "www.example.com") }, reason: reasons.IncorrectCertificate},
		{name: "common name changed", crt: func(c *cmapi.Certificate) { c.Spec.CommonName = "other.example.com" }, reason: reasons.IncorrectCertificate},
		{name: "renewal time reached", now: now.Add(61 * 24 * time.Hour), reason: reasons.Renewing},
		{name: "expired", now: now.Add(91 * 24 * time.Hour), reason: reasons.Expired},
		{name: "ordered (ACME): usages the CA chose are no mismatch", crt: withUsages,
			record: recordedAs(nil, func(e *issued.Entry) { e.RequestHash = mustRequestHash(t, withUsages) }), reason: ""},
		{name: "ordered (ACME): usages changed since the request", crt: withUsages,
			record: recordedAs(nil, func(e *issued.Entry) { e.RequestHash = mustRequestHash(t, nil) }), reason: reasons.IncorrectCertificate},
		{name: "ordered (ACME): a DNS name added", crt: func(c *cmapi.Certificate) { c.Spec.DNSNames = append(c.Spec.DNSNames, "www.example.com") },
			record: recordedAs(nil, func(e *issued.Entry) { e.RequestHash = mustRequestHash(t, nil) }), reason: reasons.IncorrectCertificate},
		{name: "a request hash written downstream decides nothing", crt: withUsages, secret: func(s *corev1.Secret) *corev1.Secret {
			s.Annotations["certhub.io/request-hash"] = mustRequestHash(t, withUsages)
			return s
		}, record: recordedAs(nil, nil), reason: reasons.IncorrectCertificate},
		{name: "recorded for this Certificate", record: recordedAs(nil, nil), reason: ""},
		{name: "not in the record", record: recordedAs(nil, func(e *issued.Entry) { e.Serial = "1" }), reason: reasons.NotRecorded},
		{name: "recorded for another Certificate", record: recordedAs(nil, func(e *issued.Entry) { e.Name = "api" }), reason: reasons.NotRecorded},
		{name: "recorded for this Certificate in another cluster", record: recordedAs(nil, func(e *issued.Entry) { e.Cluster = "c2" }), reason: reasons.NotRecorded},
		{name: "a copy of a recorded serial, not the certificate", record: recordedAs(nil, func(e *issued.Entry) { e.SHA256 = "00" }), reason: reasons.NotRecorded},
		{name: "not recorded while the record rebuilds", record: recordedAs(func(v *recordView) { v.rebuilding = true }, func(e *issued.Entry) { e.Serial = "1" }), reason: ""},
		{name: "rebuilding, an ACME certificate (the CA chose the usages) is kept", crt: withUsages, unvouched: true,
			record: recordedAs(func(v *recordView) { v.rebuilding = true }, func(e *issued.Entry) { e.Serial = "1" }), reason: ""},
		{name: "rebuilding, an ACME certificate for other names is not", crt: func(c *cmapi.Certificate) { c.Spec.DNSNames = append(c.Spec.DNSNames, "www.example.com") }, unvouched: true,
			record: recordedAs(func(v *recordView) { v.rebuilding = true }, func(e *issued.Entry) { e.Serial = "1" }), reason: reasons.IncorrectCertificate},
		{name: "not recorded, taken over from cert-manager", adopting: true, record: recordedAs(nil, func(e *issued.Entry) { e.Serial = "1" }), reason: ""},
		{name: "order pending is no manual trigger", crt: func(c *cmapi.Certificate) {
			c.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue, Reason: issuers.ReasonOrderPending}}
		}, reason: issuers.ReasonOrderPending},
		{name: "cmctl renew", crt: func(c *cmapi.Certificate) {
			c.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue, Reason: "ManuallyTriggered"}}
		}, reason: reasons.ManuallyTriggered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crt := base.DeepCopy()
			if tt.crt != nil {
				tt.crt(crt)
			}
			s := good.DeepCopy()
			if tt.secret != nil {
				s = tt.secret(s)
			}
			at := tt.now
			if at.IsZero() {
				at = now
			}
			in := input{crt: crt, secret: s, now: at, adopting: tt.adopting}
			if tt.record != nil {
				in.record = tt.record(s)
			}
			if tt.unvouched {
				in.sameIssuer = func(*x509.Certificate) (bool, bool) { return false, false }
			}
			reason, msg, reissue, _ := triggerChain.evaluate(in)
			if reason != tt.reason || reissue != (tt.reason != "") {
				t.Fatalf("evaluate = (%q, %q, %v), want reason %q", reason, msg, reissue, tt.reason)
			}
			if reissue && msg == "" {
				t.Errorf("a reissue without a message")
			}
		})
	}
}

func TestSecretApplyMatchesCertManagerFormat(t *testing.T) {
	crt := testCertificate()
	crt.Spec.IPAddresses = []string{"10.0.0.1"}
	crt.Spec.SecretTemplate = &cmapi.CertificateSecretTemplate{
		Annotations: map[string]string{"team": "shop", cmapi.CertificateNameKey: "spoofed"},
		Labels:      map[string]string{"app": "web"},
	}
	s := selfSignedSecret(t, crt)
	want := map[string]string{
		cmapi.CertificateNameKey:       "web",
		cmapi.IssuerNameAnnotationKey:  "ca",
		cmapi.IssuerKindAnnotationKey:  "ClusterIssuer",
		cmapi.IssuerGroupAnnotationKey: "cert-manager.io",
		cmapi.CommonNameAnnotationKey:  "web.example.com",
		cmapi.AltNamesAnnotationKey:    "web.example.com",
		cmapi.IPSANAnnotationKey:       "10.0.0.1",
		cmapi.URISANAnnotationKey:      "",
		hubapi.WrittenByAnnotation:     "replica-0",
		"team":                         "shop",
	}
	for k, v := range want {
		if got, ok := s.Annotations[k]; !ok || got != v {
			t.Errorf("annotation %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if _, ok := s.Annotations[cmapi.EmailsAnnotationKey]; ok {
		t.Errorf("email-sans must be absent when there are no email SANs")
	}
	for k, v := range map[string]string{cmapi.PartOfCertManagerControllerLabelKey: "true", hubapi.ManagedByLabel: hubapi.ManagedByValue, "app": "web"} {
		if s.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, s.Labels[k], v)
		}
	}
	if s.Type != corev1.SecretTypeTLS || len(s.Data[cmmeta.TLSCAKey]) == 0 {
		t.Errorf("type %q, ca.crt %d bytes; want kubernetes.io/tls with ca.crt", s.Type, len(s.Data[cmmeta.TLSCAKey]))
	}
}

// The real issuer package must satisfy the resolver interface certsync consumes.
var _ IssuerResolver = (*issuers.Resolver)(nil)
