package certsync

import (
	"context"
	"crypto/x509"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
)

// recordView is what the record says of the certificates of one
// Certificate: the trigger chain asks it whether the Secret's certificate
// is the one the hub issued for it, and for the request an ordered one was
// made for. Nil when there is no record.
type recordView struct {
	issuer     string        // the Certificate's issuer, as entries name it
	object     issued.Object // the Certificate
	rebuilding bool          // Record.Rebuilding
	lookup     func(issuer, serial string, o issued.Object) (issued.Entry, bool)
}

// entry is the record's entry of cert, if any, whoever it was issued for.
func (v *recordView) entry(cert *x509.Certificate) (issued.Entry, bool) {
	return v.lookup(v.issuer, issued.Serial(cert), v.object)
}

// own is the record's entry of cert when it was issued for this Certificate.
func (v *recordView) own(cert *x509.Certificate) (issued.Entry, bool) {
	e, ok := v.entry(cert)
	return e, ok && e.Object() == v.object
}

// view is t's recordView (nil without a record).
func (r *reconciler) view(t *target) *recordView {
	if r.opts.Record == nil {
		return nil
	}
	return &recordView{issuer: issuerOf(t), object: objectOf(t), rebuilding: r.opts.Record.Rebuilding(), lookup: r.opts.Record.LookupFor}
}

func issuerOf(t *target) string {
	ref := t.crt.Spec.IssuerRef
	return issued.IssuerOf(certspec.IssuerKind(ref), ref.Name, t.crt.Namespace)
}

func objectOf(t *target) issued.Object {
	return issued.Object{Cluster: string(t.name), Kind: issued.KindCertificate, Namespace: t.crt.Namespace, Name: t.crt.Name}
}

// certificateIsRecorded keeps a certificate only when the record holds it,
// byte for byte, for this Certificate: a tls.crt pasted by a tenant (its
// own earlier certificate, another Certificate's, a self-signed copy with
// a serial of the hub's) is re-issued. Not recorded but kept: a
// certificate cert-manager wrote that is being taken over (its CA vouches,
// secretIssuerAnnotationsMatch), or one found while the record rebuilds
// that verifies against the issuer named; both are recorded when kept.
func certificateIsRecorded(in input, st *secretState) (string, string, bool) {
	v := in.record
	if v == nil {
		return "", "", false
	}
	serial := issued.Serial(st.cert)
	e, ok := v.entry(st.cert)
	switch {
	case ok && e.Object() != v.object:
		return reasons.NotRecorded, fmt.Sprintf("Issuing certificate as the Secret's certificate (serial %s) was issued for %s %s/%s in cluster %s, not for this Certificate",
			serial, e.Kind, e.Namespace, e.Name, e.Cluster), true
	case ok && e.SHA256 != issued.Fingerprint(st.cert):
		return reasons.NotRecorded, fmt.Sprintf("Issuing certificate as the Secret's certificate is not the one the hub issued with serial %s", serial), true
	case ok, in.adopting:
		return "", "", false
	case v.rebuilding:
		if in.sameIssuer != nil {
			if same, known := in.sameIssuer(st.cert); known && !same {
				return reasons.NotRecorded, fmt.Sprintf("Issuing certificate as the Secret's certificate (serial %s) was not signed by %s", serial, v.issuer), true
			}
		}
		return "", "", false
	}
	return reasons.NotRecorded, fmt.Sprintf("Issuing certificate as the hub has no record of issuing the Secret's certificate (serial %s) for this Certificate", serial), true
}

// requestHashOf is the hash of the request the Secret's certificate was
// ordered with, from the record ("" when it was signed as asked, or there
// is no record).
func requestHashOf(in input, st *secretState) string {
	if in.record == nil || st.cert == nil {
		return ""
	}
	if e, ok := in.record.own(st.cert); ok {
		return e.RequestHash
	}
	return ""
}

// rebuildingUnvouched reports whether the record is rebuilding, holds
// nothing for st's certificate and this Certificate, and the issuer cannot
// say whether it signed it (an ACME CA).
func rebuildingUnvouched(in input, st *secretState) bool {
	v := in.record
	if v == nil || !v.rebuilding || st.cert == nil || in.sameIssuer == nil {
		return false
	}
	if _, ok := v.own(st.cert); ok {
		return false
	}
	_, known := in.sameIssuer(st.cert)
	return !known
}

// recordKept records a certificate kept without the record holding it:
// taken over from cert-manager, or found while the record rebuilds.
func (r *reconciler) recordKept(ctx context.Context, t *target, cert *x509.Certificate) error {
	if r.opts.Record == nil || t.dry || cert == nil {
		return nil
	}
	if e, ok := r.opts.Record.LookupFor(issuerOf(t), issued.Serial(cert), objectOf(t)); ok && e.Object() == objectOf(t) {
		return nil
	}
	e := issued.For(cert, issuerOf(t), objectOf(t), string(t.crt.UID))
	e.Why = issued.WhyRebuilt
	if t.adopting {
		e.Why = issued.WhyAdopted
	}
	if iss, err := r.opts.Issuers.Resolve(ctx, t.crt.Spec.IssuerRef, t.crt.Namespace, t.cl.GetAPIReader()); err == nil {
		if _, ordered := iss.(issuers.Orderer); ordered {
			// Kept as ordered for today's spec (its names matched it): the
			// request it is compared with from now on, and revokeCert's copy.
			e.RequestHash, _ = certspec.RequestHash(t.crt)
			e.DER, e.PerObject = cert.Raw, true
		}
	}
	logr.FromContextOrDiscard(ctx).Info("recording a certificate the hub keeps", "why", e.Why, "serial", e.Serial)
	return r.opts.Record.Add(ctx, e)
}

// recordIssued records cert, signed for t, before it is written.
func (r *reconciler) recordIssued(ctx context.Context, t *target, cert *x509.Certificate, requestHash string) error {
	if r.opts.Record == nil {
		return nil
	}
	e := issued.For(cert, issuerOf(t), objectOf(t), string(t.crt.UID))
	e.Why, e.Replaces, e.RequestHash = t.why, t.replaces, requestHash
	if requestHash != "" {
		e.DER = cert.Raw   // ordered (ACME): revokeCert needs the certificate
		e.PerObject = true // an order identical requests share delivers one certificate to each
	}
	return r.opts.Record.Add(ctx, e)
}
