package certsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"

	"github.com/certhub/certhub/internal/outputs"
)

// passwordError: a keystore password Secret or key is missing downstream.
type passwordError struct{ msg string }

func (e *passwordError) Error() string { return e.msg }

// keystorePasswords resolves the keystore passwords: a literal, or a key of a
// Secret in the Certificate's namespace (read live: it is the user's Secret,
// not in the managed-Secret cache).
func (r *reconciler) keystorePasswords(ctx context.Context, t *target) (outputs.Passwords, error) {
	var pw outputs.Passwords
	ks := t.crt.Spec.Keystores
	if ks == nil {
		return pw, nil
	}
	get := func(kind string, ref cmmeta.SecretKeySelector, literal *string) (string, error) {
		if literal != nil {
			return *literal, nil
		}
		s := &corev1.Secret{}
		key := client.ObjectKey{Namespace: t.crt.Namespace, Name: ref.Name}
		if err := t.cl.GetAPIReader().Get(ctx, key, s); err != nil {
			if apierrors.IsNotFound(err) {
				return "", &passwordError{fmt.Sprintf("%s keystore password Secret %q not found", kind, ref.Name)}
			}
			return "", fmt.Errorf("failed to get %s keystore password Secret %s: %w", kind, key, err)
		}
		if len(s.Data[ref.Key]) == 0 {
			return "", &passwordError{fmt.Sprintf("%s keystore password Secret %q contains no data for key %q", kind, ref.Name, ref.Key)}
		}
		return string(s.Data[ref.Key]), nil
	}
	var err error
	if ks.PKCS12 != nil && ks.PKCS12.Create {
		if pw.PKCS12, err = get("PKCS12", ks.PKCS12.PasswordSecretRef, ks.PKCS12.Password); err != nil {
			return pw, err
		}
	}
	if ks.JKS != nil && ks.JKS.Create {
		if pw.JKS, err = get("JKS", ks.JKS.PasswordSecretRef, ks.JKS.Password); err != nil {
			return pw, err
		}
	}
	return pw, nil
}

// notAdoptable says why certhub may not take over s, a Secret it did not
// write, for crt ("" when it may): only an Opaque or kubernetes.io/tls
// Secret in crt's namespace that cert-manager wrote for crt (its
// cert-manager.io/certificate-name annotation names crt: cert-manager's own
// ownership rule, so a fleet moves from cert-manager without a hand
// annotation), or whose AdoptAnnotation names crt.
func notAdoptable(s *corev1.Secret, crt *cmapi.Certificate) string {
	switch s.Type {
	case "", corev1.SecretTypeOpaque, corev1.SecretTypeTLS:
	default:
		return fmt.Sprintf("Secret %q exists with type %s and was not written by certhub; certhub never takes over typed Secrets. Choose another secretName", s.Name, s.Type)
	}
	if s.Namespace == crt.Namespace && (s.Annotations[cmapi.CertificateNameKey] == crt.Name || s.Annotations[hubapi.AdoptSecretAnnotation] == crt.Name) {
		return ""
	}
	return fmt.Sprintf("Secret %q exists and was not written by certhub nor by cert-manager for this Certificate; it is left untouched. To let this Certificate take it over, annotate the Secret (whoever may write it): %s: %q", s.Name, hubapi.AdoptSecretAnnotation, crt.Name)
}

// liveSecret reads Secret key from the API server, bypassing the cache; nil when it does not exist.
func (r *reconciler) liveSecret(ctx context.Context, cl cluster.Cluster, key client.ObjectKey) (*corev1.Secret, error) {
	live := &corev1.Secret{}
	if err := cl.GetAPIReader().Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to get Secret %s: %w", key, err)
	}
	return live, nil
}

// gathered is what a decision about one Certificate reads besides the
// Certificate: its Secret, the keystore passwords and the time.
type gathered struct {
	secret    *corev1.Secret
	passwords outputs.Passwords
	now       time.Time
}

// gather reads t's Secret (refusing one certhub may not take over, or one
// another Certificate owns) and its keystore passwords.
func (r *reconciler) gather(ctx context.Context, t *target) (gathered, bool, reconcile.Result, error) {
	crt, cl := t.crt, t.cl
	secret, foreign, err := r.secrets.Get(ctx, t.name, cl, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName})
	if err != nil {
		return gathered{}, true, reconcile.Result{}, err
	}
	if foreign {
		if why := notAdoptable(secret, crt); why != "" {
			// The foreign Secret is not watched (the cache holds managed
			// Secrets only): look again for an adoption grant.
			return gathered{}, true, reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, r.setNotReady(ctx, t, reasons.SecretNotOwned, why)
		}
		t.adopting = true
	}
	owner, others, err := secretOwner(ctx, cl.GetClient(), r.opts.Indexer != nil, crt, secret)
	if err != nil {
		return gathered{}, true, reconcile.Result{}, err
	}
	if owner != crt.Name {
		msg := fmt.Sprintf("Secret %q is also the secretName of Certificate(s) %s in this namespace; %q owns it (the one the Secret's %s annotation names, else the oldest), so nothing is issued for this Certificate until it is the only one",
			crt.Spec.SecretName, strings.Join(others, ", "), owner, cmapi.CertificateNameKey)
		return gathered{}, true, reconcile.Result{RequeueAfter: duplicateRequeue}, r.setNotReady(ctx, t, reasons.DuplicateSecretName, msg)
	}
	pw, err := r.keystorePasswords(ctx, t)
	if err != nil {
		var nf *passwordError
		if errors.As(err, &nf) {
			return gathered{}, true, reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, r.setNotReady(ctx, t, reasons.KeystorePasswordNotFound, nf.Error())
		}
		return gathered{}, true, reconcile.Result{}, err
	}
	return gathered{secret: secret, passwords: pw, now: r.opts.clock.Now()}, false, reconcile.Result{}, nil
}
