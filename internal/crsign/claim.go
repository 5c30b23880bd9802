package crsign

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issuance"
)

// ReasonClaimIgnored: the request carries a signing claim whose seal does
// not verify (edited, copied from another request, forged, or sealed by a
// CA the issuer no longer holds); the hub chose its own serial and validity.
const ReasonClaimIgnored = "SigningClaimIgnored"

// A signature is claimed before it is made, so a request has one
// certificate whoever finishes it. The owner writes the serial number and
// validity it chose into hubapi.SigningClaimAnnotation (a fenced write,
// with the resourceVersion read: one claim wins) and signs after it
// landed. A replica that takes the cluster over after the signer died
// between signing and writing the status finds the claim and signs the
// same certificate: the same issuer, serial, validity, subject and key,
// the same to-be-signed bytes (an ECDSA signature's own randomness aside).
// The claim is sealed (issuance.Sealer: a key derived from the CA's) over
// the cluster, the request's namespace, name and UID, and its CSR: a
// downstream user can neither choose a serial or validity nor move a claim
// to another request. A valid claim also shows the request was admitted by
// the budget, which is not asked again.

// claim is a parsed signing claim.
type claim struct {
	serial              *big.Int
	notBefore, notAfter time.Time
}

// claimMessage is what the seal covers.
func claimMessage(name multicluster.ClusterName, cr *cmapi.CertificateRequest, csrDER []byte, c claim) []byte {
	sum := sha256.Sum256(csrDER)
	return fmt.Appendf(nil, "certhub.io/signing-claim v1\x00%s\x00%s\x00%s\x00%s\x00%x\x00%s\x00%d\x00%d",
		name, cr.Namespace, cr.Name, cr.UID, sum, c.serial.Text(16), c.notBefore.Unix(), c.notAfter.Unix())
}

// encode is the annotation's value: serial.notBefore.notAfter.seal
// (hexadecimal serial, Unix seconds, base64url seal).
func (c claim) encode(seal []byte) string {
	return fmt.Sprintf("%s.%d.%d.%s", c.serial.Text(16), c.notBefore.Unix(), c.notAfter.Unix(), base64.RawURLEncoding.EncodeToString(seal))
}

// parseClaim reads an annotation's value; the seal is returned apart.
func parseClaim(v string) (claim, []byte, error) {
	parts := strings.Split(v, ".")
	if len(parts) != 4 {
		return claim{}, nil, fmt.Errorf("%d fields, want 4", len(parts))
	}
	serial, ok := new(big.Int).SetString(parts[0], 16)
	if !ok || serial.Sign() <= 0 {
		return claim{}, nil, fmt.Errorf("serial %q", parts[0])
	}
	nb, err1 := strconv.ParseInt(parts[1], 10, 64)
	na, err2 := strconv.ParseInt(parts[2], 10, 64)
	seal, err3 := base64.RawURLEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return claim{}, nil, fmt.Errorf("malformed: %q", v)
	}
	return claim{serial: serial, notBefore: time.Unix(nb, 0).UTC(), notAfter: time.Unix(na, 0).UTC()}, seal, nil
}

// claimed applies cr's claim to tmpl when its seal verifies and reports
// whether it did. A claim that does not verify is reported (an Event and a
// log line naming the request) and ignored.
func claimed(ctx context.Context, name multicluster.ClusterName, cr *cmapi.CertificateRequest, s issuance.Sealer, csrDER []byte, tmpl *x509.Certificate, rec record.EventRecorder) bool {
	v, ok := cr.Annotations[hubapi.SigningClaimAnnotation]
	if !ok {
		return false
	}
	c, seal, err := parseClaim(v)
	if err == nil {
		if want := s.Seal(claimMessage(name, cr, csrDER, c)); want == nil || !hmac.Equal(seal, want) {
			err = fmt.Errorf("its seal does not verify")
		}
	}
	if err != nil {
		msg := fmt.Sprintf("Ignoring annotation %s (%v): the hub chooses the serial number and validity itself", hubapi.SigningClaimAnnotation, err)
		rec.Event(cr, corev1.EventTypeWarning, ReasonClaimIgnored, msg)
		logr.FromContextOrDiscard(ctx).Info("ignoring a signing claim that does not verify", "error", err.Error())
		return false
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = c.serial, c.notBefore, c.notAfter
	return true
}

// writeClaim seals tmpl's serial and validity (to the second, as a
// certificate holds them) and writes them onto cr (in place) before the
// signature: a merge patch carrying cr's resourceVersion, within the
// fence's deadline. A conflict or a lost fence is returned: nothing may be
// signed then.
func writeClaim(ctx context.Context, f fence.Fence, name multicluster.ClusterName, cl cluster.Cluster, cr *cmapi.CertificateRequest, s issuance.Sealer, csrDER []byte, tmpl *x509.Certificate) error {
	tmpl.NotBefore, tmpl.NotAfter = tmpl.NotBefore.Truncate(time.Second), tmpl.NotAfter.Truncate(time.Second)
	if tmpl.SerialNumber == nil {
		// As x509.CreateCertificate would choose it: 159 random bits
		// (RFC 5280's 20 octets, positive).
		serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 159))
		if err != nil {
			return fmt.Errorf("failed to choose a serial number: %w", err)
		}
		tmpl.SerialNumber = serial.Add(serial, big.NewInt(1))
	}
	c := claim{serial: tmpl.SerialNumber, notBefore: tmpl.NotBefore, notAfter: tmpl.NotAfter}
	seal := s.Seal(claimMessage(name, cr, csrDER, c))
	if seal == nil {
		return nil // the issuer cannot seal: no claim, the signature is the request's only record
	}
	_, wctx, done, err := fence.WriteContext(ctx, f, name)
	if err != nil {
		return err
	}
	defer done()
	base := cr.DeepCopy()
	if cr.Annotations == nil {
		cr.Annotations = map[string]string{}
	}
	cr.Annotations[hubapi.SigningClaimAnnotation] = c.encode(seal)
	status := cr.Status // a patch of the object answers with the stored status
	if err := cl.GetClient().Patch(wctx, cr, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to write the signing claim of CertificateRequest %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	cr.Status = status
	return nil
}
