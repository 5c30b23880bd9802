// Package outputs encodes the Secret keys cert-manager writes beside
// tls.crt, tls.key and ca.crt: additionalOutputFormats (key.der,
// tls-combined.pem) and keystores (PKCS#12 and JKS, with their trust
// stores), byte for byte as cert-manager's issuing controller does, with
// cert-manager's own encoders' libraries. Pure functions.
package outputs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	jks "github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"
)

// Passwords are the resolved passwords of the Certificate's keystores
// ("" when that keystore is not requested).
type Passwords struct {
	PKCS12, JKS string
}

// Extra computes the Secret keys beyond tls.crt/tls.key/ca.crt, as
// cert-manager's issuing controller writes them: additionalOutputFormats
// (key.der, tls-combined.pem) and keystores (keystore.p12/truststore.p12,
// keystore.jks/truststore.jks, the trust stores only when a CA is known).
func Extra(crt *cmapi.Certificate, pw Passwords, certPEM, keyPEM, caPEM []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range crt.Spec.AdditionalOutputFormats {
		switch f.Type {
		case cmapi.CertificateOutputFormatDER:
			block, _ := pem.Decode(keyPEM)
			if block == nil {
				return nil, fmt.Errorf("private key is not PEM")
			}
			out[cmapi.CertificateOutputFormatDERKey] = block.Bytes
		case cmapi.CertificateOutputFormatCombinedPEM:
			out[cmapi.CertificateOutputFormatCombinedPEMKey] = append(append(append([]byte{}, keyPEM...), '\n'), certPEM...)
		}
	}
	ks := crt.Spec.Keystores
	if ks == nil {
		return out, nil
	}
	if ks.PKCS12 != nil && ks.PKCS12.Create {
		p12, err := encodePKCS12(ks.PKCS12.Profile, pw.PKCS12, keyPEM, certPEM, caPEM)
		if err != nil {
			return nil, fmt.Errorf("failed to encode PKCS#12 keystore: %w", err)
		}
		out[cmapi.PKCS12SecretKey] = p12
		if len(caPEM) > 0 {
			cas, err := pki.DecodeX509CertificateSetBytes(caPEM)
			if err != nil {
				return nil, err
			}
			ts, err := pkcs12Encoder(ks.PKCS12.Profile).EncodeTrustStore(cas, pw.PKCS12)
			if err != nil {
				return nil, fmt.Errorf("failed to encode PKCS#12 trust store: %w", err)
			}
			out[cmapi.PKCS12TruststoreKey] = ts
		}
	}
	if ks.JKS != nil && ks.JKS.Create {
		alias := "certificate"
		if ks.JKS.Alias != nil {
			alias = *ks.JKS.Alias
		}
		store, err := encodeJKS([]byte(pw.JKS), alias, keyPEM, certPEM, caPEM)
		if err != nil {
			return nil, fmt.Errorf("failed to encode JKS keystore: %w", err)
		}
		out[cmapi.JKSSecretKey] = store
		if len(caPEM) > 0 {
			ts := jks.New()
			if err := addJKSCAs(&ts, caPEM); err != nil {
				return nil, err
			}
			var buf bytes.Buffer
			if err := ts.Store(&buf, []byte(pw.JKS)); err != nil {
				return nil, fmt.Errorf("failed to encode JKS trust store: %w", err)
			}
			out[cmapi.JKSTruststoreKey] = buf.Bytes()
		}
	}
	return out, nil
}

// pkcs12Encoder picks the encryption profile; LegacyRC2 is cert-manager's default.
func pkcs12Encoder(p cmapi.PKCS12Profile) *pkcs12.Encoder {
	switch p {
	case cmapi.Modern2026PKCS12Profile:
		return pkcs12.Modern2026
	case cmapi.Modern2023PKCS12Profile:
		return pkcs12.Modern2023
	case cmapi.LegacyDESPKCS12Profile:
		return pkcs12.LegacyDES
	default:
		return pkcs12.LegacyRC2
	}
}

func encodePKCS12(profile cmapi.PKCS12Profile, password string, keyPEM, certPEM, caPEM []byte) ([]byte, error) {
	key, err := pki.DecodePrivateKeyBytes(keyPEM)
	if err != nil {
		return nil, err
	}
	certs, err := pki.DecodeX509CertificateChainBytes(certPEM)
	if err != nil {
		return nil, err
	}
	var cas []*x509.Certificate
	if len(caPEM) > 0 {
		if cas, err = pki.DecodeX509CertificateSetBytes(caPEM); err != nil {
			return nil, err
		}
	}
	// The leaf goes in its own slot; intermediates join the CA certificates.
	if len(certs) > 1 {
		cas = append(certs[1:], cas...)
	}
	return pkcs12Encoder(profile).Encode(key, certs[0], cas, password)
}

func encodeJKS(password []byte, alias string, keyPEM, certPEM, caPEM []byte) ([]byte, error) {
	key, err := pki.DecodePrivateKeyBytes(keyPEM)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	chain, err := pki.DecodeX509CertificateChainBytes(certPEM)
	if err != nil {
		return nil, err
	}
	certs := make([]jks.Certificate, len(chain))
	for i, c := range chain {
		certs[i] = jks.Certificate{Type: "X509", Content: c.Raw}
	}
	ks := jks.New()
	if err := ks.SetPrivateKeyEntry(alias, jks.PrivateKeyEntry{CreationTime: time.Now(), PrivateKey: keyDER, CertificateChain: certs}, password); err != nil {
		return nil, err
	}
	if len(caPEM) > 0 {
		if err := addJKSCAs(&ks, caPEM); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := ks.Store(&buf, password); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func addJKSCAs(ks *jks.KeyStore, caPEM []byte) error {
	cas, err := pki.DecodeX509CertificateSetBytes(caPEM)
	if err != nil {
		return err
	}
	for i, ca := range cas {
		alias := "ca"
		if i > 0 {
			alias = fmt.Sprintf("ca-%d", i)
		}
		if err := ks.SetTrustedCertificateEntry(alias, jks.TrustedCertificateEntry{
			CreationTime: time.Now(), Certificate: jks.Certificate{Type: "X509", Content: ca.Raw},
		}); err != nil {
			return err
		}
	}
	return nil
}
