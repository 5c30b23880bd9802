package secretcache

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// Meta is the object of the managed-Secret watch: metadata only. No
// downstream Secret's data ever crosses the wire through a watch, whatever
// labels a tenant sets (secretTemplate can set certhub's own), so a cluster
// in external mode sends the hub no key; where the hub issues, the data of
// a managed Secret is read once per version it did not write (Store).
func Meta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// ErrKeysStayDownstream is returned when the cluster's mode (external,
// off) keeps its Secrets' data out of the hub: nothing was read.
var ErrKeysStayDownstream = errors.New("the cluster's mode keeps Secrets downstream")

// Store keeps the managed Secrets as this replica last read or wrote
// them, by cluster, keyed by resourceVersion: a decision reads a Secret's
// data only when the watch shows a version it does not hold. Only clusters
// where the hub issues or observes fill it (the reconciler leaves external
// and off clusters before any read); a cluster is dropped when its mode no
// longer allows reads and when its engagement ends. The zero value is
// ready; it is shared with the CA rotation (Leaf), so a leaf is read once.
type Store struct {
	// readable says whether a cluster's mode lets the hub read its
	// Secrets (not external, not off); SetReadable. Nil: every cluster.
	readable func(multicluster.ClusterName) bool

	mu        sync.Mutex
	byCluster map[multicluster.ClusterName]map[types.NamespacedName]*corev1.Secret
}

// SetReadable sets what says whether a cluster's mode lets the hub read
// its Secrets; call it before the store is used.
func (s *Store) SetReadable(fn func(multicluster.ClusterName) bool) { s.readable = fn }

// get returns a copy of key's Secret at version rv; nil when not held.
func (s *Store) get(name multicluster.ClusterName, key types.NamespacedName, rv string) *corev1.Secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec := s.byCluster[name][key]; sec != nil && sec.ResourceVersion == rv {
		return sec.DeepCopy()
	}
	return nil
}

// At returns a copy of Secret key of a cluster at resourceVersion rv, as
// this replica last read or wrote it; nil when it holds another version
// (discovery.Options.Written).
func (s *Store) At(name multicluster.ClusterName, key client.ObjectKey, rv string) *corev1.Secret {
	return s.get(name, key, rv)
}

// Put holds sec (a Secret certhub manages, as read or written).
func (s *Store) Put(name multicluster.ClusterName, sec *corev1.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byCluster == nil {
		s.byCluster = map[multicluster.ClusterName]map[types.NamespacedName]*corev1.Secret{}
	}
	m := s.byCluster[name]
	if m == nil {
		m = map[types.NamespacedName]*corev1.Secret{}
		s.byCluster[name] = m
	}
	m[types.NamespacedName{Namespace: sec.Namespace, Name: sec.Name}] = sec.DeepCopy()
}

// Forget drops key's Secret (it is gone, or no longer certhub's).
func (s *Store) Forget(name multicluster.ClusterName, key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byCluster[name], key)
}

// Drop forgets every Secret of a cluster.
func (s *Store) Drop(name multicluster.ClusterName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byCluster, name)
}

// Get returns Secret key of a cluster, or nil when it does not exist;
// foreign is true when it exists but certhub did not write it. The watch
// holds only the metadata of managed Secrets (Meta); their data comes
// from the store at the version the watch shows, read live when it holds
// another (or the watch has not seen it: a Secret that is not certhub's, or
// one just written).
func (s *Store) Get(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, key client.ObjectKey) (*corev1.Secret, bool, error) {
	if s.readable != nil && !s.readable(name) {
		s.Drop(name)
		return nil, false, fmt.Errorf("%w: cluster %s", ErrKeysStayDownstream, name)
	}
	m := Meta()
	err := cl.GetClient().Get(ctx, key, m)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, false, fmt.Errorf("failed to get Secret %s: %w", key, err)
	}
	if err == nil {
		if sec := s.get(name, key, m.ResourceVersion); sec != nil {
			return sec, false, nil
		}
	}
	live, err := liveSecret(ctx, cl, key)
	if err != nil {
		return nil, false, err
	}
	if live == nil {
		s.Forget(name, key)
		return nil, false, nil
	}
	// The watch selects managed Secrets; the label is checked anyway, so a
	// client without that selector can never make certhub overwrite one.
	foreign := live.Labels[hubapi.ManagedByLabel] != hubapi.ManagedByValue
	if foreign {
		s.Forget(name, key)
	} else {
		s.Put(name, live)
	}
	return live, foreign, nil
}

// Leaf is the certificate in the tls.crt of the managed Secret key (nil
// when there is none, or the Secret is not certhub's).
func (s *Store) Leaf(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, key client.ObjectKey) (*x509.Certificate, error) {
	sec, foreign, err := s.Get(ctx, name, cl, key)
	if err != nil || sec == nil || foreign {
		return nil, err
	}
	leaf, err := pki.DecodeX509CertificateBytes(sec.Data[corev1.TLSCertKey])
	if err != nil {
		return nil, nil //nolint:nilerr // an unreadable tls.crt holds no certificate
	}
	return leaf, nil
}

// liveSecret reads Secret key from the API server, bypassing the cache; nil when it does not exist.
func liveSecret(ctx context.Context, cl cluster.Cluster, key client.ObjectKey) (*corev1.Secret, error) {
	live := &corev1.Secret{}
	if err := cl.GetAPIReader().Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to get Secret %s: %w", key, err)
	}
	return live, nil
}
