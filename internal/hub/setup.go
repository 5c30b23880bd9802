package hub

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/crsign"
	"github.com/certhub/certhub/internal/discovery"
	"github.com/certhub/certhub/internal/drpair"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/revocation"
	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/internal/shim"
	"github.com/certhub/certhub/internal/trust"
	"github.com/certhub/certhub/internal/writegate"
)

// New calls setupInventory (with the coordinator and the policy engine),
// setupManager, setupShared (what components share: the write gate, the
// record, the issuers with ACME, the issuance budget), then every component
// of the table (components.go), in its order.

// setupShared builds the dependencies components share, once, before any
// component: the write gate (migration), the record of issued
// certificates, ACME and the issuers, and the issuance budget.
func (h *Hub) setupShared() error {
	for _, step := range []func() error{h.setupMigration, h.setupRecord, h.setupACME} {
		if err := step(); err != nil {
			return err
		}
	}
	if o := h.opts; o.IssuanceRate > 0 {
		var err error
		if h.budget, err = budget.New(budget.Options{Rate: o.IssuanceRate, Reserve: o.IssuanceReserve, Fence: h.fence, Weight: h.weight}); err != nil {
			return fmt.Errorf("failed to set up the issuance budget: %w", err)
		}
	}
	return nil
}

// shimOptions are the Ingress and Gateway shims' options.
func (h *Hub) shimOptions() shim.Options {
	o := h.opts
	return shim.Options{Ingress: o.IngressShim, Gateway: o.GatewayShim, DefaultIssuerName: o.DefaultIssuerName,
		DefaultIssuerKind: o.DefaultIssuerKind, DefaultIssuerGroup: o.DefaultIssuerGroup,
		AutoCertificateAnnotations: o.AutoCertificateAnnotations, Fence: h.writeFence(), Changes: h.subscribeGate}
}

// subscribeGate registers fn with the migration gate, when there is one:
// writers gated by it hear when a cluster's answer may have changed.
func (h *Hub) subscribeGate(fn func(multicluster.ClusterName)) {
	if h.gate != nil {
		h.gate.Subscribe(fn)
	}
}

// writeFence is the fence of the writers that write only where the hub
// issues (trust, shim): the migration gate once it exists.
func (h *Hub) writeFence() fence.Fence {
	if h.gate != nil {
		return h.gate
	}
	return h.fence
}

// setupMigration sets up the gate that decides, per cluster, whether the
// hub writes there: its mode (certhub.io/mode) and whether cert-manager is
// still active there (internal/writegate).
func (h *Hub) setupMigration() error {
	o := h.opts
	local := h.mgr.GetLocalManager()
	var err error
	h.gate, err = writegate.New(writegate.Options{Fence: h.fence, Identity: o.Identity, Labels: h.provider.ClusterLabels,
		Clusters: h.provider.ClusterNames, GetCluster: h.mgr.GetCluster, Secret: h.provider.SecretOf,
		Hub: local.GetClient(), Namespace: o.Namespace, Recorder: local.GetEventRecorder("certhub"),
		Interval: o.CertManagerCheckInterval, LeaseNamespace: o.CertManagerLeaseNamespace, Registerer: crmetrics.Registry})
	if err != nil {
		return err
	}
	h.labelSubscribers = append(h.labelSubscribers, h.gate.LabelsChanged)
	return h.gate.SetupWithManager(local)
}

// weight is each cluster's share of the shared budgets.
func (h *Hub) weight(cluster string) float64 {
	return budget.ParseWeight(h.provider.ClusterLabels(multicluster.ClusterName(cluster)))
}

// setupInventory builds the coordinator and the provider of the clusters
// the Argo CD Secrets describe, with the policy engine (which reads the
// clusters' labels, and is told when they change).
func (h *Hub) setupInventory(cfg *rest.Config) error {
	o := h.opts
	selector, err := labels.Parse(o.ClusterSelector)
	if err != nil {
		return fmt.Errorf("invalid --cluster-selector: %w", err)
	}
	h.policies, err = policy.New(policy.Options{Default: policy.Mode(o.DefaultPolicy), ClusterLabels: func(name string) map[string]string {
		return h.provider.ClusterLabels(multicluster.ClusterName(name))
	}})
	if err != nil {
		return err
	}
	if h.coord, h.shard, err = newCoordinator(cfg, o); err != nil {
		return err
	}
	// Only our coordinator decides what each replica connects to; without
	// it (or with upstream's, which needs every cluster engaged to decide)
	// every replica connects every cluster.
	var connect inventory.Connector
	if h.shard != nil {
		connect, h.fence = h.shard, h.shard
	}
	informers := func(scoped bool) []client.Object { return componentInformers(o, scoped) }
	qps, burst := downstreamQPS(o.IssuanceRate)
	h.provider, err = inventory.New(inventory.Options{
		Namespace:      o.ClusterSecretNamespace,
		Selector:       selector,
		KubeconfigDir:  o.KubeconfigDir,
		Scheme:         h.scheme,
		ClusterOptions: componentCacheOptions(),
		OnLabelsChanged: func(name multicluster.ClusterName) {
			h.policies.Changed()
			for _, fn := range h.labelSubscribers {
				fn(name)
			}
		},
		AllowPlainHTTP: o.AllowPlainHTTPClusters,
		AllowLinkLocal: o.AllowLinkLocalClusters,
		RequestTimeout: o.RequestTimeout,
		ExecPlugins:    append([]string{}, o.ExecPlugins...), // non-nil: an empty list allows none
		ExecShim:       o.ExecShim,
		Connect:        connect,
		Informers:      informers,
		Compression:    o.DownstreamCompression,
		QPS:            qps,
		Burst:          burst,
	})
	return err
}

// requestsPerIssuance is what one issuance asks of its cluster's API server
// at most: the live Secret read, the Secret apply, the status write and an
// Event.
const requestsPerIssuance = 4

// downstreamQPS is each downstream client's limit: inventory's default, or
// more when --issuance-rate could send one cluster more requests than that
// (one cluster may take the whole rate when it alone has work). Below it,
// client-go's limiter — first come, first served — would become the queue
// a quiet tenant waits in behind a busy one, past the fair budget.
func downstreamQPS(issuanceRate float64) (float32, int) {
	qps := max(float32(inventory.DefaultQPS), float32(requestsPerIssuance*issuanceRate))
	return qps, max(inventory.DefaultBurst, int(2*qps))
}

// setupManager creates the multicluster manager (with the coordinator) and
// sets the provider up on it.
func (h *Hub) setupManager(cfg *rest.Config) error {
	o := h.opts
	var mcOpts []mcmanager.Option
	if h.coord != nil {
		mcOpts = append(mcOpts, mcmanager.WithCoordinator(h.coord))
	}
	var err error
	h.mgr, err = mcmanager.New(cfg, h.provider, manager.Options{
		Scheme:                 h.scheme,
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress: o.HealthProbeAddr,
		PprofBindAddress:       pprofAddr(o.PprofAddr),
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}:    {Namespaces: hubSecretCache(o)},
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{o.Namespace: {}}}, // CA rotation state
			&hubapi.ACMEOrder{}: {Namespaces: map[string]cache.Config{o.Namespace: {}}}, // the hub's ACME orders
		}},
	}, mcOpts...)
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	if err := h.provider.SetupWithManager(h.mgr); err != nil {
		return fmt.Errorf("failed to set up inventory: %w", err)
	}
	return nil
}

// setupACME sets up the ACME service and the issuer resolver that uses it.
func (h *Hub) setupACME() error {
	o := h.opts
	var err error
	h.acme, err = acme.New(acme.Options{Namespace: o.Namespace, Identity: o.Identity, UserAgent: o.UserAgent, Weight: h.weight,
		DNS01Nameservers: o.ACME.DNS01Nameservers, DNS01CheckAuthoritative: !o.ACME.DNS01NameserversOnly, DNS01Settle: o.ACME.DNS01Settle,
		PropagationTimeout: o.ACME.PropagationTimeout, HoldDuration: o.ACME.OrderHold, RenewalInfoInterval: o.ACME.RenewalInfoInterval,
		AmbientCredentials: o.ACME.AmbientCredentials, RESTConfig: h.mgr.GetLocalManager().GetConfig()})
	if err == nil {
		err = h.acme.SetupWithManager(h.mgr.GetLocalManager())
	}
	if err != nil {
		return fmt.Errorf("failed to set up ACME: %w", err)
	}
	h.issuers, err = issuers.New(issuers.Options{Client: h.mgr.GetLocalManager().GetClient(), Namespace: o.Namespace, ACME: h.acme.Issuer})
	return err
}

// setupPolicy watches the IssuancePolicies.
func (h *Hub) setupPolicy() error {
	if err := h.policies.SetupWithManager(h.mgr.GetLocalManager()); err != nil {
		return fmt.Errorf("failed to set up issuance policies: %w", err)
	}
	return nil
}

// setupRotation sets up the CA rotations. Each replica is connected only to
// its own clusters: it reports on those (its fence says which), and reads
// the others' reports.
func (h *Hub) setupRotation() error {
	o := h.opts
	var err error
	h.rotator, err = rotation.New(rotation.Options{Namespace: o.Namespace, Soak: o.RotationSoak, Pause: o.RotationPause,
		Deadline: o.RotationDeadline, Grace: o.RotationGrace, Clusters: h.provider.Clusters, Scoped: h.provider.NamespaceScoped,
		GetCluster: h.mgr.GetCluster, Hub: h.mgr.GetLocalManager().GetClient(), Recorder: h.mgr.GetLocalManager().GetEventRecorder("certhub"),
		BundleName: bundleName(o), BundleKey: o.TrustBundleKey, Registerer: crmetrics.Registry, Fence: h.fence, Identity: o.Identity,
		Leaf: h.secrets.Leaf, Log: ctrl.Log.WithName("rotation")})
	if err != nil {
		return err
	}
	return h.rotator.SetupWithManager(h.mgr.GetLocalManager())
}

// setupRecord sets up the hub's record of the certificates it signs
// (internal/issued), on every replica.
func (h *Hub) setupRecord() error {
	o := h.opts
	local := h.mgr.GetLocalManager()
	var err error
	h.record, err = issued.New(issued.Options{Client: local.GetClient(), Cache: local.GetCache(), Namespace: o.Namespace, Writer: o.Identity,
		MaxEntries: o.IssuedMaxEntries, RebuildWindow: o.IssuedRebuildWindow, Log: ctrl.Log.WithName("issued")})
	if err != nil {
		return fmt.Errorf("failed to set up the record of issued certificates: %w", err)
	}
	return h.record.SetupWithManager(local)
}

// setupRevocation sets up the CertificateRevocations: renew, then revoke
// (the CRLs of CA issuers, ACME's revokeCert), and the CRLs' HTTP server
// when --crl-bind-address is set.
func (h *Hub) setupRevocation() error {
	o := h.opts
	local := h.mgr.GetLocalManager()
	var err error
	h.revoker, err = revocation.New(revocation.Options{Namespace: o.Namespace, Hub: local.GetClient(), Live: local.GetAPIReader(), Fence: h.fence,
		Clusters: h.provider.Clusters, Record: h.record, Leaf: h.secrets.Leaf, ACME: h.acme, Interval: o.RevocationInterval, Registerer: crmetrics.Registry, Log: ctrl.Log.WithName("revocation")})
	if err != nil {
		return fmt.Errorf("failed to set up revocation: %w", err)
	}
	if err := h.revoker.SetupWithManager(h.mgr); err != nil {
		return err
	}
	if o.CRLBindAddress == "" || o.CRLBindAddress == "0" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle(revocation.CRLPath, h.revoker.Handler())
	return local.Add(&manager.Server{Name: "crl", Server: &http.Server{Addr: o.CRLBindAddress, Handler: mux, ReadHeaderTimeout: 10 * time.Second}})
}

// setupCertsync sets up the Certificate reconciler of every engaged cluster.
func (h *Hub) setupCertsync() error {
	o := h.opts
	var issuanceBudget certsync.Budget
	if h.budget != nil {
		issuanceBudget = h.budget
	}
	syncer, err := certsync.New(certsync.Options{Wake: h.acme, RenewalAdvice: h.acme, Rotation: h.rotator, Budget: issuanceBudget, Indexer: h.provider,
		Revocation: h.revoker, Secrets: &h.secrets, Record: h.record,
		MaxBudgetDelay: o.MaxBudgetDelay, RenewalJitter: o.RenewalJitter, MaxNames: o.MaxNamesPerCertificate, Issuers: h.issuers, Policy: h.policies, Identity: o.Identity,
		Fence: h.fence, IssuerRetryInterval: o.IssuerRetryInterval, ReconcileTimeout: o.ReconcileTimeout,
		MaxConcurrentReconciles: o.Workers, MaxConcurrentReconcilesPerCluster: o.WorkersPerCluster, Migration: h.gate,
		LoopMaxIssuances: o.LoopMaxIssuances, LoopWindow: o.LoopWindow, CertificateMetrics: o.CertificateMetrics})
	if err == nil {
		err = syncer.SetupWithManager(h.mgr)
	}
	if err != nil {
		return fmt.Errorf("failed to set up certsync: %w", err)
	}
	return nil
}

// setupCRSign sets up the signer of downstream CertificateRequests that
// name a hub issuer (issuerRef.group certhub.io): the same issuers, policy
// and budget as Certificates, written where the cluster's mode allows.
func (h *Hub) setupCRSign() error {
	o := h.opts
	opts := crsign.Options{Issuers: h.issuers, Fence: h.fence, Policy: h.policies, Record: h.record, IssuerRetryInterval: o.IssuerRetryInterval, MaxNames: o.MaxNamesPerCertificate,
		MaxConcurrentReconciles: o.Workers, MaxConcurrentReconcilesPerCluster: o.WorkersPerCluster, Registerer: crmetrics.Registry}
	if h.gate != nil {
		opts.Fence, opts.Modes = h.gate.RequestFence(), h.gate
	}
	if h.budget != nil {
		opts.Budget = h.budget
	}
	signer, err := crsign.New(opts)
	if err == nil {
		err = signer.SetupWithManager(h.mgr)
	}
	if err != nil {
		return fmt.Errorf("failed to set up crsign: %w", err)
	}
	return nil
}

// setupShim sets up cert-manager's certificate-shim for Ingresses and Gateways.
func (h *Hub) setupShim() error {
	sh, err := shim.New(h.shimOptions())
	if err != nil {
		return err
	}
	return sh.SetupWithManager(h.mgr)
}

// setupTrust sets up the trust bundles, when on.
func (h *Hub) setupTrust() error {
	o := h.opts
	nsSel, _ := labels.Parse(o.TrustBundleNamespaces) // validated
	bundles, err := trust.New(trust.Options{Namespace: o.Namespace, ConfigMapName: o.TrustBundleConfigMap, Key: o.TrustBundleKey,
		NamespaceSelector: nsSel, Rotation: h.rotator, ClusterLabels: h.provider.ClusterLabels, Fence: h.writeFence(),
		Engage: func(name multicluster.ClusterName) bool { return !h.provider.NamespaceScoped(name) },
		SubscribeLabels: func(fn func(multicluster.ClusterName)) {
			h.labelSubscribers = append(h.labelSubscribers, fn)
			h.subscribeGate(fn) // bundles skipped while the gate said no are written once it says yes
		}})
	if err != nil {
		return err
	}
	return bundles.SetupWithManager(h.mgr)
}

// setupHealth adds /healthz and /readyz: ready once shard membership synced.
func (h *Hub) setupHealth() error {
	if err := h.mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	ready := healthz.Ping
	if sc := h.shard; sc != nil {
		ready = func(*http.Request) error {
			if !sc.Ready() {
				return errors.New("shard membership not synced yet")
			}
			return nil
		}
	}
	return h.mgr.AddReadyzCheck("shard", ready)
}

// setupDiscovery finds every TLS certificate in the engaged clusters and
// reports it in the hub, when on.
func (h *Hub) setupDiscovery() error {
	o := h.opts
	d, err := discovery.New(discovery.Options{Namespace: o.Namespace, Hub: h.mgr.GetLocalManager().GetClient(), Fence: h.fence,
		Namespaces: h.provider.Namespaces, MayRead: func(name multicluster.ClusterName) bool {
			mode, _ := writegate.ModeOf(h.provider.ClusterLabels(name))
			return mode != writegate.External // keys stay in the cluster: not even discovery reads them
		}, Written: h.secrets.At, ReadQPS: float32(o.DiscoveryReadQPS), MaxSeries: o.DiscoveryMaxSeries, ReportInterval: o.DiscoveryReportInterval,
		Registerer: crmetrics.Registry, Log: ctrl.Log.WithName("discovery")})
	if err != nil {
		return fmt.Errorf("failed to set up discovery: %w", err)
	}
	h.labelSubscribers = append(h.labelSubscribers, d.ModeChanged) // a switch to external stops its reads at once
	return d.SetupWithManager(h.mgr)
}

// setupStandby keeps the DR pairs' standby clusters issued for their
// primaries' Certificates, when on.
func (h *Hub) setupStandby() error {
	o := h.opts
	p, err := drpair.New(drpair.Options{Namespace: o.Namespace, Hub: h.mgr.GetLocalManager().GetClient(), Clusters: h.provider.Clusters,
		Registration: h.provider.SecretOf, Fence: h.fence, WriteFence: h.writeFence(), Interval: o.StandbyPairInterval,
		Registerer: crmetrics.Registry, Log: ctrl.Log.WithName("standby")})
	if err != nil {
		return fmt.Errorf("failed to set up the DR pairs: %w", err)
	}
	return p.SetupWithManager(h.mgr)
}
