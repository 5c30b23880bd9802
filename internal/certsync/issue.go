package certsync

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/outputs"
)

// repairSecret re-applies a Secret whose certificate is still good but whose
// metadata or extra outputs no longer match the spec (secretTemplate,
// additionalOutputFormats, keystores changed, or someone edited them), like
// cert-manager's post-issuance policies: no new certificate is issued.
func (r *reconciler) repairSecret(ctx context.Context, t *target, s *corev1.Secret, pw outputs.Passwords) error {
	d := secretData{certPEM: s.Data[corev1.TLSCertKey], keyPEM: s.Data[corev1.TLSPrivateKeyKey], caPEM: s.Data[cmmeta.TLSCAKey],
		issuances: s.Annotations[hubapi.IssuancesAnnotation]} // carried over: an apply without it would remove it
	cert, err := pki.DecodeX509CertificateBytes(d.certPEM)
	if err != nil {
		return nil // the trigger chain already judged the data; nothing to repair
	}
	d.cert = cert
	extra, err := outputs.Extra(t.crt, pw, d.certPEM, d.keyPEM, d.caPEM)
	if err != nil {
		return err
	}
	d.extra = extra
	want, err := secretApply(t.crt, d, "")
	if err != nil {
		return err
	}
	why := secretDrift(want, s)
	if why == "" {
		return nil
	}
	logr.FromContextOrDiscard(ctx).Info("repairing Secret without reissuing", "drift", why)
	return r.applySecret(ctx, t, s, d)
}

func (r *reconciler) issue(ctx context.Context, t *target, existing *corev1.Secret, st *secretState, pw outputs.Passwords, rec loopRecord) (_ reconcile.Result, err error) {
	crt := t.crt
	start := time.Now()
	defer func() {
		result := "success"
		if ready := apiutil.GetCertificateCondition(t.crt, cmapi.CertificateConditionReady); err != nil || ready == nil || ready.Status != cmmeta.ConditionTrue {
			result = "failed"
		}
		r.metrics.Issued(t.name, result, start)
	}()
	issuer, err := t.override, error(nil)
	if issuer == nil {
		issuer, err = r.opts.Issuers.Resolve(ctx, crt.Spec.IssuerRef, crt.Namespace, t.cl.GetAPIReader())
	}
	if ie := (*issuers.Error)(nil); errors.As(err, &ie) {
		return r.issuerError(ctx, t, ie)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if d := t.decision.ForIssuer(issuers.SelfSigned(issuer)); !d.Allowed {
		// Decided on the signer itself, so an issuer changed since the
		// policy looked cannot lend the default's allowance to a hub CA.
		return reconcile.Result{}, r.setNotReady(ctx, t, reasons.PolicyDenied, "Denied by issuance policy: "+d.Message)
	}

	key := st.key
	reuse := crt.Spec.PrivateKey != nil && crt.Spec.PrivateKey.RotationPolicy == cmapi.RotationPolicyNever &&
		key != nil && len(pki.PrivateKeyMatchesSpec(key, crt.Spec)) == 0
	if o, ok := issuer.(issuers.Orderer); ok {
		if !reuse {
			key = nil // the Orderer generates the key and keeps it in the hub until issued
		}
		return r.order(ctx, t, o, key, existing, st, pw, rec)
	}
	if !reuse {
		if largeKey(crt) {
			select {
			case r.largeKeys <- struct{}{}:
				defer func() { <-r.largeKeys }()
			default:
				logr.FromContextOrDiscard(ctx).V(1).Info("large-key slots taken; freeing the worker", "retryIn", largeKeyRetry)
				return reconcile.Result{RequeueAfter: largeKeyRetry}, nil
			}
		}
		if key, err = pki.GeneratePrivateKeyForCertificate(crt); err != nil {
			return reconcile.Result{}, r.setNotReady(ctx, t, reasons.InvalidSpec, fmt.Sprintf("Cannot generate private key: %v", err))
		}
	}
	keyPEM, err := encodeKey(crt, key)
	if err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, reasons.InvalidSpec, fmt.Sprintf("Cannot encode private key: %v", err))
	}
	res, err := issuer.Sign(ctx, issuers.Request{Template: t.template, PublicKey: key.Public(), PrivateKey: key})
	if err != nil {
		return reconcile.Result{}, errors.Join(err, r.setNotReady(ctx, t, reasons.IssuanceFailed, err.Error()))
	}
	return r.write(ctx, t, existing, pw, rec, res, keyPEM, "")
}

// issuerError records an issuer's typed refusal as Ready=False and retries
// after its RetryAfter, the issuer retry interval, or (terminal) never.
func (r *reconciler) issuerError(ctx context.Context, t *target, ie *issuers.Error) (reconcile.Result, error) {
	res := reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}
	switch {
	case ie.Terminal:
		res = reconcile.Result{}
	case ie.RetryAfter > 0:
		res.RequeueAfter = ie.RetryAfter
	}
	return res, r.setNotReady(ctx, t, ie.Reason, ie.Message)
}

// order asks an Orderer (ACME) for the certificate. While the order runs
// the Certificate shows Issuing=True with the order's reason and the
// reconcile returns at once, to be called again; a failed order is
// Ready=False with the CA's error; an issued one is written like a signed one.
func (r *reconciler) order(ctx context.Context, t *target, o issuers.Orderer, key crypto.Signer, existing *corev1.Secret, st *secretState, pw outputs.Passwords, rec loopRecord) (reconcile.Result, error) {
	crt := t.crt
	res, err := o.Order(ctx, orderRequest(t, key, st))
	if p := (*issuers.Pending)(nil); errors.As(err, &p) {
		wait := reconcile.Result{RequeueAfter: max(p.RetryAfter, 100*time.Millisecond)}
		if c := apiutil.GetCertificateCondition(crt, cmapi.CertificateConditionIssuing); c != nil && c.Status == cmmeta.ConditionTrue && c.Reason == p.Reason && c.Message == p.Message {
			return wait, nil
		}
		return wait, r.updateStatus(ctx, t, false, func(crt *cmapi.Certificate) {
			r.setCondition(crt, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue, p.Reason, p.Message)
		})
	}
	if ie := (*issuers.Error)(nil); errors.As(err, &ie) {
		return r.issuerError(ctx, t, ie)
	}
	if err != nil {
		return reconcile.Result{}, errors.Join(err, r.setNotReady(ctx, t, reasons.IssuanceFailed, err.Error()))
	}
	if res.PrivateKey == nil {
		res.PrivateKey = key
	}
	if res.PrivateKey == nil {
		return reconcile.Result{}, errors.New("the orderer returned a certificate without its private key")
	}
	keyPEM, err := encodeKey(crt, res.PrivateKey)
	if err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, reasons.InvalidSpec, fmt.Sprintf("Cannot encode private key: %v", err))
	}
	hash, err := certspec.RequestHash(crt)
	if err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, reasons.InvalidSpec, fmt.Sprintf("Cannot build the request from spec: %v", err))
	}
	return r.write(ctx, t, existing, pw, rec, res, keyPEM, hash)
}

// write stores an issued certificate and its key in the Secret and marks
// the Certificate Ready.
func (r *reconciler) write(ctx context.Context, t *target, existing *corev1.Secret, pw outputs.Passwords, rec loopRecord, res issuers.Result, keyPEM []byte, requestHash string) (reconcile.Result, error) {
	crt := t.crt
	cert, err := pki.DecodeX509CertificateBytes(res.ChainPEM)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to decode signed certificate: %w", err)
	}

	if err := r.recordIssued(ctx, t, cert, requestHash); err != nil {
		// Never delivered unrecorded: the hub must know what it signed.
		return reconcile.Result{}, errors.Join(err, r.setNotReady(ctx, t, reasons.IssuanceFailed, "The certificate signed could not be recorded: "+err.Error()))
	}
	d := secretData{certPEM: res.ChainPEM, keyPEM: keyPEM, caPEM: res.CAPEM, cert: cert, issuances: rec.String()}
	if d.extra, err = outputs.Extra(crt, pw, d.certPEM, d.keyPEM, d.caPEM); err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, reasons.IssuanceFailed, err.Error())
	}
	if err := r.applySecret(ctx, t, existing, d); err != nil {
		if errors.Is(err, fence.ErrNotOwner) {
			return reconcile.Result{}, nil // ownership moved while signing; the new owner issues
		}
		return reconcile.Result{}, errors.Join(err, r.setNotReady(ctx, t, reasons.IssuanceFailed, err.Error()))
	}
	r.eventf(t, crt, corev1.EventTypeNormal, reasons.Issuing, "The certificate has been successfully issued")
	return r.setReady(ctx, t, cert, 1)
}

// encodeKey is key in the encoding crt asks for (PKCS#1 by default).
func encodeKey(crt *cmapi.Certificate, key crypto.Signer) ([]byte, error) {
	var encoding cmapi.PrivateKeyEncoding
	if crt.Spec.PrivateKey != nil {
		encoding = crt.Spec.PrivateKey.Encoding
	}
	return pki.EncodePrivateKey(key, encoding)
}

// largeKey reports whether crt needs an RSA key of 4096 bits or more
// (seconds of CPU each; RSA-8192 tens of seconds).
func largeKey(crt *cmapi.Certificate) bool {
	pk := crt.Spec.PrivateKey
	return pk != nil && (pk.Algorithm == "" || pk.Algorithm == cmapi.RSAKeyAlgorithm) && pk.Size >= 4096
}

// applySecret writes the Secret with server-side apply, stamped with this
// replica's ownership; existing (may be nil) decides the immutable type.
func (r *reconciler) applySecret(ctx context.Context, t *target, existing *corev1.Secret, d secretData) error {
	writer, ctx, cancel, err := r.writeContext(ctx, t)
	if err != nil {
		return err
	}
	defer cancel()
	ac, err := secretApply(t.crt, d, writer)
	if err != nil {
		return err
	}
	if existing != nil && existing.Type != "" {
		ac.WithType(existing.Type) // the type of an existing Secret is immutable
	}
	if err := t.cl.GetClient().Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply Secret %s/%s: %w", t.crt.Namespace, t.crt.Spec.SecretName, err)
	}
	// The answer is the Secret as written: held, so the watch's news of
	// this version needs no read.
	if written, err := secretOf(ac); err == nil && written.ResourceVersion != "" {
		r.secrets.Put(t.name, written)
	}
	return nil
}

// secretOf is the Secret an applied configuration describes (the API
// server's answer is decoded into it).
func secretOf(ac *corev1ac.SecretApplyConfiguration) (*corev1.Secret, error) {
	b, err := json.Marshal(ac)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{}
	return s, json.Unmarshal(b, s)
}
