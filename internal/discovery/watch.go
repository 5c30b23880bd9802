package discovery

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8swatch "k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// watch is discovery in one cluster: a metadata-only watch of the
// kubernetes.io/tls Secrets, kept in no cache (a reflector per namespace
// feeds secretStore, which keeps a resourceVersion per Secret in the
// cluster's state), and the cluster's Ingresses and Gateways, feeding a
// queue of Secrets to read.
//
// It shares the cluster's HTTP client and builds no cache, informer or
// controller-runtime client of its own: per cluster, that second set was
// 15–21 % of a replica's live heap at 204 and 2,036 owned clusters
// (docs/benchmarks.md, "the fleet at scale").
type watch struct {
	d    *Discoverer
	name multicluster.ClusterName
	st   *clusterState
	log  logr.Logger
	// namespaces are watched and listed; [""] is the whole cluster.
	namespaces []string
	meta       metadata.Interface
	// secrets reads Secrets through discovery's own limiter.
	secrets corev1client.SecretsGetter
	queue   workqueue.TypedInterface[types.NamespacedName]
}

// secretsGVR is what the metadata watch lists and watches.
var secretsGVR = corev1.SchemeGroupVersion.WithResource("secrets")

// tlsSecrets selects the kubernetes.io/tls Secrets.
var tlsSecrets = fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS)).String()

// newWatch builds the cluster's watch: metadata and Secret clients on the
// cluster's HTTP client (reads with their own rate limiter), and handlers
// on the cluster's Ingress and Gateway informers.
func (d *Discoverer) newWatch(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, st *clusterState, log logr.Logger) (*watch, error) {
	namespaces := []string{metav1.NamespaceAll}
	if d.opts.Namespaces != nil {
		if ns := d.opts.Namespaces(name); len(ns) > 0 {
			namespaces = ns
		}
	}
	meta, err := metadata.NewForConfigAndClient(rest.CopyConfig(cl.GetConfig()), cl.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("failed to create the discovery metadata client: %w", err)
	}
	cfg := rest.CopyConfig(cl.GetConfig())
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(d.opts.ReadQPS, d.opts.ReadBurst)
	secrets, err := corev1client.NewForConfigAndClient(cfg, cl.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("failed to create the discovery reader: %w", err)
	}
	w := &watch{d: d, name: name, st: st, log: log, namespaces: namespaces, meta: meta, secrets: secrets, queue: newQueue()}
	// The cluster's own cache: the Ingress shim watches Ingresses already.
	ing, err := cl.GetCache().GetInformer(ctx, &networkingv1.Ingress{})
	if err != nil {
		return nil, fmt.Errorf("failed to watch Ingresses: %w", err)
	}
	if err := handleUntil(ctx, ing, toolscache.ResourceEventHandlerFuncs{
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
		if err := handleUntil(ctx, gw, toolscache.ResourceEventHandlerFuncs{
			AddFunc:    w.gatewayChanged,
			UpdateFunc: func(_, obj any) { w.gatewayChanged(obj) },
			DeleteFunc: w.gatewayDeleted,
		}); err != nil {
			return nil, fmt.Errorf("failed to watch Gateways: %w", err)
		}
	}
	return w, nil
}

// handleUntil adds h to the cluster's informer inf until ctx (the
// engagement) ends. The cluster's cache outlives its engagements — a fence
// lost and taken again engages its clusters anew — and a handler left behind kept
// its listener (a 1,024-event ring and two goroutines) and the old watch's
// records: in a 1,000-cluster run with 10,757 engagements, a replica held
// 3,202 listeners where 1,224 were live.
func handleUntil(ctx context.Context, inf cache.Informer, h toolscache.ResourceEventHandler) error {
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { _ = inf.RemoveEventHandler(reg) })
	return nil
}

// secretStore receives one namespace's metadata watch (it is the
// reflector's store): it keeps nothing but the versions in the cluster's
// state, and says when the first list has arrived.
type secretStore struct {
	w      *watch
	ns     string // metav1.NamespaceAll: every namespace
	once   sync.Once
	synced chan struct{}
}

var _ toolscache.ReflectorStore = &secretStore{}

func (s *secretStore) Add(obj any) error    { s.w.secretChanged(obj); return nil }
func (s *secretStore) Update(obj any) error { s.w.secretChanged(obj); return nil }
func (s *secretStore) Delete(obj any) error { s.w.secretDeleted(obj); return nil }
func (s *secretStore) Resync() error        { return nil }

// Replace is a full list (the first, or after the watch expired): every
// listed Secret is recorded, and those of the namespace it no longer holds
// are forgotten as deleted.
func (s *secretStore) Replace(list []any, _ string) error {
	listed := make(map[types.NamespacedName]struct{}, len(list))
	for _, obj := range list {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			listed[types.NamespacedName{Namespace: m.Namespace, Name: m.Name}] = struct{}{}
			s.w.secretChanged(m)
		}
	}
	var gone []types.NamespacedName
	s.w.st.mu.Lock()
	for key := range s.w.st.typed {
		if _, ok := listed[key]; !ok && (s.ns == metav1.NamespaceAll || key.Namespace == s.ns) {
			gone = append(gone, key)
		}
	}
	s.w.st.mu.Unlock()
	for _, key := range gone {
		s.w.forget(key)
	}
	s.once.Do(func() { close(s.synced) })
	return nil
}

// watchSecrets runs the namespace's metadata watch until ctx ends.
func (w *watch) watchSecrets(ctx context.Context, s *secretStore) {
	secrets := w.meta.Resource(secretsGVR).Namespace(s.ns)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = tlsSecrets
			return secrets.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (k8swatch.Interface, error) {
			o.FieldSelector = tlsSecrets
			return secrets.Watch(ctx, o)
		},
	}
	log := w.log.WithValues("namespace", s.ns)
	toolscache.NewReflectorWithOptions(lw, &metav1.PartialObjectMetadata{}, s, toolscache.ReflectorOptions{
		Name: "discovery/" + string(w.name) + "/" + s.ns, Logger: &log,
	}).RunWithContext(ctx)
}

// gatewayGK is Gateway API's Gateway; a cluster that serves it when it is
// engaged has its Gateways' listener certificates discovered too.
var gatewayGK = schema.GroupKind{Group: gwapi.GroupName, Kind: "Gateway"}

// newQueue is a cluster's queue of Secrets to read.
func newQueue() workqueue.TypedInterface[types.NamespacedName] {
	// Unnamed: a named queue exports metrics per name, one set per cluster.
	return workqueue.NewTyped[types.NamespacedName]()
}

// run starts the metadata watches, the readers and the report loop; it
// returns when ctx ends.
func (w *watch) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	context.AfterFunc(ctx, w.queue.ShutDown)
	stores := make([]*secretStore, len(w.namespaces))
	for i, ns := range w.namespaces {
		stores[i] = &secretStore{w: w, ns: ns, synced: make(chan struct{})}
		wg.Go(func() { w.watchSecrets(ctx, stores[i]) })
	}
	for range w.d.opts.Readers {
		wg.Go(func() {
			for w.readNext(ctx) {
			}
		})
	}
	for _, s := range stores {
		select {
		case <-ctx.Done():
			return
		case <-s.synced:
		}
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
	w.forget(types.NamespacedName{Namespace: m.Namespace, Name: m.Name})
}

// forget drops a deleted kubernetes.io/tls Secret's version and record;
// one an Ingress or Gateway names is read again.
func (w *watch) forget(key types.NamespacedName) {
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

// errKeysStayDownstream: MayRead said no while the pages were read.
var errKeysStayDownstream = errors.New("the cluster's mode keeps Secrets' data downstream")

// listPage is the page size of the first full read.
const listPage = 100

// listAll reads every kubernetes.io/tls Secret once, a page at a time
// through the reader's limiter (one request per listPage Secrets, where
// reading them one by one would take one each), keeping a record of each
// and dropping its data before the next page.
func (w *watch) listAll(ctx context.Context) error {
	for _, ns := range w.namespaces {
		cont := ""
		for {
			if !w.d.mayRead(w.name) {
				return fmt.Errorf("cluster %s: %w", w.name, errKeysStayDownstream)
			}
			page, err := w.secrets.Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: tlsSecrets, Limit: listPage, Continue: cont})
			if err != nil {
				w.d.metrics.reads.WithLabelValues("Error").Inc()
				return fmt.Errorf("failed to list TLS Secrets: %w", err)
			}
			w.d.metrics.reads.WithLabelValues("Listed").Add(float64(len(page.Items)))
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

// written is key's Secret at the version the watch last showed, when the
// hub's Secret store holds it (certhub wrote it): no read. nil otherwise.
func (w *watch) written(key client.ObjectKey) *corev1.Secret {
	if w.d.opts.Written == nil {
		return nil
	}
	rv := w.st.typedVersion(key)
	if rv == "" {
		return nil
	}
	return w.d.opts.Written(w.name, key, rv)
}

// readNext reads one queued Secret; false when the queue is shut down.
func (w *watch) readNext(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	if !w.d.mayRead(w.name) {
		return true // the mode changed: the watch is being stopped
	}
	s, readResult := w.written(key), "Written"
	var err error
	if s == nil {
		readResult = "Read"
		s, err = w.secrets.Secrets(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		w.d.metrics.reads.WithLabelValues("NotFound").Inc()
		w.st.mu.Lock()
		delete(w.st.records, key)
		w.st.mu.Unlock()
		return true
	case err != nil:
		w.d.metrics.reads.WithLabelValues("Error").Inc()
		if ctx.Err() == nil {
			w.log.Error(err, "Failed to read a Secret for discovery", "secret", key)
		}
		return true
	}
	w.d.metrics.reads.WithLabelValues(readResult).Inc()
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
