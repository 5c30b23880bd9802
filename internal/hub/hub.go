package hub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/peers"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/issuance"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/internal/shim"
	"github.com/certhub/certhub/internal/trust"
)

// NewScheme returns the types certhub reads and writes, in the hub and downstream.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := cmapi.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := gwapi.Install(s); err != nil {
		return nil, err
	}
	if err := hubapi.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// newCoordinator builds the coordinator o.Coordinator names, and the
// fence every writer asks before it writes downstream (nil: none, one replica).
func newCoordinator(cfg *rest.Config, o *Options) (mcmanager.Coordinator, fence.Fence, error) {
	log := ctrl.Log.WithName("coordinator")
	switch o.Coordinator {
	case CoordinatorNone:
		return nil, nil, nil
	case CoordinatorUpstream:
		// Upstream's peer registry defaults its ID to the hostname, which
		// replicas on one machine share: give it the replica identity.
		c, err := client.New(cfg, client.Options{})
		if err != nil {
			return nil, nil, fmt.Errorf("failed to create hub client: %w", err)
		}
		d, r := o.Shard.LeaseDuration, o.Shard.RenewInterval
		reg := peers.NewLeaseRegistry(c, o.Namespace, "mcr-peer", o.Identity, 1, log)
		return sharded.New(c, log, sharded.WithShardLease(o.Namespace, "mcr-shard"), sharded.WithLeaseTimings(d, r, o.Shard.RetryPeriod),
			sharded.WithSynchronizationIntervals(o.Shard.RetryPeriod, 15*time.Second), sharded.WithPeerRegistry(reg)), nil, nil
	default:
		sc, err := shard.New(shard.Options{
			Config: cfg, Namespace: o.Namespace, Identity: o.Identity, Weight: o.Shard.Weight,
			LeaseDuration: o.Shard.LeaseDuration, RenewDeadline: o.Shard.RenewDeadline,
			RetryPeriod: o.Shard.RetryPeriod, RenewInterval: o.Shard.RenewInterval, MaxClockSkew: o.Shard.MaxClockSkew,
			Buckets: o.Shard.Buckets, Standby: o.Shard.Standby,
		}, log)
		if err != nil {
			return nil, nil, err
		}
		return sc, sc, nil
	}
}

// waitForHub blocks until the hub API server answers and serves the API
// group the manager maps as it is created (certhub.io/v1alpha1: ACMEOrders
// are cached by namespace), so a replica that starts while the hub
// restarts — whose CRDs are served a moment after /version answers —
// waits for it (logging why) instead of exiting into a crash-loop
// back-off. A hub without the ACMEOrder CRD is waited for the same way,
// saying so. An answer that is an error (401, 403) fails at once: waiting
// would not fix the credentials. It returns nil when ctx ends first.
func waitForHub(ctx context.Context, cfg *rest.Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("failed to create hub discovery client: %w", err)
	}
	log := ctrl.Log.WithName("hub")
	backoff := wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Cap: 2 * time.Second, Steps: math.MaxInt32}
	for {
		err := hubServes(dc)
		if err == nil {
			return nil
		}
		if status := apierrors.APIStatus(nil); errors.As(err, &status) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("hub API server %s refused certhub: %w", cfg.Host, err)
		}
		d := backoff.Step()
		log.Error(err, "hub API server not ready; waiting for it", "host", cfg.Host, "retryIn", d.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
}

// hubServes reports why the hub cannot be used yet: no answer, or the
// ACMEOrder API not served (yet).
func hubServes(dc discovery.DiscoveryInterface) error {
	if _, err := dc.ServerVersion(); err != nil {
		return err
	}
	if _, err := dc.ServerResourcesForGroupVersion(hubapi.SchemeGroupVersion.String()); err != nil {
		return fmt.Errorf("the hub does not serve %s (the ACMEOrder CRD of kustomize/base/crds) yet: %w", hubapi.SchemeGroupVersion, err)
	}
	return nil
}

// hubSecretCache says which hub Secrets the hub caches: those of its own
// namespace (ClusterIssuer key pairs), and in Argo CD's namespace only the
// cluster Secrets — never Argo CD's admin Secret or repository credentials,
// which the hub has no business holding in memory. When both namespaces are
// one, that namespace is cached whole (the CA key pairs carry no label).
func hubSecretCache(o *Options) map[string]cache.Config {
	if o.Namespace == o.ClusterSecretNamespace {
		return map[string]cache.Config{o.Namespace: {}}
	}
	return map[string]cache.Config{
		o.Namespace:              {},
		o.ClusterSecretNamespace: {LabelSelector: labels.SelectorFromSet(labels.Set{inventory.SecretTypeLabel: inventory.SecretTypeCluster})},
	}
}

// bundleName is the trust bundle ConfigMap a CA rotation waits for ("" when
// bundles are off).
func bundleName(o *Options) string {
	if !o.TrustBundles {
		return ""
	}
	return o.TrustBundleConfigMap
}

// Run wires the hub manager against cfg and blocks until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if cfg.QPS == 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = inventory.DefaultQPS, inventory.DefaultBurst
	}
	if err := waitForHub(ctx, cfg); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // stopped while waiting
	}
	scheme, err := NewScheme()
	if err != nil {
		return fmt.Errorf("failed to build scheme: %w", err)
	}

	selector, err := labels.Parse(o.ClusterSelector)
	if err != nil {
		return fmt.Errorf("invalid --cluster-selector: %w", err)
	}
	var provider *inventory.Provider
	// Told of a cluster whose Secret's labels changed (trust scopes); set
	// before the manager starts, read only after.
	var labelSubscribers []func(multicluster.ClusterName)
	policies, err := policy.New(policy.Options{Default: policy.Mode(o.DefaultPolicy), ClusterLabels: func(name string) map[string]string {
		return provider.ClusterLabels(multicluster.ClusterName(name))
	}})
	if err != nil {
		return err
	}
	coord, ownership, err := newCoordinator(cfg, o)
	if err != nil {
		return err
	}
	// Only our coordinator decides what each replica connects to; without
	// it (or with upstream's, which needs every cluster engaged to decide)
	// every replica connects every cluster.
	var gate inventory.Gate
	if sc, ok := coord.(*shard.Coordinator); ok {
		gate = sc
	}
	shimOpts := shim.Options{Ingress: o.IngressShim, Gateway: o.GatewayShim, DefaultIssuerName: o.DefaultIssuerName,
		DefaultIssuerKind: o.DefaultIssuerKind, DefaultIssuerGroup: o.DefaultIssuerGroup, AutoCertificateAnnotations: o.AutoCertificateAnnotations}
	informers := func(scoped bool) []client.Object {
		out := append(certsync.Informers(), shim.Informers(shimOpts)...)
		if o.TrustBundles && !scoped {
			out = append(out, trust.Informers()...)
		}
		return out
	}
	provider, err = inventory.New(inventory.Options{
		Namespace:      o.ClusterSecretNamespace,
		Selector:       selector,
		KubeconfigDir:  o.KubeconfigDir,
		Scheme:         scheme,
		ClusterOptions: []cluster.Option{certsync.CacheOptions(), trust.CacheOptions()},
		OnLabelsChanged: func(name multicluster.ClusterName) {
			policies.Changed()
			for _, fn := range labelSubscribers {
				fn(name)
			}
		},
		AllowPlainHTTP: o.AllowPlainHTTPClusters,
		AllowLinkLocal: o.AllowLinkLocalClusters,
		RequestTimeout: o.RequestTimeout,
		ExecPlugins:    append([]string{}, o.ExecPlugins...), // non-nil: an empty list allows none
		ExecShim:       o.ExecShim,
		Gate:           gate,
		Informers:      informers,
		Compression:    o.DownstreamCompression,
	})
	if err != nil {
		return err
	}

	var mcOpts []mcmanager.Option
	if coord != nil {
		mcOpts = append(mcOpts, mcmanager.WithCoordinator(coord))
	}

	secretNamespaces := hubSecretCache(o)
	mgr, err := mcmanager.New(cfg, provider, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress: o.HealthProbeAddr,
		PprofBindAddress:       pprofAddr(o.PprofAddr),
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}:    {Namespaces: secretNamespaces},
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{o.Namespace: {}}}, // CA rotation state
			&hubapi.ACMEOrder{}: {Namespaces: map[string]cache.Config{o.Namespace: {}}}, // the hub's ACME orders
		}},
	}, mcOpts...)
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	if err := provider.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up inventory: %w", err)
	}
	weight := func(cluster string) float64 { // each cluster's share of the shared budgets
		return budget.ParseWeight(provider.ClusterLabels(multicluster.ClusterName(cluster)))
	}
	acmeService, err := acme.SetupWithManager(mgr.GetLocalManager(), acme.Options{Namespace: o.Namespace, Identity: o.Identity, UserAgent: o.UserAgent, Weight: weight,
		DNS01Nameservers: o.ACME.DNS01Nameservers, DNS01CheckAuthoritative: !o.ACME.DNS01NameserversOnly, DNS01Settle: o.ACME.DNS01Settle,
		PropagationTimeout: o.ACME.PropagationTimeout, HoldDuration: o.ACME.OrderHold, RenewalInfoInterval: o.ACME.RenewalInfoInterval})
	if err != nil {
		return fmt.Errorf("failed to set up ACME: %w", err)
	}
	resolver, err := issuance.New(issuance.Options{Client: mgr.GetLocalManager().GetClient(), Namespace: o.Namespace, ACME: acmeService.Issuer})
	if err != nil {
		return err
	}
	if err := policies.SetupWithManager(mgr.GetLocalManager()); err != nil {
		return fmt.Errorf("failed to set up issuance policies: %w", err)
	}
	// Each replica is connected only to its own clusters: it reports on
	// those (its fence says which), and reads the others' reports.
	rotator, err := rotation.New(rotation.Options{Namespace: o.Namespace, Soak: o.RotationSoak, Pause: o.RotationPause,
		Deadline: o.RotationDeadline, Grace: o.RotationGrace, Clusters: provider.Clusters, Scoped: provider.NamespaceScoped,
		GetCluster: mgr.GetCluster, Hub: mgr.GetLocalManager().GetClient(), Recorder: mgr.GetLocalManager().GetEventRecorder("certhub"),
		BundleName: bundleName(o), BundleKey: o.TrustBundleKey, Registerer: crmetrics.Registry, Fence: ownership, Identity: o.Identity}, ctrl.Log.WithName("rotation"))
	if err != nil {
		return err
	}
	if err := mgr.GetLocalManager().Add(rotator); err != nil {
		return err
	}
	var issuanceBudget certsync.Budget
	if o.IssuanceRate > 0 {
		bo := budget.Options{Rate: o.IssuanceRate, Fence: ownership, Weight: weight}
		issuanceBudget = budget.New(bo)
	}
	if err := certsync.SetupWithManager(mgr, certsync.Options{Wake: acmeService, RenewalAdvice: acmeService, Rotation: rotator, Budget: issuanceBudget, MaxBudgetDelay: o.MaxBudgetDelay, RenewalJitter: o.RenewalJitter, Issuers: resolver, Policy: policies, Identity: o.Identity, Fence: ownership, IssuerRetryInterval: o.IssuerRetryInterval, ReconcileTimeout: o.ReconcileTimeout,
		MaxConcurrentReconciles: o.Workers, MaxConcurrentReconcilesPerCluster: o.WorkersPerCluster,
		LoopMaxIssuances: o.LoopMaxIssuances, LoopWindow: o.LoopWindow}); err != nil {
		return fmt.Errorf("failed to set up certsync: %w", err)
	}
	shimOpts.Fence = ownership
	if err := shim.SetupWithManager(mgr, shimOpts); err != nil {
		return err
	}
	if o.TrustBundles {
		nsSel, _ := labels.Parse(o.TrustBundleNamespaces) // validated
		trustOpts := trust.Options{Namespace: o.Namespace, ConfigMapName: o.TrustBundleConfigMap, Key: o.TrustBundleKey, NamespaceSelector: nsSel,
			Engage: func(name multicluster.ClusterName) bool { return !provider.NamespaceScoped(name) }, Rotation: rotator,
			ClusterLabels:   provider.ClusterLabels,
			SubscribeLabels: func(fn func(multicluster.ClusterName)) { labelSubscribers = append(labelSubscribers, fn) }}
		trustOpts.Fence = ownership
		if err := trust.SetupWithManager(mgr, trustOpts); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	ready := healthz.Ping
	if sc, ok := coord.(*shard.Coordinator); ok {
		ready = func(*http.Request) error {
			if !sc.Ready() {
				return errors.New("shard membership not synced yet")
			}
			return nil
		}
	}
	if err := mgr.AddReadyzCheck("shard", ready); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}

// pprofAddr maps the flag's "0" to controller-runtime's "disabled" (empty).
func pprofAddr(addr string) string {
	if addr == "0" {
		return ""
	}
	return addr
}

// Owners says which replica owns each cluster (shard.Owners).
type Owners = shard.Owners

// ReadOwners reads which replica owns each cluster from the fence Leases
// in namespace (for `certhub status` and the demo): the hub is the one
// package that knows how clusters are sharded.
func ReadOwners(ctx context.Context, c client.Reader, namespace string) (Owners, error) {
	return shard.ReadOwners(ctx, c, namespace)
}
