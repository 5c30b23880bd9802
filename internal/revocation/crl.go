package revocation

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

const (
	// RevokedKey holds the revoked serials, JSON.
	RevokedKey = "revoked.json"
	// numberKey holds the CRL number of the last CRL signed.
	numberKey = "number"
)

// revokedEntry is one revoked serial of a CRL.
type revokedEntry struct {
	Serial    string    `json:"serial"`
	RevokedAt time.Time `json:"revokedAt"`
	Reason    int       `json:"reason"`
}

// crls keeps a CRL for each CA ClusterIssuer, signed with its CA key.
type crls struct {
	namespace string
	hub       client.Client
	live      client.Reader
	validity  time.Duration
	now       func() time.Time
}

// caKeyPair loads issuer's CA certificate and key from the hub.
func (c *crls) caKeyPair(ctx context.Context, issuer string) (*x509.Certificate, crypto.Signer, error) {
	ci := &cmapi.ClusterIssuer{}
	if err := c.hub.Get(ctx, client.ObjectKey{Name: issuer}, ci); err != nil {
		return nil, nil, fmt.Errorf("failed to get ClusterIssuer %s: %w", issuer, err)
	}
	if ci.Spec.CA == nil {
		return nil, nil, fmt.Errorf("ClusterIssuer %s is not a CA issuer", issuer)
	}
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: c.namespace, Name: ci.Spec.CA.SecretName}
	if err := c.hub.Get(ctx, key, s); err != nil {
		return nil, nil, fmt.Errorf("failed to get CA Secret %s: %w", key, err)
	}
	cert, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		return nil, nil, fmt.Errorf("failed to decode CA certificate of %s: %w", key, err)
	}
	signer, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, nil, fmt.Errorf("failed to decode CA key of %s: %w", key, err)
	}
	return cert, signer, nil
}

// revoke adds serial to issuer's CRL (once) and signs the CRL again.
func (c *crls) revoke(ctx context.Context, issuer, serial string, reason int) error {
	return c.update(ctx, issuer, func(entries []revokedEntry) ([]revokedEntry, bool) {
		if slices.ContainsFunc(entries, func(e revokedEntry) bool { return e.Serial == serial }) {
			return entries, false
		}
		return append(entries, revokedEntry{Serial: serial, RevokedAt: c.now().UTC().Truncate(time.Second), Reason: reason}), true
	})
}

// refresh signs issuer's CRL again when less than half its validity is left.
func (c *crls) refresh(ctx context.Context, cm *corev1.ConfigMap) error {
	issuer := cm.Annotations[hubapi.CRLIssuerAnnotation]
	if issuer == "" {
		return nil
	}
	if crl, err := decodeCRL(cm.Data[hubapi.CRLKey]); err == nil && crl.NextUpdate.Sub(c.now()) > c.validity/2 {
		return nil
	}
	return c.update(ctx, issuer, func(entries []revokedEntry) ([]revokedEntry, bool) { return entries, true })
}

// update applies change to issuer's revoked entries and, when it says so,
// writes them with a newly signed CRL (optimistic concurrency: every
// replica may revoke in the same CRL).
func (c *crls) update(ctx context.Context, issuer string, change func([]revokedEntry) ([]revokedEntry, bool)) error {
	caCert, signer, err := c.caKeyPair(ctx, issuer)
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		err := c.live.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: hubapi.CRLName(issuer)}, cm)
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to get the CRL of %s: %w", issuer, err)
		}
		var entries []revokedEntry
		if raw := cm.Data[RevokedKey]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &entries); err != nil {
				return fmt.Errorf("failed to read the revoked serials of %s: %w", issuer, err)
			}
		}
		entries, changed := change(entries)
		if !changed && exists {
			return nil
		}
		number, _ := strconv.ParseInt(cm.Data[numberKey], 10, 64)
		number++
		pemCRL, err := c.sign(caCert, signer, entries, number)
		if err != nil {
			return fmt.Errorf("failed to sign the CRL of %s: %w", issuer, err)
		}
		raw, err := json.Marshal(entries)
		if err != nil {
			return err
		}
		cm.Namespace, cm.Name = c.namespace, hubapi.CRLName(issuer)
		metav1.SetMetaDataLabel(&cm.ObjectMeta, hubapi.CRLLabel, "true")
		metav1.SetMetaDataAnnotation(&cm.ObjectMeta, hubapi.CRLIssuerAnnotation, issuer)
		cm.Data = map[string]string{RevokedKey: string(raw), hubapi.CRLKey: pemCRL, numberKey: strconv.FormatInt(number, 10)}
		if exists {
			return c.hub.Update(ctx, cm)
		}
		return c.hub.Create(ctx, cm)
	})
}

// sign makes the CRL of entries, PEM.
func (c *crls) sign(caCert *x509.Certificate, signer crypto.Signer, entries []revokedEntry, number int64) (string, error) {
	now := c.now().UTC().Truncate(time.Second)
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: now, NextUpdate: now.Add(c.validity)}
	for _, e := range entries {
		serial, ok := new(big.Int).SetString(e.Serial, 16)
		if !ok {
			continue
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{
			SerialNumber: serial, RevocationTime: e.RevokedAt, ReasonCode: e.Reason})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, caCert, signer)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})), nil
}

// decodeCRL parses a PEM CRL.
func decodeCRL(p string) (*x509.RevocationList, error) {
	b, _ := pem.Decode([]byte(p))
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseRevocationList(b.Bytes)
}

// handler serves GET /crl/<issuer> (DER, application/pkix-crl) and
// /crl/<issuer>.pem from the CRL ConfigMaps.
func (c *crls) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, CRLPath)
		asPEM := strings.HasSuffix(name, ".pem")
		name = strings.TrimSuffix(strings.TrimSuffix(name, ".pem"), ".crl")
		cm := &corev1.ConfigMap{}
		if name == "" || strings.Contains(name, "/") ||
			c.hub.Get(r.Context(), client.ObjectKey{Namespace: c.namespace, Name: hubapi.CRLName(name)}, cm) != nil ||
			cm.Annotations[hubapi.CRLIssuerAnnotation] != name {
			http.NotFound(w, r)
			return
		}
		if asPEM {
			w.Header().Set("Content-Type", "application/x-pem-file")
			_, _ = w.Write([]byte(cm.Data[hubapi.CRLKey]))
			return
		}
		b, _ := pem.Decode([]byte(cm.Data[hubapi.CRLKey]))
		if b == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/pkix-crl")
		_, _ = w.Write(b.Bytes)
	})
}

// CRLPath is where the hub serves each CA ClusterIssuer's CRL:
// CRLPath + <issuer> (DER) or CRLPath + <issuer>.pem.
const CRLPath = "/crl/"
