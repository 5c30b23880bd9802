package shim

import (
	"context"
	"fmt"
	"sync"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	certificateshim "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/fence"
)

// Reasons of the shims' own Events (cert-manager's SyncFn emits its own:
// CreateCertificate, UpdateCertificate, DeleteCertificate, BadConfig).
const (
	// ReasonDeleteCertificate: the annotation went; the Certificates the
	// object controls are deleted.
	ReasonDeleteCertificate = "DeleteCertificate"
)

type reconciler struct {
	getCluster func(ctx context.Context, name multicluster.ClusterName) (cluster.Cluster, error)
	opts       Options
	object     func() client.Object
	kind       string

	mu      sync.Mutex
	clients map[multicluster.ClusterName]*clusterClients
}

// clusterClients are one engaged cluster's cert-manager client and sync
// function, rebuilt when the cluster is (credential rotation).
type clusterClients struct {
	cl   cluster.Cluster
	sync certificateshim.SyncFn
	cm   cmclient.Interface
}

func (r *reconciler) clientsFor(name multicluster.ClusterName, cl cluster.Cluster, log logr.Logger) (*clusterClients, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.clients[name]; c != nil && c.cl == cl {
		return c, nil
	}
	// The cluster's own HTTP client: its connections, timeouts and metrics.
	cm, err := cmclient.NewForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("failed to build a cert-manager client for cluster %q: %w", name, err)
	}
	lister := &cacheLister{c: cl.GetClient()}
	c := &clusterClients{cl: cl, cm: cm,
		sync: certificateshim.SyncFnFor(oldAPIRecorder{cl.GetEventRecorder("certhub")}, log, cm, lister, r.opts.CertManagerDefaults(), FieldManager)}
	r.clients[name] = c
	return c, nil
}

func (r *reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	cl, err := r.getCluster(ctx, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to get cluster %q: %w", req.ClusterName, err)
	}
	obj := r.object()
	if err := cl.GetClient().Get(ctx, req.NamespacedName, obj); err != nil {
		// Gone: its Certificates go with it (owner references, the
		// cluster's garbage collector), as with cert-manager.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	_, wctx, done, err := fence.WriteContext(ctx, r.opts.Fence, req.ClusterName)
	if err != nil {
		log.V(1).Info("skipping: cluster not owned by this replica")
		return reconcile.Result{}, nil // the owner syncs it; ownership changes requeue everything
	}
	defer done()
	c, err := r.clientsFor(req.ClusterName, cl, log)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !annotated(obj, r.kind, r.opts.AutoCertificateAnnotations) {
		return reconcile.Result{}, r.deleteControlled(wctx, cl, c.cm, obj)
	}
	if err := c.sync(wctx, obj); err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to sync the Certificates of %s %s/%s: %w", r.kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return reconcile.Result{}, nil
}

// annotated is cert-manager's hasShimAnnotation: an issuer annotation, or
// (Ingresses only) an auto annotation set to "true".
func annotated(obj client.Object, kind string, auto []string) bool {
	a := obj.GetAnnotations()
	if _, ok := a[cmapi.IngressIssuerNameAnnotationKey]; ok {
		return true
	}
	if _, ok := a[cmapi.IngressClusterIssuerNameAnnotationKey]; ok {
		return true
	}
	if kind != "Ingress" {
		return false
	}
	for _, k := range auto {
		if a[k] == "true" {
			return true
		}
	}
	return false
}

// deleteControlled deletes the Certificates obj controls: its annotation
// went, so it no longer asks for them. (cert-manager leaves them until the
// object itself is deleted; a GitOps user removing the annotation expects
// them gone, and they are certhub's own creations.)
func (r *reconciler) deleteControlled(ctx context.Context, cl cluster.Cluster, cm cmclient.Interface, obj client.Object) error {
	crts, err := (&cacheLister{c: cl.GetClient()}).Certificates(obj.GetNamespace()).List(labels.Everything())
	if err != nil {
		return err
	}
	for _, crt := range crts {
		if !metav1.IsControlledBy(crt, obj) {
			continue
		}
		err := cm.CertmanagerV1().Certificates(crt.Namespace).Delete(ctx, crt.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &crt.UID}})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete Certificate %s/%s: %w", crt.Namespace, crt.Name, err)
		}
		cl.GetEventRecorder("certhub").Eventf(obj, nil, corev1.EventTypeNormal, ReasonDeleteCertificate, "Sync",
			"Deleted Certificate %q: the %s no longer carries a cert-manager.io issuer annotation", crt.Name, r.kind)
	}
	return nil
}

// oldAPIRecorder gives cert-manager's SyncFn (written for client-go's
// record.EventRecorder) the cluster's events API recorder.
type oldAPIRecorder struct{ rec recorder.EventRecorder }

func (r oldAPIRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	r.rec.Eventf(obj, nil, eventType, reason, "Sync", "%s", message)
}

func (r oldAPIRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	r.rec.Eventf(obj, nil, eventType, reason, "Sync", format, args...)
}

func (r oldAPIRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	r.rec.Eventf(obj, nil, eventType, reason, "Sync", format, args...)
}

// certificateObject is the unstructured Certificate certsync's informer serves.
func certificateObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind))
	return u
}

// ownedBy maps a Certificate to the object of kind that controls it.
func ownedBy(kind string) func(context.Context, client.Object) []mcreconcile.Request {
	return func(_ context.Context, o client.Object) []mcreconcile.Request {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.Kind != kind {
			return nil
		}
		return []mcreconcile.Request{{Request: reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}}
	}
}

// cacheLister is cert-manager's CertificateLister over the cluster's cache
// (the unstructured Certificate informer); undecodable Certificates are
// skipped (certsync reports them).
type cacheLister struct {
	c  client.Reader
	ns string
}

var (
	_ cmlisters.CertificateLister          = &cacheLister{}
	_ cmlisters.CertificateNamespaceLister = &cacheLister{}
)

func (l *cacheLister) Certificates(ns string) cmlisters.CertificateNamespaceLister {
	return &cacheLister{c: l.c, ns: ns}
}

func (l *cacheLister) List(selector labels.Selector) ([]*cmapi.Certificate, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind + "List"))
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: selector}}
	if l.ns != "" {
		opts = append(opts, client.InNamespace(l.ns))
	}
	if err := l.c.List(context.Background(), list, opts...); err != nil {
		return nil, err
	}
	out := make([]*cmapi.Certificate, 0, len(list.Items))
	for i := range list.Items {
		crt := &cmapi.Certificate{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, crt) == nil {
			out = append(out, crt)
		}
	}
	return out, nil
}

func (l *cacheLister) Get(name string) (*cmapi.Certificate, error) {
	u := certificateObject()
	if err := l.c.Get(context.Background(), client.ObjectKey{Namespace: l.ns, Name: name}, u); err != nil {
		return nil, err
	}
	crt := &cmapi.Certificate{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crt); err != nil {
		// Exists but cannot be decoded: not the shim's (it would not write such a spec).
		return nil, apierrors.NewConflict(cmapi.Resource("certificates"), name, fmt.Errorf("cannot decode: %w", err))
	}
	return crt, nil
}
