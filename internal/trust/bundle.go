package trust

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"sync"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// OptOutAnnotation set to "false" on a CA ClusterIssuer leaves it out of the bundle.
const OptOutAnnotation = "certhub.io/trust-bundle"

// bundle is the current trust bundle of the hub, shared by the hub-side
// reconciler (writer) and the downstream one (reader).
type bundle struct {
	mu      sync.Mutex
	pem     []byte
	issuers []string // the issuers in it, for logs
	loaded  bool
	subs    []func()
}

// get returns the bundle and whether it has been computed once.
func (b *bundle) get() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pem, b.loaded
}

func (b *bundle) subscribe(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs = append(b.subs, fn)
}

// set stores pem and tells the subscribers if it changed.
func (b *bundle) set(pemBytes []byte, issuers []string) bool {
	b.mu.Lock()
	changed := !b.loaded || !bytes.Equal(b.pem, pemBytes)
	b.pem, b.issuers, b.loaded = pemBytes, issuers, true
	subs := slices.Clone(b.subs)
	b.mu.Unlock()
	if changed {
		for _, fn := range subs {
			fn()
		}
	}
	return changed
}

// hubReconciler computes the bundle from the hub's ClusterIssuers whenever
// one of them or a Secret of the hub namespace changes.
type hubReconciler struct {
	c         client.Reader
	namespace string
	bundle    *bundle
	log       logr.Logger
	secrets   func(issuer, current string) []string // nil: the spec's Secret
	kicks     chan event.GenericEvent               // a CA rotation changed phase
}

func (r *hubReconciler) setup(mgr manager.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{}}
	})
	b := builder.ControllerManagedBy(mgr).Named("trust-bundle-source")
	if r.kicks != nil {
		b = b.WatchesRawSource(source.Channel(r.kicks, all))
	}
	return b.
		Watches(&cmapi.ClusterIssuer{}, all).
		Watches(&corev1.Secret{}, all, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.namespace
		}))).
		// CA rotations' state (internal/rotation): which CAs a bundle holds.
		Watches(&corev1.ConfigMap{}, all, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.namespace && o.GetLabels()[RotationStateLabel] == "true"
		}))).
		Complete(r)
}

func (r *hubReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	pemBytes, issuers, err := collect(ctx, r.c, r.namespace, r.log, r.secrets)
	if err != nil {
		return reconcile.Result{}, err
	}
	if r.bundle.set(pemBytes, issuers) {
		r.log.Info("trust bundle changed", "issuers", issuers, "bytes", len(pemBytes))
	}
	return reconcile.Result{}, nil
}

// collect builds the bundle: every CA ClusterIssuer's CA certificate,
// parsed (a Secret without one is logged and skipped), deduplicated and
// sorted, so every replica computes the same bytes.
func collect(ctx context.Context, c client.Reader, namespace string, log logr.Logger, secretsFor func(issuer, current string) []string) ([]byte, []string, error) {
	list := &cmapi.ClusterIssuerList{}
	if err := c.List(ctx, list); err != nil {
		return nil, nil, fmt.Errorf("failed to list ClusterIssuers: %w", err)
	}
	seen := map[string]bool{}
	var blocks [][]byte
	var issuers []string
	for i := range list.Items {
		iss := &list.Items[i]
		if iss.Spec.CA == nil || iss.Annotations[OptOutAnnotation] == "false" || iss.DeletionTimestamp != nil {
			continue
		}
		names := []string{iss.Spec.CA.SecretName}
		if secretsFor != nil {
			names = secretsFor(iss.Name, iss.Spec.CA.SecretName)
		}
		found := false
		for _, name := range names {
			for _, der := range caOf(ctx, c, namespace, iss.Name, name, log) {
				found = true
				if !seen[string(der)] {
					seen[string(der)] = true
					blocks = append(blocks, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
				}
			}
		}
		if found {
			issuers = append(issuers, iss.Name)
		}
	}
	slices.SortFunc(blocks, bytes.Compare)
	slices.Sort(issuers)
	return bytes.Join(blocks, nil), issuers, nil
}

// caOf returns the CA certificates (DER) of the issuer's CA Secret name:
// ca.crt, or tls.crt when that is empty; nothing (logged) when unreadable.
func caOf(ctx context.Context, c client.Reader, namespace, issuer, name string, log logr.Logger) [][]byte {
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		log.Info("CA left out of the trust bundle: its Secret cannot be read", "issuer", issuer, "secret", name, "error", err.Error())
		return nil
	}
	raw := s.Data[cmmeta.TLSCAKey]
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = s.Data[corev1.TLSCertKey]
	}
	certs, err := caCertificates(raw)
	if err != nil || len(certs) == 0 {
		log.Info("CA left out of the trust bundle: no CA certificate in its Secret", "issuer", issuer, "secret", name, "error", fmt.Sprint(err))
	}
	return certs
}

// caCertificates returns the DER of the CA certificates in raw (PEM).
func caCertificates(raw []byte) ([][]byte, error) {
	var out [][]byte
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			return out, nil
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		if cert.IsCA {
			out = append(out, cert.Raw)
		}
	}
}
