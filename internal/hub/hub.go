package hub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
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
	gwapi "sigs.k8s.io/gateway-api/apis/v1"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/peers"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/revocation"
	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/internal/secretcache"
	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/internal/writegate"
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

// newCoordinator builds the coordinator o.Coordinator names; sc is certhub's
// own (nil for the others), which is also the fence every writer asks before
// it writes downstream and the gate of what this replica connects to.
func newCoordinator(cfg *rest.Config, o *Options) (coord mcmanager.Coordinator, sc *shard.Coordinator, err error) {
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
			AwaitRegistrations: true, // the provider is its gate (setup.go) and says when
			Log:                log,
		})
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

// Run builds the replica (New) and runs it (Start) until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, o *Options) error {
	h, err := New(ctx, cfg, o)
	if err != nil || h == nil {
		return err
	}
	return h.Start(ctx)
}

// Hub is one replica: the multicluster manager and every component set up
// on it. New builds it; Start runs it.
type Hub struct {
	opts     *Options
	scheme   *runtime.Scheme
	mgr      mcmanager.Manager
	provider *inventory.Provider
	// coord decides which replica serves which cluster (nil: this one
	// serves all); shard is the same when it is certhub's coordinator,
	// nil under another --shard-coordinator.
	coord mcmanager.Coordinator
	// fence is shard (nil: one replica writes everything).
	shard    *shard.Coordinator
	fence    fence.Fence
	policies *policy.Engine
	acme     *acme.Service
	issuers  *issuers.Resolver
	rotator  *rotation.Rotator
	secrets  secretcache.Store // managed Secrets' data, shared by certsync, the rotation and the revocation
	revoker  *revocation.Controller
	// record is the hub's record of what it signed (internal/issued): every
	// signer records before delivering; revocation selects from it.
	record *issued.Record
	// gate says per cluster whether the hub writes there (mode, cert-manager
	// still active); it is also the fence of trust and shim.
	gate *writegate.Gate
	// budget is the hub's --issuance-rate, shared by Certificates and
	// CertificateRequests (nil: no limit).
	budget *budget.Budget
	// labelSubscribers are told of a cluster whose Secret's labels changed
	// (trust scopes); set before the manager starts, read only after.
	labelSubscribers []func(multicluster.ClusterName)
}

// New validates o, waits for the hub API server (nil, nil when ctx ends
// first) and sets up every component, in dependency order.
func New(ctx context.Context, cfg *rest.Config, o *Options) (*Hub, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if cfg.QPS == 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = inventory.DefaultQPS, inventory.DefaultBurst
	}
	if err := waitForHub(ctx, cfg); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, nil // stopped while waiting
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, fmt.Errorf("failed to build scheme: %w", err)
	}
	h := &Hub{opts: o, scheme: scheme}
	if err := h.setupInventory(cfg); err != nil {
		return nil, err
	}
	if err := h.setupManager(cfg); err != nil {
		return nil, err
	}
	if err := h.setupShared(); err != nil {
		return nil, err
	}
	if err := h.setupComponents(); err != nil {
		return nil, err
	}
	return h, nil
}

// Start runs the manager (every component) until ctx is done.
func (h *Hub) Start(ctx context.Context) error {
	if err := h.mgr.Start(ctx); err != nil {
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
