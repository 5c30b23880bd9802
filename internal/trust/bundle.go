package trust

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Annotations on a CA ClusterIssuer that say where its CA is trusted.
const ()

// entry is one issuer's part of the bundles: its CA certificates and where
// they are trusted.
type entry struct {
	issuer     string
	clusters   labels.Selector // labels.Nothing() for an invalid selector
	namespaces []string        // name globs; nil: every namespace
	blocks     [][]byte        // PEM blocks
	crl        []byte          // the issuer's CRL (PEM), when the hub keeps one (internal/revocation)
}

// entries are the hub's CAs with their scopes, sorted by issuer.
type entries []entry

// pem is the bundle for one namespace of a cluster with clusterLabels: the
// CA certificates of every issuer scoped there, deduplicated and sorted,
// so every replica computes the same bytes.
func (es entries) pem(clusterLabels labels.Set, namespace string) []byte {
	seen := map[string]bool{}
	var blocks [][]byte
	for _, e := range es {
		if !e.clusters.Matches(clusterLabels) || !matchesName(e.namespaces, namespace) {
			continue
		}
		for _, b := range e.blocks {
			if !seen[string(b)] {
				seen[string(b)] = true
				blocks = append(blocks, b)
			}
		}
	}
	slices.SortFunc(blocks, bytes.Compare)
	return bytes.Join(blocks, nil)
}

// crls are the CRLs of the issuers scoped where pem is: one PEM block each,
// sorted by issuer; nil when none has one.
func (es entries) crls(clusterLabels labels.Set, namespace string) []byte {
	var out []byte
	for _, e := range es {
		if len(e.crl) > 0 && e.clusters.Matches(clusterLabels) && matchesName(e.namespaces, namespace) {
			out = append(out, e.crl...)
		}
	}
	return out
}

// key is a canonical form of es, to tell a change.
func (es entries) key() string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%s|%s|%s|", e.issuer, e.clusters, strings.Join(e.namespaces, ","))
		for _, blk := range e.blocks {
			b.Write(blk)
		}
		b.Write(e.crl)
	}
	return b.String()
}

func matchesName(globs []string, name string) bool {
	if globs == nil {
		return true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// bundle is the current set of the hub's CAs, shared by the hub-side
// reconciler (writer) and the downstream one (reader).
type bundle struct {
	mu      sync.Mutex
	entries entries
	loaded  bool
	subs    []func()
}

// get returns the entries and whether they have been computed once.
func (b *bundle) get() (entries, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.entries, b.loaded
}

func (b *bundle) subscribe(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs = append(b.subs, fn)
}

// set stores es and tells the subscribers if it changed.
func (b *bundle) set(es entries) bool {
	b.mu.Lock()
	changed := !b.loaded || b.entries.key() != es.key()
	b.entries, b.loaded = es, true
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
		// CA rotations' state (internal/rotation): which CAs a bundle holds;
		// the CRLs the hub keeps (internal/revocation), published beside.
		Watches(&corev1.ConfigMap{}, all, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.namespace && (o.GetLabels()[hubapi.RotationStateLabel] == "true" || o.GetLabels()[hubapi.CRLLabel] == "true")
		}))).
		Complete(r)
}

func (r *hubReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	es, err := collect(ctx, r.c, r.namespace, r.log, r.secrets)
	if err != nil {
		return reconcile.Result{}, err
	}
	if r.bundle.set(es) {
		issuers := make([]string, 0, len(es))
		for _, e := range es {
			issuers = append(issuers, e.issuer)
		}
		r.log.Info("trust bundle changed", "issuers", issuers)
	}
	return reconcile.Result{}, nil
}

// collect reads every CA ClusterIssuer's CA certificates, parsed (a
// Secret without one is logged and skipped), with the scope its
// annotations give them.
func collect(ctx context.Context, c client.Reader, namespace string, log logr.Logger, secretsFor func(issuer, current string) []string) (entries, error) {
	list := &cmapi.ClusterIssuerList{}
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("failed to list ClusterIssuers: %w", err)
	}
	var es entries
	for i := range list.Items {
		iss := &list.Items[i]
		if iss.Spec.CA == nil || iss.Annotations[hubapi.TrustBundleAnnotation] == "false" || iss.DeletionTimestamp != nil {
			continue
		}
		names := []string{iss.Spec.CA.SecretName}
		if secretsFor != nil {
			names = secretsFor(iss.Name, iss.Spec.CA.SecretName)
		}
		e := scope(iss, log)
		for _, name := range names {
			for _, der := range caOf(ctx, c, namespace, iss.Name, name, log) {
				e.blocks = append(e.blocks, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
			}
		}
		if len(e.blocks) > 0 {
			slices.SortFunc(e.blocks, bytes.Compare)
			e.crl = crlOf(ctx, c, namespace, iss.Name)
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.issuer, b.issuer) })
	return es, nil
}

// scope reads where iss's CA is trusted from its annotations.
func scope(iss *cmapi.ClusterIssuer, log logr.Logger) entry {
	e := entry{issuer: iss.Name, clusters: labels.Everything()}
	if sel, ok := iss.Annotations[hubapi.TrustClustersAnnotation]; ok {
		parsed, err := labels.Parse(sel)
		if err != nil {
			log.Error(err, "CA published to no cluster: its cluster selector does not parse", "issuer", iss.Name, "annotation", hubapi.TrustClustersAnnotation)
			parsed = labels.Nothing()
		}
		e.clusters = parsed
	}
	if globs, ok := iss.Annotations[hubapi.TrustNamespacesAnnotation]; ok {
		e.namespaces = []string{}
		for _, g := range strings.Split(globs, ",") {
			if g = strings.TrimSpace(g); g != "" {
				if _, err := path.Match(g, ""); err != nil {
					log.Error(err, "namespace pattern ignored: it does not parse", "issuer", iss.Name, "annotation", hubapi.TrustNamespacesAnnotation, "pattern", g)
					continue
				}
				e.namespaces = append(e.namespaces, g)
			}
		}
	}
	return e
}

// crlOf returns the CRL the hub keeps for issuer (PEM), nil when none.
func crlOf(ctx context.Context, c client.Reader, namespace, issuer string) []byte {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: hubapi.CRLName(issuer)}, cm); err != nil ||
		cm.Annotations[hubapi.CRLIssuerAnnotation] != issuer {
		return nil
	}
	return []byte(cm.Data[hubapi.CRLKey])
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
