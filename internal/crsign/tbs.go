package crsign

import (
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"math/big"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/issuers"
)

// MaxClockSkew is how far a request's notBefore may lie ahead of the
// hub's clock when it is signed: the downstream API server (creation) and
// the approver (approval) keep their own clocks. A notBefore further ahead
// waits.
const MaxClockSkew = 5 * time.Minute

// One request, one certificate, whoever signs it. The certificate the hub
// signs for a request is a function of the request alone, so a replica
// that takes a cluster over after the signer died between signing and
// writing the status signs the same certificate again — the same issuer,
// serial, validity, subject and key, the same to-be-signed bytes (an ECDSA
// signature's own randomness aside) — and the CA has signed one
// certificate per request, with nothing written before the signature:
//
//   - serial: HMAC-SHA256, under a key derived from the CA's private key
//     (issuers.Sealer), of the cluster, the request's namespace, name and
//     UID, and its CSR; 159 bits, positive. Nobody without the CA key can
//     predict or choose it, and two requests never share one (UIDs differ);
//   - notBefore: the later of the request's creation (set by its API
//     server) and its approval (Approved's lastTransitionTime), to the
//     second: when cert-manager's own CA issuer would sign it, give or take
//     its queue. An approval time before the creation counts as the
//     creation (a request is never backdated past it); one ahead of the
//     hub's clock by more than MaxClockSkew waits (nothing is signed
//     valid from the future);
//   - notAfter: notBefore + the request's duration.

// fixTBS sets tmpl's serial and validity from the request, or reports how
// long to wait until its notBefore is near enough. When the issuer cannot
// derive a serial, tmpl is left as it is (signed with a random serial).
func fixTBS(name multicluster.ClusterName, cr *cmapi.CertificateRequest, s issuers.Sealer, csrDER []byte, tmpl *x509.Certificate, now time.Time) (wait time.Duration) {
	sum := sha256.Sum256(csrDER)
	mac := s.Seal(fmt.Appendf(nil, "certhub.io/serial v1\x00%s\x00%s\x00%s\x00%s\x00%x", name, cr.Namespace, cr.Name, cr.UID, sum))
	if len(mac) < 20 {
		return 0
	}
	serial := new(big.Int).SetBytes(mac[:20])
	serial.Rsh(serial, 1) // 159 bits: positive in DER's 20 octets
	if serial.Sign() == 0 {
		serial.SetInt64(1)
	}
	notBefore := cr.CreationTimestamp.Time
	if c := apiutil.GetCertificateRequestCondition(cr, cmapi.CertificateRequestConditionApproved); c != nil && c.LastTransitionTime != nil && c.LastTransitionTime.After(notBefore) {
		notBefore = c.LastTransitionTime.Time
	}
	notBefore = notBefore.UTC().Truncate(time.Second)
	if ahead := notBefore.Sub(now); ahead > MaxClockSkew {
		return ahead - MaxClockSkew
	}
	duration := tmpl.NotAfter.Sub(tmpl.NotBefore)
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, notBefore, notBefore.Add(duration)
	return 0
}
