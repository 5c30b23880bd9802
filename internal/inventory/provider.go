package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// Defaults for Options.
const (
	// DefaultNamespace is where Argo CD keeps cluster Secrets.
	DefaultNamespace = "argocd"
	// DefaultConnectTimeout bounds the first contact with a new cluster.
	DefaultConnectTimeout = 15 * time.Second
	// DefaultRequestTimeout bounds every downstream request but watches,
	// response body included.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultMaxReconnectDelay caps the back-off between attempts to connect
	// a cluster that is unreachable, so it is served again within this long
	// of coming back (controller-runtime's default cap is 1000s).
	DefaultMaxReconnectDelay = 30 * time.Second
	// DefaultMaxConcurrentReconciles is how many cluster Secrets are handled
	// (and clusters connected) at once, so one unreachable cluster does not
	// hold up the others, and a replica taking over a dead one's share of a
	// large fleet connects it in parallel.
	DefaultMaxConcurrentReconciles = 16
	// DefaultQPS and DefaultBurst limit each downstream client, as Argo CD's
	// ARGOCD_K8S_CLIENT_QPS defaults do (client-go's own 5/10 would throttle
	// every issuance to ~200 ms).
	DefaultQPS   = 50
	DefaultBurst = 100
)

// Options configure the Provider.
type Options struct {
	// Namespace holds the Argo CD cluster Secrets. Defaults to DefaultNamespace.
	Namespace string
	// Selector, when set, narrows the cluster Secrets served to those whose
	// labels match it, on top of the Argo CD label (e.g. certhub.io/enabled=true),
	// so platform teams opt clusters in through Git. A Secret that stops
	// matching is disengaged. Defaults to everything.
	Selector labels.Selector
	// Scheme is used for every downstream cluster's client and cache. Required.
	Scheme *runtime.Scheme
	// ClusterOptions are applied to every downstream cluster (e.g. cache selectors). Optional.
	ClusterOptions []cluster.Option
	// ConnectTimeout bounds the first request to a new cluster. Defaults to DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// RequestTimeout bounds every downstream request but watches, response
	// body included, so a hung or slow API server cannot hold a worker.
	// Defaults to DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxReconnectDelay caps the retry back-off of unreachable clusters. Defaults to DefaultMaxReconnectDelay.
	MaxReconnectDelay time.Duration
	// MaxConcurrentReconciles defaults to DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// QPS and Burst limit each downstream client. Default to DefaultQPS and DefaultBurst.
	QPS   float32
	Burst int
	// Compression asks downstream API servers for gzip-compressed responses.
	// Defaults to false: kube-apiserver compresses watch streams, and each
	// open watch then holds a gzip reader (~40 KiB) for its lifetime, a
	// tenth of a connected cluster's memory; the hub's watches (Certificates,
	// Secrets, Ingresses) carry small objects. Turn it on for clusters behind
	// thin links.
	Compression bool
	// Registerer receives the certhub_cluster_* metrics. Defaults to controller-runtime's registry.
	Registerer prometheus.Registerer
	// KubeconfigDir, when set, is the inventory instead of cluster Secrets:
	// one cluster per kubeconfig file, named after the file. Defaults to "" (Secrets).
	KubeconfigDir string
	// DirResync is how often KubeconfigDir is rescanned. Defaults to DefaultDirResync.
	DirResync time.Duration
	// ExecPlugins are the exec credential plugin commands the hub may run
	// (matched on the resolved path). Nil defaults to DefaultExecPlugins;
	// an empty, non-nil list allows none.
	ExecPlugins []string
	// ExecShim, when set, is the certhub binary: exec plugins run through
	// its exec-credential command, with a minimal environment and killed
	// after RequestTimeout (execshim.go). Defaults to "" (client-go runs
	// them directly, with the hub's environment and no deadline).
	ExecShim string
	// AllowPlainHTTP allows registrations whose server is http:// (credentials
	// in clear). Defaults to false: refused, naming the field.
	AllowPlainHTTP bool
	// AllowLinkLocal allows connections to link-local and cloud metadata
	// addresses (169.254.0.0/16, fe80::/10, fd00:ec2::254), checked on the
	// address dialled. Defaults to false (netguard.go).
	AllowLinkLocal bool
	// OnLabelsChanged, when set, is called after a served cluster's Secret
	// labels change (issuance policies select clusters by them). It must
	// not block.
	OnLabelsChanged func(name multicluster.ClusterName)
	// Connect, when set, decides which registered clusters this replica
	// connects to (shard.Coordinator: the clusters it owns or keeps warm).
	// Every valid registration is registered with it; only those it wants
	// are connected, cached and watched, the others are validated and
	// reported, nothing more. Defaults to nil: every cluster is connected.
	Connect Connector
	// Informers, when set, lists the objects whose informers start in a
	// cluster's cache as soon as it is connected (before it is engaged), so
	// a standby's cache is in sync when it takes over: the objects the
	// controllers watch, the same Go types. scoped is true for a
	// namespace-scoped registration. Defaults to none (informers start when
	// the controllers engage).
	Informers func(scoped bool) []client.Object
}

// Connector decides which registered clusters this replica connects to.
// *shard.Coordinator implements it.
type Connector interface {
	// Register and Unregister keep the connector's set of valid registrations,
	// connected or not.
	Register(name multicluster.ClusterName)
	Unregister(name multicluster.ClusterName)
	// Wanted reports whether this replica should be connected to name now.
	Wanted(name multicluster.ClusterName) bool
	// OnWantedChanged registers a func called, without blocking, with each
	// cluster whose Wanted answer changed.
	OnWantedChanged(fn func(multicluster.ClusterName))
	// RegistrationsSynced is called once every cluster Secret (or kubeconfig
	// file) present at the start has been handled: registered, or found
	// invalid. It may be called more than once.
	RegistrationsSynced()
}

func (o *Options) defaults() {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.MaxReconnectDelay == 0 {
		o.MaxReconnectDelay = DefaultMaxReconnectDelay
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.ExecPlugins == nil {
		o.ExecPlugins = DefaultExecPlugins
	}
	if o.MaxConcurrentReconciles == 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if o.QPS == 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	if o.DirResync == 0 {
		o.DirResync = DefaultDirResync
	}
}

// Validate reports whether the options are usable.
func (o Options) Validate() error {
	if o.Scheme == nil {
		return errors.New("inventory: Scheme is required")
	}
	if o.ConnectTimeout < 0 || o.MaxConcurrentReconciles < 0 {
		return errors.New("inventory: ConnectTimeout and MaxConcurrentReconciles must not be negative")
	}
	return nil
}

var (
	_ multicluster.Provider         = &Provider{}
	_ multicluster.ProviderRunnable = &Provider{}
)

// Provider engages one downstream cluster per Argo CD cluster Secret.
type Provider struct {
	opts Options

	hub client.Reader
	// inCluster resolves Argo CD's in-cluster server: the hub's own cluster.
	inCluster func() (*rest.Config, error)
	recorder  recorder.EventRecorder
	metrics   *inventoryMetrics
	log       logr.Logger // base logger; per-cluster loggers add only `cluster`

	started chan struct{} // closed by Start once ctx and aware are set
	ctx     context.Context
	aware   multicluster.Aware
	wakeups chan event.GenericEvent // cluster Secrets to reconcile again: the gate changed its mind
	wakeDir chan struct{}           // the same for the kubeconfig directory

	mu       sync.Mutex // guards the maps below; never held across an API call
	clusters map[multicluster.ClusterName]*engaged
	bySource map[string]multicluster.ClusterName // by source key: "<ns>/<secret>" or "file:<path>"
	indexers []index
	// handled are the sources reconciled at least once, until the first
	// pass is done (initial.go); nil then, and without a gate.
	handled   map[string]bool
	handledCh chan struct{} // a reconcile ran: initialSync looks again

	// connect reaches a cluster and starts its cache (test seam; defaults to
	// Provider.dial). It must stop the cluster when ctx ends.
	connect func(ctx context.Context, log logr.Logger, c *Cluster) (cluster.Cluster, error)
}

type index struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// New returns a Provider. Call SetupWithManager before starting the manager.
func New(opts Options) (*Provider, error) {
	opts.defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newInventoryMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		opts:     opts,
		metrics:  m,
		started:  make(chan struct{}),
		clusters: map[multicluster.ClusterName]*engaged{},
		bySource: map[string]multicluster.ClusterName{},
		log:      logr.Discard(),
		wakeups:  make(chan event.GenericEvent, 1024),
		wakeDir:  make(chan struct{}, 1),
		// Buffered so reconciles never wait for initialSync.
		handledCh: make(chan struct{}, 1),
	}
	p.connect = p.dial
	if opts.Connect != nil {
		opts.Connect.OnWantedChanged(p.wake)
		p.handled = map[string]bool{}
	}
	return p, nil
}

// SetupWithManager registers the cluster Secret controller on mgr's local
// (hub) manager; with Options.KubeconfigDir, Start scans the directory instead.
func (p *Provider) SetupWithManager(mgr mcmanager.Manager) error {
	local := mgr.GetLocalManager()
	p.hub = local.GetClient()
	// Argo CD's in-cluster server is the cluster Argo CD runs in: the one
	// whose Secrets the hub reads, whether the hub runs in it (its
	// ServiceAccount) or outside it (--kubeconfig).
	hubConfig := local.GetConfig()
	p.inCluster = func() (*rest.Config, error) { return hubConfig, nil }
	p.recorder = local.GetEventRecorder("certhub-inventory")
	p.log = local.GetLogger().WithName("inventory")
	if p.opts.KubeconfigDir != "" {
		return nil
	}
	if p.opts.Connect != nil {
		if err := local.Add(initialSync{p}); err != nil {
			return fmt.Errorf("failed to add the first registration pass: %w", err)
		}
	}
	isClusterSecret := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == p.opts.Namespace && p.serves(o.GetLabels())
	})
	// A Secret that loses the label must be disengaged like a deleted one, so
	// updates pass when either side matches.
	labelChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return isClusterSecret.Generic(event.GenericEvent{Object: e.ObjectOld}) ||
			isClusterSecret.Generic(event.GenericEvent{Object: e.ObjectNew})
	}}
	return ctrl.NewControllerManagedBy(local).
		Named("inventory").
		For(&corev1.Secret{}, builder.WithPredicates(predicate.Or(isClusterSecret, labelChanged))).
		WithOptions(controller.Options{MaxConcurrentReconciles: p.opts.MaxConcurrentReconciles,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](500*time.Millisecond, p.opts.MaxReconnectDelay)}).
		WatchesRawSource(source.Channel(p.wakeups, &handler.EnqueueRequestForObject{})).
		Complete(reconcile.Func(p.reconcile))
}

// wake has the registration of cluster name handled again, because the
// gate's answer for it changed. It never blocks the gate.
func (p *Provider) wake(name multicluster.ClusterName) {
	p.mu.Lock()
	e := p.clusters[name]
	p.mu.Unlock()
	if e == nil {
		return
	}
	if strings.HasPrefix(e.source, "file:") {
		select {
		case p.wakeDir <- struct{}{}:
		default:
		}
		return
	}
	select {
	case <-p.started:
	default:
		return // not started: every Secret is reconciled once it is
	}
	ns, secret, _ := strings.Cut(e.source, "/")
	ev := event.GenericEvent{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}}}
	select {
	case p.wakeups <- ev:
	default:
		// Full (a whole fleet moved at once): hand it over without blocking
		// the gate; the goroutine ends with the provider.
		go func() {
			select {
			case p.wakeups <- ev:
			case <-p.ctx.Done():
			}
		}()
	}
}

// wanted reports whether the gate wants name connected here.
func (p *Provider) wanted(name multicluster.ClusterName) bool {
	return p.opts.Connect == nil || p.opts.Connect.Wanted(name)
}

// Start records the Aware that clusters are engaged with and blocks until ctx
// is done. Every per-cluster context derives from ctx.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	p.ctx, p.aware = ctx, aware
	close(p.started)
	if p.opts.KubeconfigDir != "" {
		p.watchDir(ctx, p.opts.KubeconfigDir)
		return nil
	}
	<-ctx.Done()
	return nil
}

// Get returns the engaged cluster called name, or multicluster.ErrClusterNotFound.
func (p *Provider) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clusters[name]; ok && e.cl != nil {
		return e.cl, nil
	}
	return nil, fmt.Errorf("cluster %q: %w", name, multicluster.ErrClusterNotFound)
}

// IndexField adds an index to every engaged cluster, current and future.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	p.mu.Lock()
	p.indexers = append(p.indexers, index{obj: obj, field: field, extract: extract})
	current := make([]cluster.Cluster, 0, len(p.clusters))
	for _, e := range p.clusters {
		if e.cl != nil {
			current = append(current, e.cl)
		}
	}
	p.mu.Unlock()
	for _, cl := range current {
		if err := cl.GetFieldIndexer().IndexField(ctx, obj, field, extract); err != nil {
			return fmt.Errorf("failed to index field %q: %w", field, err)
		}
	}
	return nil
}

// ClusterLabels returns the labels of the Secret that registers a served
// cluster (nil for kubeconfig-file clusters and unknown names). The map is
// shared: callers must not modify it.
func (p *Provider) ClusterLabels(name multicluster.ClusterName) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clusters[name]; ok {
		return e.labels
	}
	return nil
}

// SecretOf names the Argo CD cluster Secret that registers a served
// cluster; false for kubeconfig-file clusters and unknown names.
func (p *Provider) SecretOf(name multicluster.ClusterName) (types.NamespacedName, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.clusters[name]
	if !ok || p.opts.KubeconfigDir != "" {
		return types.NamespacedName{}, false
	}
	ns, n, found := strings.Cut(e.source, "/")
	return types.NamespacedName{Namespace: ns, Name: n}, found
}

// Clusters returns every valid registration's cluster and its Secret
// labels, connected here or not.
func (p *Provider) Clusters() map[multicluster.ClusterName]map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[multicluster.ClusterName]map[string]string, len(p.clusters))
	for name, e := range p.clusters {
		out[name] = e.labels
	}
	return out
}

// NamespaceScoped reports whether name is served through a namespace-scoped
// registration (it may read and write only its namespaces).
func (p *Provider) NamespaceScoped(name multicluster.ClusterName) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.clusters[name]
	return ok && e.scoped
}

// Namespaces returns the namespaces a namespace-scoped registration of name
// may read; nil for a cluster-wide one (or an unknown name).
func (p *Provider) Namespaces(name multicluster.ClusterName) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clusters[name]; ok {
		return slices.Clone(e.namespaces)
	}
	return nil
}

// ClusterNames lists the clusters connected here.
func (p *Provider) ClusterNames() []multicluster.ClusterName {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]multicluster.ClusterName, 0, len(p.clusters))
	for n, e := range p.clusters {
		if e.cl != nil {
			names = append(names, n)
		}
	}
	return names
}

func (p *Provider) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	select {
	case <-p.started:
	case <-ctx.Done():
		return reconcile.Result{}, ctx.Err()
	}
	log := logr.FromContextOrDiscard(ctx)

	secret := &corev1.Secret{}
	if err := p.hub.Get(ctx, req.NamespacedName, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("failed to get cluster Secret %s: %w", req.NamespacedName, err)
		}
		secret = nil
	}
	defer p.noteHandled(req.String())
	if secret == nil || secret.DeletionTimestamp != nil || !p.serves(secret.Labels) {
		p.metrics.invalid.DeletePartialMatch(prometheus.Labels{"secret": req.String()})
		if name, ok := p.remove(req.String()); ok {
			p.metrics.forgetCluster(string(name))
			log.Info("cluster disengaged: its Secret is gone", "cluster", name)
			if secret != nil {
				p.recorder.Eventf(secret, nil, corev1.EventTypeNormal, ReasonClusterDisengaged, "Disengage",
					"cluster %q is no longer served; nothing was deleted downstream", name)
			}
		}
		return reconcile.Result{}, nil
	}

	p.metrics.invalid.DeletePartialMatch(prometheus.Labels{"secret": req.String()})
	parsed, err := parseSecret(secret, p.inCluster)
	if err == nil {
		err = checkServer(parsed.Server, p.opts.AllowPlainHTTP, p.opts.AllowLinkLocal)
	}
	if err == nil {
		err = checkExec(parsed.Config, p.opts.ExecPlugins)
	}
	if err != nil {
		name := string(secret.Data[keyName])
		log.Error(err, "invalid cluster Secret; keeping any running connection", "cluster", name)
		p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, ReasonInvalidClusterSecret, "Parse", "%v", err)
		p.metrics.invalid.WithLabelValues(req.String(), ReasonInvalidClusterSecret).Set(1)
		return reconcile.Result{}, nil // a change to the Secret triggers the next attempt
	}
	name := multicluster.ClusterName(parsed.Name)
	log = log.WithValues("cluster", name)

	changed, err := p.engage(req.String(), parsed)
	if err == nil {
		p.setLabels(req.String(), name, secret.Labels)
	}
	var dup *DuplicateError
	switch {
	case errors.As(err, &dup):
		log.Error(nil, "duplicate cluster name; ignoring this Secret", "servedFrom", dup.ServedFrom)
		p.metrics.invalid.WithLabelValues(req.String(), ReasonDuplicateClusterName).Set(1)
		p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, ReasonDuplicateClusterName, "Register",
			"cluster name %q is already registered by Secret %s; this Secret is ignored", name, dup.ServedFrom)
		return reconcile.Result{}, nil
	case err != nil:
		p.metrics.reachable.WithLabelValues(string(name)).Set(0)
		log.Error(err, "failed to engage cluster")
		p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, ReasonClusterUnreachable, "Connect", "cluster %q: %v", name, err)
		return reconcile.Result{}, err // retried with backoff
	case !changed:
		return reconcile.Result{}, nil
	}
	p.metrics.reachable.WithLabelValues(string(name)).Set(1)
	log.Info("cluster connected", "server", redactServer(parsed.Server), "warnings", parsed.Warnings)
	msg := fmt.Sprintf("cluster %q at %s is connected to the hub", name, redactServer(parsed.Server))
	if len(parsed.Warnings) > 0 {
		msg += "; " + strings.Join(parsed.Warnings, "; ")
	}
	p.recorder.Eventf(secret, nil, corev1.EventTypeNormal, ReasonClusterConnected, "Connect", "%s", msg)
	return reconcile.Result{}, nil
}

// serves reports whether a Secret with these labels registers a cluster this hub serves.
func (p *Provider) serves(l map[string]string) bool {
	if l[SecretTypeLabel] != SecretTypeCluster {
		return false
	}
	return p.opts.Selector == nil || p.opts.Selector.Matches(labels.Set(l))
}
