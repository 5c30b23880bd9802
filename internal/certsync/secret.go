package certsync

import (
	"bytes"
	"crypto/x509"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmutil "github.com/cert-manager/cert-manager/pkg/util"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"

	"github.com/certhub/certhub/internal/certspec"
)

// secretData is what an issuance produced.
type secretData struct {
	certPEM, keyPEM, caPEM []byte
	cert                   *x509.Certificate
	// extra holds additionalOutputFormats and keystore keys (outputs.Extra).
	extra map[string][]byte
	// issuances is the loop guard's IssuancesAnnotation value; "" omits it.
	issuances string
}

// secretApply builds the TLS Secret as cert-manager's issuing controller
// writes it (setValues/UpdateData), plus certhub's ownership marks. The
// Certificate's secretTemplate is applied first so it can never override
// cert-manager's own annotations and labels.
func secretApply(crt *cmapi.Certificate, d secretData, writer string) (*corev1ac.SecretApplyConfiguration, error) {
	annotations := map[string]string{}
	labels := map[string]string{}
	if t := crt.Spec.SecretTemplate; t != nil {
		for k, v := range t.Annotations {
			annotations[k] = v
		}
		for k, v := range t.Labels {
			labels[k] = v
		}
	}
	certAnnotations, err := annotationsForCertificate(d.cert)
	if err != nil {
		return nil, err
	}
	for k, v := range certAnnotations {
		annotations[k] = v
	}
	ref := crt.Spec.IssuerRef
	annotations[cmapi.CertificateNameKey] = crt.Name
	annotations[cmapi.IssuerNameAnnotationKey] = ref.Name
	annotations[cmapi.IssuerKindAnnotationKey] = certspec.IssuerKind(ref)
	annotations[cmapi.IssuerGroupAnnotationKey] = ref.Group
	if writer != "" {
		annotations[hubapi.WrittenByAnnotation] = writer
	}
	if d.issuances != "" {
		annotations[hubapi.IssuancesAnnotation] = d.issuances
	}
	labels[cmapi.PartOfCertManagerControllerLabelKey] = "true"
	labels[hubapi.ManagedByLabel] = hubapi.ManagedByValue

	data := map[string][]byte{}
	for k, v := range d.extra {
		data[k] = v
	}
	data[corev1.TLSCertKey] = d.certPEM
	data[corev1.TLSPrivateKeyKey] = d.keyPEM
	if len(d.caPEM) > 0 {
		data[cmmeta.TLSCAKey] = d.caPEM
	}
	return corev1ac.Secret(crt.Spec.SecretName, crt.Namespace).
		WithType(corev1.SecretTypeTLS).
		WithAnnotations(annotations).
		WithLabels(labels).
		WithData(data), nil
}

// annotationsForCertificate mirrors cert-manager's AnnotationsForCertificate
// (internal/controller/certificates/secrets.go, not importable): some keys are
// always present, possibly empty; others only when non-empty.
func annotationsForCertificate(c *x509.Certificate) (map[string]string, error) {
	out := map[string]string{}
	var encErr error
	str := func(keepEmpty bool, key, value string) {
		if value != "" || keepEmpty {
			out[key] = value
		}
	}
	csv := func(keepEmpty bool, key string, values []string) {
		if len(values) == 0 && !keepEmpty {
			return
		}
		s, err := cmutil.JoinWithEscapeCSV(values)
		if err != nil {
			encErr = err
			return
		}
		out[key] = s
	}
	str(true, cmapi.CommonNameAnnotationKey, c.Subject.CommonName)
	str(false, cmapi.SubjectSerialNumberAnnotationKey, c.Subject.SerialNumber)
	csv(false, cmapi.SubjectOrganizationsAnnotationKey, c.Subject.Organization)
	csv(false, cmapi.SubjectOrganizationalUnitsAnnotationKey, c.Subject.OrganizationalUnit)
	csv(false, cmapi.SubjectCountriesAnnotationKey, c.Subject.Country)
	csv(false, cmapi.SubjectProvincesAnnotationKey, c.Subject.Province)
	csv(false, cmapi.SubjectLocalitiesAnnotationKey, c.Subject.Locality)
	csv(false, cmapi.SubjectPostalCodesAnnotationKey, c.Subject.PostalCode)
	csv(false, cmapi.SubjectStreetAddressesAnnotationKey, c.Subject.StreetAddress)
	csv(false, cmapi.EmailsAnnotationKey, c.EmailAddresses)
	csv(true, cmapi.AltNamesAnnotationKey, c.DNSNames)
	csv(true, cmapi.IPSANAnnotationKey, pki.IPAddressesToString(c.IPAddresses))
	csv(true, cmapi.URISANAnnotationKey, pki.URLsToString(c.URIs))
	if encErr != nil {
		return nil, fmt.Errorf("failed to encode certificate annotations: %w", encErr)
	}
	return out, nil
}

// keystoreKeys are compared by presence only: their encoding is salted, so
// the bytes change on every encoding.
var keystoreKeys = map[string]bool{
	cmapi.PKCS12SecretKey: true, cmapi.PKCS12TruststoreKey: true, cmapi.JKSSecretKey: true, cmapi.JKSTruststoreKey: true,
}

// secretDrift says how s differs from the applied configuration want (labels,
// annotations and data certhub sets, and data keys it no longer should), or
// "" when it does not. The writer stamp is not compared.
func secretDrift(want *corev1ac.SecretApplyConfiguration, s *corev1.Secret) string {
	for k, v := range want.Labels {
		if s.Labels[k] != v {
			return "label " + k
		}
	}
	for k, v := range want.Annotations {
		if s.Annotations[k] != v {
			return "annotation " + k
		}
	}
	for k, v := range want.Data {
		got, ok := s.Data[k]
		if !ok || (!keystoreKeys[k] && !bytes.Equal(got, v)) {
			return "data " + k
		}
	}
	for k := range s.Data {
		if _, ok := want.Data[k]; !ok && (keystoreKeys[k] || k == cmapi.CertificateOutputFormatDERKey || k == cmapi.CertificateOutputFormatCombinedPEMKey) {
			return "data " + k + " no longer requested"
		}
	}
	return ""
}
