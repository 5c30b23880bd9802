package trust

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/fence"
)

const (
	// DefaultConfigMapName names the target ConfigMap, trust-manager style.
	DefaultConfigMapName = "certhub-ca-bundle"
	// DefaultKey is the target's key holding the PEM bundle.
	DefaultKey = "ca.crt"
	// CRLKey holds, beside the bundle, the CRLs the hub keeps for the CAs
	// in it (PEM, one per CA that revoked something; internal/revocation).
	CRLKey = "crl.pem"
	// ReasonNotManaged is the Event reason when a ConfigMap of the bundle's
	// name exists and is not certhub's.
	ReasonNotManaged = "TrustBundleConflict"
)

// Options configure the trust bundles.
type Options struct {
	// Namespace is the hub namespace holding the CA Secrets. Required.
	Namespace string
	// ConfigMapName and Key name the target. Default DefaultConfigMapName, DefaultKey.
	ConfigMapName, Key string
	// NamespaceSelector picks the downstream namespaces. Nil: every namespace.
	NamespaceSelector labels.Selector
	// Fence gates every write and bounds it by the owner's deadline. Nil:
	// this replica writes everywhere.
	Fence fence.Fence
	// Rotation, when set, says which CA Secrets an issuer's bundle holds
	// during a CA rotation (old and new, then the new only).
	Rotation interface {
		BundleSecrets(issuer, current string) []string
		Subscribe(fn func())
	}
	// Engage says whether a cluster gets bundles (false for namespace-scoped
	// registrations). Nil: every cluster.
	Engage func(name multicluster.ClusterName) bool
	// ClusterLabels are the labels of a cluster's Argo CD Secret, which an
	// issuer's ClustersAnnotation selects on. Nil: no labels.
	ClusterLabels func(name multicluster.ClusterName) map[string]string
	// SubscribeLabels, when set, registers a function the inventory calls
	// with a cluster whose labels changed (its bundles are recomputed).
	SubscribeLabels func(fn func(name multicluster.ClusterName))
}

func (o *Options) defaults() {
	if o.ConfigMapName == "" {
		o.ConfigMapName = DefaultConfigMapName
	}
	if o.Key == "" {
		o.Key = DefaultKey
	}
	if o.NamespaceSelector == nil {
		o.NamespaceSelector = labels.Everything()
	}
}

// Informers are the downstream objects the bundle controller watches in a
// cluster-wide registration (namespace-scoped ones get no bundle).
func Informers() []client.Object {
	return []client.Object{&corev1.Namespace{}, &corev1.ConfigMap{}}
}

// CacheOptions makes a downstream cluster cache only certhub's bundle ConfigMaps.
func CacheOptions() cluster.Option {
	return func(o *cluster.Options) {
		if o.Cache.ByObject == nil {
			o.Cache.ByObject = map[client.Object]cache.ByObject{}
		}
		o.Cache.ByObject[&corev1.ConfigMap{}] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set{hubapi.TrustBundleLabel: "true"})}
	}
}

// Bundles computes the trust bundle in the hub and keeps it in every
// engaged downstream cluster, once added to a manager.
type Bundles struct{ opts Options }

// New validates opts and applies their defaults.
func New(opts Options) (*Bundles, error) {
	opts.defaults()
	if opts.Namespace == "" {
		return nil, errors.New("trust: Namespace is required")
	}
	return &Bundles{opts: opts}, nil
}

// SetupWithManager computes the bundle in the hub (mgr's local manager) and
// keeps it in every engaged downstream cluster.
func (bs *Bundles) SetupWithManager(mgr mcmanager.Manager) error {
	opts := bs.opts
	log := mgr.GetLogger().WithName("trust")
	b := &bundle{}
	hub := &hubReconciler{c: mgr.GetLocalManager().GetClient(), namespace: opts.Namespace, bundle: b, log: log}
	if opts.Rotation != nil {
		hub.secrets = opts.Rotation.BundleSecrets
		hub.kicks = make(chan event.GenericEvent, 1)
		opts.Rotation.Subscribe(func() {
			select {
			case hub.kicks <- event.GenericEvent{Object: &corev1.ConfigMap{}}:
			default: // one pending recompute covers it
			}
		})
	}
	if err := hub.setup(mgr.GetLocalManager()); err != nil {
		return fmt.Errorf("failed to set up the trust bundle source: %w", err)
	}
	fan := &fanout{clusters: map[multicluster.ClusterName]context.Context{}}
	b.subscribe(fan.all)
	if opts.SubscribeLabels != nil {
		opts.SubscribeLabels(fan.add)
	}
	if err := mgr.Add(fan); err != nil {
		return err
	}
	r := &reconciler{getCluster: mgr.GetCluster, opts: opts, bundle: b}
	toCluster := mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](func(context.Context, client.Object) []mcreconcile.Request {
		return []mcreconcile.Request{{}} // the cluster is filled in by the handler
	})
	var engage []mcbuilder.WatchesOption
	if opts.Engage != nil {
		engage = append(engage, mcbuilder.WithClusterFilter(func(name multicluster.ClusterName, _ cluster.Cluster) bool { return opts.Engage(name) }))
	}
	return mcbuilder.ControllerManagedBy(mgr).
		Named("trust-bundles").
		Watches(&corev1.Namespace{}, toCluster, engage...).
		Watches(&corev1.ConfigMap{}, toCluster, engage...). // drift: an edited or deleted copy
		WatchesRawSource(fan.source()).                     // the bundle changed
		WithOptions(controller.TypedOptions[mcreconcile.Request]{MaxConcurrentReconciles: 2}).
		WithLogConstructor(func(req *mcreconcile.Request) logr.Logger {
			if req == nil {
				return log
			}
			return log.WithValues("cluster", req.ClusterName)
		}).
		Complete(fence.RetryPaused(opts.Fence, r)) // a late fence renewal: what ran meanwhile is tried again
}

// fanout queues every engaged cluster when the bundle changes.
type fanout struct {
	mu       sync.Mutex
	clusters map[multicluster.ClusterName]context.Context
	queue    workqueue.TypedRateLimitingInterface[mcreconcile.Request]
}

func (f *fanout) Engage(ctx context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	f.mu.Lock()
	f.clusters[name] = ctx
	f.mu.Unlock()
	f.add(name)
	return nil
}

func (f *fanout) Start(ctx context.Context) error { <-ctx.Done(); return nil }

func (f *fanout) source() source.TypedSource[mcreconcile.Request] {
	return source.TypedFunc[mcreconcile.Request](func(_ context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
		f.mu.Lock()
		f.queue = q
		f.mu.Unlock()
		f.all()
		return nil
	})
}

func (f *fanout) add(name multicluster.ClusterName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.queue != nil {
		f.queue.Add(mcreconcile.Request{ClusterName: name})
	}
}

func (f *fanout) all() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, ctx := range f.clusters {
		if ctx.Err() != nil {
			delete(f.clusters, name)
			continue
		}
		if f.queue != nil {
			f.queue.Add(mcreconcile.Request{ClusterName: name})
		}
	}
}

type reconciler struct {
	getCluster func(ctx context.Context, name multicluster.ClusterName) (cluster.Cluster, error)
	opts       Options
	bundle     *bundle
}

// Reconcile makes one cluster's bundle ConfigMaps exact.
func (r *reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	if r.opts.Engage != nil && !r.opts.Engage(req.ClusterName) {
		return reconcile.Result{}, nil
	}
	es, loaded := r.bundle.get()
	if !loaded {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the hub side has not computed it yet
	}
	cl, err := r.getCluster(ctx, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to get cluster %q: %w", req.ClusterName, err)
	}
	_, wctx, done, err := fence.WriteContext(ctx, r.opts.Fence, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, nil // the owner keeps it
	}
	defer done()
	c := cl.GetClient()
	namespaces := &corev1.NamespaceList{}
	if err := c.List(ctx, namespaces); err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to list namespaces: %w", err)
	}
	have := &corev1.ConfigMapList{}
	if err := c.List(ctx, have, client.MatchingLabels{hubapi.TrustBundleLabel: "true"}); err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to list trust bundle ConfigMaps: %w", err)
	}
	current := map[string]*corev1.ConfigMap{}
	for i := range have.Items {
		if cm := &have.Items[i]; cm.Name == r.opts.ConfigMapName {
			current[cm.Namespace] = cm
		}
	}
	var clusterLabels labels.Set
	if r.opts.ClusterLabels != nil {
		clusterLabels = r.opts.ClusterLabels(req.ClusterName)
	}
	var errs []error
	written := 0
	for i := range namespaces.Items {
		ns := &namespaces.Items[i]
		cm := current[ns.Name]
		pemBytes := es.pem(clusterLabels, ns.Name)
		want := map[string]string{r.opts.Key: string(pemBytes)}
		if crls := es.crls(clusterLabels, ns.Name); len(crls) > 0 {
			want[CRLKey] = string(crls) // the CRLs of the CAs in the bundle, beside it
		}
		wanted := len(pemBytes) > 0 && ns.Status.Phase != corev1.NamespaceTerminating && r.opts.NamespaceSelector.Matches(labels.Set(ns.Labels))
		switch {
		case wanted && cm == nil:
			n := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: r.opts.ConfigMapName, Labels: map[string]string{hubapi.TrustBundleLabel: "true"}}, Data: want}
			err := c.Create(wctx, n)
			if apierrors.IsAlreadyExists(err) {
				log.Info("a ConfigMap of the trust bundle's name exists and is not certhub's; left alone", "namespace", ns.Name, "configMap", r.opts.ConfigMapName)
				cl.GetEventRecorder("certhub").Eventf(ns, nil, corev1.EventTypeWarning, ReasonNotManaged, "TrustBundle",
					"ConfigMap %s/%s exists without label %s=true; certhub does not overwrite it", ns.Name, r.opts.ConfigMapName, hubapi.TrustBundleLabel)
				continue
			}
			errs = append(errs, err)
			written++
		case wanted && (!maps.Equal(cm.Data, want) || len(cm.BinaryData) > 0):
			cm = cm.DeepCopy()
			cm.Data, cm.BinaryData = want, nil
			err := c.Update(wctx, cm)
			if apierrors.IsConflict(err) {
				// The cache is behind (a cluster whose API server came back
				// may take a while to catch up): write onto the live object.
				err = updateLive(wctx, cl.GetAPIReader(), c, client.ObjectKeyFromObject(cm), want)
			}
			errs = append(errs, err)
			written++
		case !wanted && cm != nil:
			errs = append(errs, client.IgnoreNotFound(c.Delete(wctx, cm, client.Preconditions{UID: &cm.UID})))
			written++
		}
		delete(current, ns.Name)
	}
	if written > 0 {
		log.V(1).Info("trust bundles written", "writes", written, "namespaces", len(namespaces.Items))
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// updateLive writes data into the live ConfigMap key, if it is still a
// bundle certhub manages.
func updateLive(ctx context.Context, live client.Reader, c client.Client, key client.ObjectKey, data map[string]string) error {
	cm := &corev1.ConfigMap{}
	if err := live.Get(ctx, key, cm); err != nil {
		return client.IgnoreNotFound(err)
	}
	if cm.Labels[hubapi.TrustBundleLabel] != "true" {
		return nil
	}
	cm.Data, cm.BinaryData = data, nil
	return c.Update(ctx, cm)
}
