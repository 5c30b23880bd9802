package testbed

import (
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/certhub/certhub/internal/certsync"
)

// ValidCertificate is a small valid Certificate (ECDSA P-256, one DNS name,
// 90 days) issued by the ClusterIssuer called issuer.
func ValidCertificate(namespace, name, issuer string) *cmapi.Certificate {
	return &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: cmapi.CertificateSpec{
			SecretName: name + "-tls",
			CommonName: name + ".example.com",
			DNSNames:   []string{name + ".example.com"},
			Duration:   &metav1.Duration{Duration: 90 * 24 * time.Hour},
			IssuerRef:  cmmeta.IssuerReference{Name: issuer, Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"},
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256},
		},
	}
}

// InvalidSpec is a Certificate spec the hub must refuse: Mutate breaks a
// ValidCertificate; Reason is the condition reason users see; Field is a
// fragment of the message naming the offending field.
type InvalidSpec struct {
	Name, Reason, Field string
	Mutate              func(*cmapi.Certificate)
}

// InvalidSpecs is the table the unit and integration tests share.
func InvalidSpecs() []InvalidSpec {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	return []InvalidSpec{
		{"no names at all", certsync.ReasonInvalidNames, "at least one of commonName", func(c *cmapi.Certificate) { c.Spec.CommonName, c.Spec.DNSNames = "", nil }},
		{"common name too long", certsync.ReasonInvalidNames, "spec.commonName", func(c *cmapi.Certificate) { c.Spec.CommonName = strings.Repeat("a", 65) }},
		{"bad IP address", certsync.ReasonInvalidNames, "spec.ipAddresses[0]", func(c *cmapi.Certificate) { c.Spec.IPAddresses = []string{"10.0.0.300"} }},
		{"relative URI", certsync.ReasonInvalidNames, "spec.uris[0]", func(c *cmapi.Certificate) { c.Spec.URIs = []string{"not/absolute"} }},
		{"bad email", certsync.ReasonInvalidNames, "spec.emailAddresses[0]", func(c *cmapi.Certificate) { c.Spec.EmailAddresses = []string{"Jane <jane@example.com>"} }},
		{"bad otherName OID", certsync.ReasonInvalidNames, "spec.otherNames[0].oid", func(c *cmapi.Certificate) {
			c.Spec.OtherNames = []cmapi.OtherName{{OID: "1.x.3", UTF8Value: "v"}}
		}},
		{"subject and literalSubject", certsync.ReasonInvalidNames, "spec.commonName", func(c *cmapi.Certificate) { c.Spec.LiteralSubject = "CN=x,O=y" }},
		{"duration under 1h", certsync.ReasonInvalidLifetime, "spec.duration", func(c *cmapi.Certificate) { c.Spec.Duration = d(30 * time.Minute) }},
		{"renewBefore >= duration", certsync.ReasonInvalidLifetime, "spec.renewBefore", func(c *cmapi.Certificate) {
			c.Spec.Duration, c.Spec.RenewBefore = d(2*time.Hour), d(3*time.Hour)
		}},
		{"renewBefore under 5m", certsync.ReasonInvalidLifetime, "spec.renewBefore", func(c *cmapi.Certificate) { c.Spec.RenewBefore = d(time.Minute) }},
		{"renewBefore and percentage", certsync.ReasonInvalidLifetime, "mutually exclusive", func(c *cmapi.Certificate) {
			c.Spec.RenewBefore, c.Spec.RenewBeforePercentage = d(time.Hour), ptr.To[int32](50)
		}},
		{"percentage 100", certsync.ReasonInvalidLifetime, "spec.renewBeforePercentage", func(c *cmapi.Certificate) { c.Spec.RenewBeforePercentage = ptr.To[int32](100) }},
		{"RSA 1024", certsync.ReasonInvalidPrivateKey, "spec.privateKey.size", func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: 1024}
		}},
		{"ECDSA 512", certsync.ReasonInvalidPrivateKey, "spec.privateKey.size", func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 512}
		}},
		{"unknown key algorithm", certsync.ReasonInvalidPrivateKey, "spec.privateKey.algorithm", func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: "DSA"}
		}},
		{"unknown rotation policy", certsync.ReasonInvalidPrivateKey, "spec.privateKey.rotationPolicy", func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: "Sometimes"}
		}},
		{"unknown usage", certsync.ReasonInvalidUsages, "spec.usages[0]", func(c *cmapi.Certificate) { c.Spec.Usages = []cmapi.KeyUsage{"teleport"} }},
		{"PKCS12 without password", certsync.ReasonInvalidKeystores, "spec.keystores.pkcs12", func(c *cmapi.Certificate) {
			c.Spec.Keystores = &cmapi.CertificateKeystores{PKCS12: &cmapi.PKCS12Keystore{Create: true}}
		}},
		{"unknown output format", certsync.ReasonInvalidOutputFormats, "spec.additionalOutputFormats[0].type", func(c *cmapi.Certificate) {
			c.Spec.AdditionalOutputFormats = []cmapi.CertificateAdditionalOutputFormat{{Type: "PFX"}}
		}},
		{"secretTemplate sets cert-manager annotation", certsync.ReasonInvalidSecretName, "spec.secretTemplate.annotations", func(c *cmapi.Certificate) {
			c.Spec.SecretTemplate = &cmapi.CertificateSecretTemplate{Annotations: map[string]string{"cert-manager.io/issuer-name": "x"}}
		}},
		{"secretName not a DNS name", certsync.ReasonInvalidSecretName, "spec.secretName", func(c *cmapi.Certificate) { c.Spec.SecretName = "Web_TLS" }},
		{"issuerRef without name", certsync.ReasonInvalidIssuerRef, "spec.issuerRef.name", func(c *cmapi.Certificate) { c.Spec.IssuerRef.Name = "" }},
		{"issuerRef external kind without group", certsync.ReasonInvalidIssuerRef, "must be one of Issuer or ClusterIssuer (did you forget to set spec.issuerRef.kind.group?)", func(c *cmapi.Certificate) {
			c.Spec.IssuerRef.Kind, c.Spec.IssuerRef.Group = "AWSPCAClusterIssuer", ""
		}},
		{"issuerRef unknown cert-manager kind", certsync.ReasonInvalidIssuerRef, "spec.issuerRef.kind: Invalid value: \"Vault\": must be one of Issuer or ClusterIssuer", func(c *cmapi.Certificate) {
			c.Spec.IssuerRef.Kind = "Vault"
		}},
		{"literalSubject unknown attribute", certsync.ReasonInvalidSubject, "Literal subject contains unrecognized key with value [x]", func(c *cmapi.Certificate) {
			c.Spec.CommonName, c.Spec.LiteralSubject = "", "CN=a.example.com,UNKNOWN=x"
		}},
		{"literalSubject only unknown attributes", certsync.ReasonInvalidSubject, "Literal subject contains unrecognized key with value [y]", func(c *cmapi.Certificate) {
			c.Spec.CommonName, c.Spec.DNSNames, c.Spec.LiteralSubject = "", nil, "FOO=y"
		}},
	}
}
