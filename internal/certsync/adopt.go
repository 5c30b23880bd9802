package certsync

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// requestListTTL is how long one namespace's list of CertificateRequests
// serves the take-overs there: cert-manager is stopped (the gate saw it),
// so nothing creates requests meanwhile, and a namespace of n Certificates
// is listed once, not n times.
const requestListTTL = 30 * time.Second

// dropStaleRequests deletes the CertificateRequests cert-manager left for
// t's Certificate that would make it issue again if it came back (a
// rollback), judged as cert-manager's trigger judges them:
//   - requests in flight (for a revision after status.revision): taking the
//     Certificate over, the hub issues that revision itself, and cert-manager
//     would compare the hub's key with the request's;
//   - the current revision's request when it no longer matches the spec
//     (pki.RequestMatchesSpec, cert-manager's own check: typically
//     spec.issuerRef, now a hub issuer): cert-manager would re-issue
//     (RequestChanged) a certificate the hub kept. Without it cert-manager
//     compares the Secret's certificate with the spec instead.
//
// Requests of older revisions, and a current one that still matches, stay.
// A registration that may not list or delete them (RBAC older than this)
// is logged and skipped.
func (r *reconciler) dropStaleRequests(ctx context.Context, t *target) error {
	log := logr.FromContextOrDiscard(ctx)
	reqs, err := r.requests.of(ctx, t, r.opts.clock.Now())
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			log.Info("cannot list CertificateRequests; cert-manager's requests are left", "error", err.Error())
			return nil
		}
		return fmt.Errorf("failed to list CertificateRequests in %s: %w", t.crt.Namespace, err)
	}
	current := 0
	if t.crt.Status.Revision != nil {
		current = *t.crt.Status.Revision
	}
	for _, m := range reqs {
		rev, err := strconv.Atoi(m.Annotations[cmapi.CertificateRequestRevisionAnnotationKey])
		if err != nil || rev < current {
			continue
		}
		cr := &cmapi.CertificateRequest{}
		if err := t.cl.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Name}, cr); err != nil {
			switch {
			case apierrors.IsNotFound(err):
				continue
			case apierrors.IsForbidden(err):
				log.Info("cannot read cert-manager's CertificateRequest; left", "certificateRequest", m.Name, "error", err.Error())
				return nil
			}
			return fmt.Errorf("failed to get CertificateRequest %s/%s: %w", m.Namespace, m.Name, err)
		}
		why := staleRequest(cr, t.crt, current)
		if why == "" {
			continue
		}
		_, wctx, done, err := r.writeContext(ctx, t)
		if err != nil {
			return nil // not ours to write any more
		}
		err = t.cl.GetClient().Delete(wctx, cr, client.Preconditions{UID: &cr.UID})
		done()
		switch {
		case apierrors.IsForbidden(err):
			log.Info("cannot delete cert-manager's CertificateRequest; left", "certificateRequest", cr.Name, "error", err.Error())
			return nil
		case client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err):
			return fmt.Errorf("failed to delete CertificateRequest %s/%s: %w", cr.Namespace, cr.Name, err)
		}
		log.Info("deleted cert-manager's CertificateRequest", "certificateRequest", cr.Name, "why", why)
	}
	return nil
}

// staleRequest says why cr, a request of crt whose status.revision is
// current, would make cert-manager issue again; "" when it would not.
func staleRequest(cr *cmapi.CertificateRequest, crt *cmapi.Certificate, current int) string {
	if !metav1.IsControlledBy(cr, crt) {
		return ""
	}
	rev, err := strconv.Atoi(cr.Annotations[cmapi.CertificateRequestRevisionAnnotationKey])
	switch {
	case err != nil || rev < current:
		return ""
	case rev > current:
		return fmt.Sprintf("in flight for revision %d", rev)
	}
	violations, err := pki.RequestMatchesSpec(cr, crt.Spec)
	if err != nil || len(violations) == 0 {
		return "" // cert-manager does not act on a request it cannot parse either
	}
	return fmt.Sprintf("revision %d's request no longer matches the spec: %v", rev, violations)
}

// requestIndex keeps, per cluster and namespace, the metadata of the
// CertificateRequests by controlling Certificate, for requestListTTL.
type requestIndex struct {
	mu    sync.Mutex
	lists map[requestListKey]*requestList
}

type requestListKey struct {
	cluster   multicluster.ClusterName
	namespace string
}

type requestList struct {
	at      time.Time
	byOwner map[types.UID][]metav1.PartialObjectMetadata
}

// of returns the requests t's Certificate controls, from a list of its
// namespace no older than requestListTTL at now.
func (x *requestIndex) of(ctx context.Context, t *target, now time.Time) ([]metav1.PartialObjectMetadata, error) {
	key := requestListKey{cluster: t.name, namespace: t.crt.Namespace}
	x.mu.Lock()
	if x.lists == nil {
		x.lists = map[requestListKey]*requestList{}
	}
	for k, l := range x.lists { // bounded by the namespaces taken over in the last TTL
		if now.Sub(l.at) > requestListTTL {
			delete(x.lists, k)
		}
	}
	l := x.lists[key]
	x.mu.Unlock()
	if l == nil {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateRequestKind + "List"))
		if err := t.cl.GetAPIReader().List(ctx, list, client.InNamespace(t.crt.Namespace)); err != nil {
			return nil, err
		}
		l = &requestList{at: now, byOwner: map[types.UID][]metav1.PartialObjectMetadata{}}
		for _, m := range list.Items {
			if ref := metav1.GetControllerOf(&m); ref != nil && ref.Kind == cmapi.CertificateKind {
				l.byOwner[ref.UID] = append(l.byOwner[ref.UID], m)
			}
		}
		x.mu.Lock()
		x.lists[key] = l
		x.mu.Unlock()
	}
	return l.byOwner[t.crt.UID], nil
}
