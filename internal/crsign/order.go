package crsign

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	crutil "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/util"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/issuers"
)

// order asks an ACME ClusterIssuer (an issuers.Orderer) for the request's
// certificate: one ACMEOrder in the hub, finalized with the request's own
// CSR, so the key never leaves the cluster. The order is admitted by the
// hub's budget once (while the hub holds it, asking again costs nothing)
// and by the ACME account's ledger as every order is. While it runs the
// request is Pending with the order's reason; a failed order fails the
// request (terminal, as cert-manager's ACME issuer does: the Certificate
// above it, if any, retries with a new request).
func (r *reconciler) order(ctx context.Context, name multicluster.ClusterName, cr *cmapi.CertificateRequest, o issuers.Orderer, tmpl *x509.Certificate, csr *x509.CertificateRequest, rep *crutil.Reporter) (reconcile.Result, error) {
	req := issuers.OrderRequest{Cluster: string(name), Certificate: orderCertificate(cr, tmpl), Template: tmpl, CSR: csr.Raw}
	inFlight, err := o.InFlight(ctx, req)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !inFlight {
		if wait := r.admit(name, cr, rep); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	res, err := o.Order(ctx, req)
	if p := (*issuers.Pending)(nil); errors.As(err, &p) {
		rep.Pending(cr, nil, p.Reason, p.Message)
		return reconcile.Result{RequeueAfter: max(p.RetryAfter, 100*time.Millisecond)}, nil
	}
	if ie := (*issuers.Error)(nil); errors.As(err, &ie) {
		rep.Failed(cr, errors.New(ie.Message), ie.Reason, "The ACME order failed")
		r.metrics.result(name, cmapi.CertificateRequestReasonFailed)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	chain, err := pki.DecodeX509CertificateChainBytes(res.ChainPEM)
	if err != nil {
		rep.Failed(cr, err, "DecodeError", "Failed to decode returned certificate")
		r.metrics.result(name, cmapi.CertificateRequestReasonFailed)
		return reconcile.Result{}, nil
	}
	if ok, err := pki.PublicKeysEqual(chain[0].PublicKey, csr.PublicKey); err != nil || !ok {
		// Never hand out a certificate for another key (an order of the
		// same name from an earlier request, say).
		return reconcile.Result{}, fmt.Errorf("the ACME order's certificate is not for the key of CertificateRequest %s/%s", cr.Namespace, cr.Name)
	}
	if err := r.record(ctx, name, cr, chain[0], true); err != nil {
		return reconcile.Result{}, err
	}
	cr.Status.Certificate = res.ChainPEM
	rep.Ready(cr)
	r.metrics.result(name, cmapi.CertificateRequestReasonIssued)
	logr.FromContextOrDiscard(ctx).Info("signed CertificateRequest", "issuer", cr.Spec.IssuerRef.Name, "serial", chain[0].SerialNumber.Text(16))
	return reconcile.Result{}, nil
}

// orderCertificate is the request as the Orderer reads a Certificate:
// what the policy decided on (asCertificate), its identity for one order
// per request (UID, creation), its labels (the ACME solver's selector) and
// the names of its CSR, as checked by policy.
func orderCertificate(cr *cmapi.CertificateRequest, tmpl *x509.Certificate) *cmapi.Certificate {
	crt := asCertificate(cr)
	crt.UID, crt.Labels, crt.CreationTimestamp = cr.UID, cr.Labels, cr.CreationTimestamp
	crt.Spec.CommonName, crt.Spec.DNSNames, crt.Spec.EmailAddresses = tmpl.Subject.CommonName, tmpl.DNSNames, tmpl.EmailAddresses
	for _, ip := range tmpl.IPAddresses {
		crt.Spec.IPAddresses = append(crt.Spec.IPAddresses, ip.String())
	}
	for _, u := range tmpl.URIs {
		crt.Spec.URIs = append(crt.Spec.URIs, u.String())
	}
	return crt
}
