package discovery

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/fence"
)

// Defaults of Options.
const (
	DefaultReadQPS          = 5
	DefaultReadBurst        = 20
	DefaultReaders          = 2
	DefaultReportInterval   = 30 * time.Second
	DefaultMaxReportEntries = 1000
	DefaultMaxSeries        = 10000
)

// Options configure discovery.
type Options struct {
	// Namespace is the hub namespace of the reports. Required.
	Namespace string
	// Hub writes the reports. Required.
	Hub client.Client
	// Fence says which clusters this replica reports on (Owns); the
	// others' owners do. Nil: every engaged cluster.
	Fence fence.Fence
	// Namespaces returns the namespaces a namespace-scoped registration
	// may read (nil: the whole cluster). Nil: every cluster is cluster-wide.
	Namespaces func(name multicluster.ClusterName) []string
	// MayRead says whether discovery may read Secrets' data in a cluster:
	// false where keys must never reach the hub (certhub.io/mode external).
	// Nil: everywhere.
	MayRead func(name multicluster.ClusterName) bool
	// ReadQPS and ReadBurst bound the Secret reads in each cluster; they
	// have their own client-side limiter, apart from the issuing clients'.
	// Default DefaultReadQPS, DefaultReadBurst.
	ReadQPS   float32
	ReadBurst int
	// Readers is the number of concurrent reads per cluster. Default DefaultReaders.
	Readers int
	// ReportInterval is how often a changed report is written. Default DefaultReportInterval.
	ReportInterval time.Duration
	// MaxReportEntries caps a cluster's report (the soonest to expire are
	// kept; Truncated counts the rest). Default DefaultMaxReportEntries.
	MaxReportEntries int
	// MaxSeries caps the series of MetricExpiration over every cluster
	// this replica serves (the soonest to expire are kept). Default DefaultMaxSeries.
	MaxSeries int
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// Log is the logger. Default: discard.
	Log logr.Logger

	clock clock.WithTicker
}

func (o *Options) defaults() {
	if o.ReadQPS <= 0 {
		o.ReadQPS = DefaultReadQPS
	}
	if o.ReadBurst <= 0 {
		o.ReadBurst = DefaultReadBurst
	}
	if o.Readers <= 0 {
		o.Readers = DefaultReaders
	}
	if o.ReportInterval <= 0 {
		o.ReportInterval = DefaultReportInterval
	}
	if o.MaxReportEntries <= 0 {
		o.MaxReportEntries = DefaultMaxReportEntries
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
}

// Discoverer finds the TLS certificates of every engaged cluster. Add it
// to the multicluster manager (a Runnable that is multicluster.Aware).
type Discoverer struct {
	opts    Options
	metrics *metrics

	mu       sync.Mutex
	clusters map[multicluster.ClusterName]*clusterState
}

var _ multicluster.Aware = &Discoverer{}

// New returns a Discoverer with its metrics registered.
func New(opts Options) (*Discoverer, error) {
	opts.defaults()
	if opts.Namespace == "" || opts.Hub == nil || opts.Registerer == nil {
		return nil, errors.New("discovery: Namespace, Hub and Registerer are required")
	}
	d := &Discoverer{opts: opts, clusters: map[multicluster.ClusterName]*clusterState{}}
	var err error
	if d.metrics, err = newMetrics(opts.Registerer, d); err != nil {
		return nil, err
	}
	return d, nil
}

// Start blocks until ctx ends; each cluster's discovery runs from Engage
// until the cluster's context ends.
func (d *Discoverer) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// clusterState is what discovery knows of one engaged cluster.
type clusterState struct {
	mu sync.Mutex
	// records by Secret.
	records map[types.NamespacedName]Record
	// refs are the Secrets each Ingress names in spec.tls.
	refs map[types.NamespacedName][]types.NamespacedName
	// typed are the kubernetes.io/tls Secrets the metadata watch holds,
	// with their resourceVersion.
	typed map[types.NamespacedName]string
	// listed: the first full read (paged LISTs) is done; until then the
	// metadata watch only records versions, and nothing is queued.
	listed bool
	synced bool
	// reported is the digest of the last report written.
	reported [sha256.Size]byte
}

// served reports whether an Ingress names key; st.mu held.
func (st *clusterState) servedLocked(key types.NamespacedName) bool {
	for _, secrets := range st.refs {
		for _, s := range secrets {
			if s == key {
				return true
			}
		}
	}
	return false
}

// snapshot returns the cluster's records at now.
func (st *clusterState) snapshot(now time.Time) ([]Record, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]Record, 0, len(st.records))
	for _, r := range st.records {
		out = append(out, r.at(now))
	}
	return out, st.synced
}

// Engage starts discovery in cl until ctx ends; it does not block.
func (d *Discoverer) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	st := &clusterState{records: map[types.NamespacedName]Record{}, refs: map[types.NamespacedName][]types.NamespacedName{},
		typed: map[types.NamespacedName]string{}}
	d.mu.Lock()
	d.clusters[name] = st
	d.mu.Unlock()
	context.AfterFunc(ctx, func() {
		d.mu.Lock()
		if d.clusters[name] == st {
			delete(d.clusters, name)
		}
		d.mu.Unlock()
	})
	go d.run(ctx, name, cl, st)
	return nil
}

// states returns the engaged clusters' states.
func (d *Discoverer) states() map[multicluster.ClusterName]*clusterState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.clusters)
}

// run watches cl until ctx ends.
func (d *Discoverer) run(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, st *clusterState) {
	log := d.opts.Log.WithValues("cluster", name)
	if d.opts.MayRead != nil && !d.opts.MayRead(name) {
		log.V(1).Info("Discovery skips the cluster: its Secrets' data must not reach the hub")
		return
	}
	w, err := d.newWatch(ctx, name, cl, st, log)
	if err != nil {
		log.Error(err, "Discovery could not start in the cluster")
		return
	}
	w.run(ctx)
}

// watch is discovery in one cluster: a metadata-only watch of the
// kubernetes.io/tls Secrets (in a cache of its own: the cluster's cache
// holds certhub's Secrets only) and the cluster's Ingresses and Gateways,
// feeding a queue of Secrets to read.
type watch struct {
	d      *Discoverer
	name   multicluster.ClusterName
	st     *clusterState
	log    logr.Logger
	cache  cache.Cache
	reader client.Reader
	queue  workqueue.TypedInterface[types.NamespacedName]
}

// newWatch builds the cluster's watch: its own metadata cache and a
// reader with its own rate limiter.
func (d *Discoverer) newWatch(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, st *clusterState, log logr.Logger) (*watch, error) {
	var namespaces map[string]cache.Config
	if d.opts.Namespaces != nil {
		for _, ns := range d.opts.Namespaces(name) {
			if namespaces == nil {
				namespaces = map[string]cache.Config{}
			}
			namespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(cl.GetConfig(), cache.Options{HTTPClient: cl.GetHTTPClient(), Scheme: cl.GetScheme(), Mapper: cl.GetRESTMapper(),
		DefaultNamespaces: namespaces, DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS))},
		}})
	if err != nil {
		return nil, fmt.Errorf("failed to create the discovery cache: %w", err)
	}
	cfg := rest.CopyConfig(cl.GetConfig())
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(d.opts.ReadQPS, d.opts.ReadBurst)
	reader, err := client.New(cfg, client.Options{HTTPClient: cl.GetHTTPClient(), Scheme: cl.GetScheme(), Mapper: cl.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("failed to create the discovery reader: %w", err)
	}
	w := &watch{d: d, name: name, st: st, log: log, cache: c, reader: reader,
		queue: newQueue()}
	secrets := &metav1.PartialObjectMetadata{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	inf, err := c.GetInformer(ctx, secrets)
	if err != nil {
		return nil, fmt.Errorf("failed to watch Secret metadata: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.secretChanged,
		UpdateFunc: func(_, obj any) { w.secretChanged(obj) },
		DeleteFunc: w.secretDeleted,
	}); err != nil {
		return nil, fmt.Errorf("failed to watch Secret metadata: %w", err)
	}
	// The cluster's own cache: the Ingress shim watches Ingresses already.
	ing, err := cl.GetCache().GetInformer(ctx, &networkingv1.Ingress{})
	if err != nil {
		return nil, fmt.Errorf("failed to watch Ingresses: %w", err)
	}
	if _, err := ing.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.ingressChanged,
		UpdateFunc: func(_, obj any) { w.ingressChanged(obj) },
		DeleteFunc: w.ingressDeleted,
	}); err != nil {
		return nil, fmt.Errorf("failed to watch Ingresses: %w", err)
	}
	if _, err := cl.GetRESTMapper().RESTMapping(gatewayGK, gwapi.GroupVersion.Version); err == nil {
		gw, err := cl.GetCache().GetInformer(ctx, &gwapi.Gateway{})
		if err != nil {
			return nil, fmt.Errorf("failed to watch Gateways: %w", err)
		}
		if _, err := gw.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    w.gatewayChanged,
			UpdateFunc: func(_, obj any) { w.gatewayChanged(obj) },
			DeleteFunc: w.gatewayDeleted,
		}); err != nil {
			return nil, fmt.Errorf("failed to watch Gateways: %w", err)
		}
	}
	return w, nil
}

// gatewayGK is Gateway API's Gateway; a cluster that serves it when it is
// engaged has its Gateways' listener certificates discovered too.
var gatewayGK = schema.GroupKind{Group: gwapi.GroupName, Kind: "Gateway"}

// newQueue is a cluster's queue of Secrets to read.
func newQueue() workqueue.TypedInterface[types.NamespacedName] {
	// Unnamed: a named queue exports metrics per name, one set per cluster.
	return workqueue.NewTyped[types.NamespacedName]()
}

// run starts the cache, the readers and the report loop; it returns when
// ctx ends.
func (w *watch) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := w.cache.Start(ctx); err != nil {
			w.log.Error(err, "Discovery cache stopped")
		}
	})
	context.AfterFunc(ctx, w.queue.ShutDown)
	for range w.d.opts.Readers {
		wg.Go(func() {
			for w.readNext(ctx) {
			}
		})
	}
	if !w.cache.WaitForCacheSync(ctx) {
		return
	}
	if err := w.listAll(ctx); err != nil {
		if ctx.Err() != nil {
			return
		}
		w.log.Error(err, "Failed to list the TLS Secrets for discovery; reading them one by one")
	}
	var stale []types.NamespacedName
	w.st.mu.Lock()
	w.st.listed, w.st.synced = true, true
	for key, rv := range w.st.typed {
		if w.st.records[key].resourceVersion != rv {
			stale = append(stale, key) // changed since its page, or missed
		}
	}
	for key := range w.st.records {
		if _, typed := w.st.typed[key]; !typed && !w.st.servedLocked(key) {
			delete(w.st.records, key) // deleted while the pages were read
		}
	}
	w.st.mu.Unlock()
	for _, key := range stale {
		w.queue.Add(key)
	}
	w.log.V(1).Info("Discovery watch synced")
	t := w.d.opts.clock.NewTicker(w.d.opts.ReportInterval)
	defer t.Stop()
	for {
		if err := w.d.report(ctx, w.name, w.st); err != nil && ctx.Err() == nil {
			w.log.Error(err, "Failed to write the discovery report")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// secretChanged queues a kubernetes.io/tls Secret whose version is not the
// one its record was read at.
func (w *watch) secretChanged(obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Name}
	w.st.mu.Lock()
	w.st.typed[key] = m.ResourceVersion
	stale := w.st.listed && w.st.records[key].resourceVersion != m.ResourceVersion
	w.st.mu.Unlock()
	if stale {
		w.queue.Add(key)
	}
}

// secretDeleted forgets a kubernetes.io/tls Secret (one an Ingress names
// is read again: it may have been replaced by another type).
func (w *watch) secretDeleted(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Name}
	w.st.mu.Lock()
	delete(w.st.typed, key)
	delete(w.st.records, key)
	served := w.st.servedLocked(key)
	w.st.mu.Unlock()
	if served {
		w.queue.Add(key)
	}
}

// ingressChanged records which Secrets an Ingress serves, and queues those
// not known yet (a Secret of another type may hold a certificate too).
func (w *watch) ingressChanged(obj any) {
	ing, ok := obj.(*networkingv1.Ingress)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name}
	var secrets []types.NamespacedName
	for _, t := range ing.Spec.TLS {
		if t.SecretName != "" {
			secrets = append(secrets, types.NamespacedName{Namespace: ing.Namespace, Name: t.SecretName})
		}
	}
	w.setRefs(key, secrets)
}

// gatewayChanged records the Secrets a Gateway's listeners serve
// (tls.certificateRefs of kind Secret, in the Gateway's namespace unless
// the ref names another).
func (w *watch) gatewayChanged(obj any) {
	gw, ok := obj.(*gwapi.Gateway)
	if !ok {
		return
	}
	var secrets []types.NamespacedName
	for _, l := range gw.Spec.Listeners {
		if l.TLS == nil {
			continue
		}
		for _, ref := range l.TLS.CertificateRefs {
			if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != "Secret") {
				continue
			}
			ns := gw.Namespace
			if ref.Namespace != nil && *ref.Namespace != "" {
				ns = string(*ref.Namespace)
			}
			secrets = append(secrets, types.NamespacedName{Namespace: ns, Name: string(ref.Name)})
		}
	}
	w.setRefs(gatewayRef(gw), secrets)
}

func (w *watch) gatewayDeleted(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if gw, ok := obj.(*gwapi.Gateway); ok {
		w.setRefs(gatewayRef(gw), nil)
	}
}

// gatewayRef is a Gateway's key among the referrers (apart from an
// Ingress of the same name).
func gatewayRef(gw *gwapi.Gateway) types.NamespacedName {
	return types.NamespacedName{Namespace: gw.Namespace, Name: "gateway/" + gw.Name}
}

func (w *watch) ingressDeleted(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if ing, ok := obj.(*networkingv1.Ingress); ok {
		w.setRefs(types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name}, nil)
	}
}

// setRefs replaces an Ingress's Secrets and updates Served on the records
// they touch; records of Secrets of another type that no Ingress names any
// more are dropped.
func (w *watch) setRefs(ingress types.NamespacedName, secrets []types.NamespacedName) {
	var read []types.NamespacedName
	w.st.mu.Lock()
	touched := append(append([]types.NamespacedName{}, w.st.refs[ingress]...), secrets...)
	if len(secrets) == 0 {
		delete(w.st.refs, ingress)
	} else {
		w.st.refs[ingress] = secrets
	}
	for _, key := range touched {
		served := w.st.servedLocked(key)
		r, known := w.st.records[key]
		_, typed := w.st.typed[key]
		switch {
		case known && !served && !typed:
			delete(w.st.records, key)
		case known:
			r.Served = served
			w.st.records[key] = r
		case served && !typed:
			read = append(read, key)
		}
	}
	w.st.mu.Unlock()
	for _, key := range read {
		w.queue.Add(key)
	}
}

// listPage is the page size of the first full read.
const listPage = 100

// listAll reads every kubernetes.io/tls Secret once, a page at a time
// through the reader's limiter (one request per listPage Secrets, where
// reading them one by one would take one each), keeping a record of each
// and dropping its data before the next page.
func (w *watch) listAll(ctx context.Context) error {
	namespaces := []string{""}
	if w.d.opts.Namespaces != nil {
		if ns := w.d.opts.Namespaces(w.name); len(ns) > 0 {
			namespaces = ns
		}
	}
	for _, ns := range namespaces {
		cont := ""
		for {
			page := &corev1.SecretList{}
			if err := w.reader.List(ctx, page, client.InNamespace(ns), client.Limit(listPage), client.Continue(cont),
				client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS))}); err != nil {
				w.d.metrics.reads.WithLabelValues(string(w.name), "Error").Inc()
				return fmt.Errorf("failed to list TLS Secrets: %w", err)
			}
			w.d.metrics.reads.WithLabelValues(string(w.name), "Listed").Add(float64(len(page.Items)))
			w.st.mu.Lock()
			for i := range page.Items {
				s := &page.Items[i]
				key := client.ObjectKeyFromObject(s)
				r := inspect(s)
				r.Served = w.st.servedLocked(key)
				w.st.records[key] = r
			}
			w.st.mu.Unlock()
			if cont = page.Continue; cont == "" {
				break
			}
		}
	}
	return nil
}

// readNext reads one queued Secret; false when the queue is shut down.
func (w *watch) readNext(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	s := &corev1.Secret{}
	err := w.reader.Get(ctx, key, s)
	switch {
	case apierrors.IsNotFound(err):
		w.d.metrics.reads.WithLabelValues(string(w.name), "NotFound").Inc()
		w.st.mu.Lock()
		delete(w.st.records, key)
		w.st.mu.Unlock()
		return true
	case err != nil:
		w.d.metrics.reads.WithLabelValues(string(w.name), "Error").Inc()
		if ctx.Err() == nil {
			w.log.Error(err, "Failed to read a Secret for discovery", "secret", key)
		}
		return true
	}
	w.d.metrics.reads.WithLabelValues(string(w.name), "Read").Inc()
	r := inspect(s)
	s.Data = nil // the key is not kept
	w.st.mu.Lock()
	defer w.st.mu.Unlock()
	r.Served = w.st.servedLocked(key)
	if s.Type != corev1.SecretTypeTLS && !r.Served {
		delete(w.st.records, key)
		return true
	}
	w.st.records[key] = r
	return true
}
