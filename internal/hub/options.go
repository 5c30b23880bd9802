package hub

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/certhub/certhub/internal/acme"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/certmetrics"
	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/discovery"
	"github.com/certhub/certhub/internal/drpair"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/revocation"
	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/internal/shim"
	"github.com/certhub/certhub/internal/trust"
	"github.com/certhub/certhub/internal/writegate"
)

// Defaults for Options.
const (
	// DefaultNamespace is the hub namespace for certhub's own objects: ClusterIssuer key Secrets, Leases.
	DefaultNamespace = "certhub"
	// DefaultClusterSecretNamespace is where Argo CD keeps cluster Secrets.
	DefaultClusterSecretNamespace = "argocd"
	// DefaultMetricsAddr serves Prometheus metrics.
	DefaultMetricsAddr = ":8080"
	// DefaultHealthProbeAddr serves /healthz and /readyz.
	DefaultHealthProbeAddr = ":8081"

	// CoordinatorCerthub shards clusters over all replicas (internal/shard). The default.
	CoordinatorCerthub = "certhub"
	// CoordinatorUpstream is multicluster-runtime's experimental coordinator/sharded, kept for side-by-side benchmarks.
	CoordinatorUpstream = "upstream"
	// CoordinatorNone engages every cluster in this replica: only for a single replica.
	CoordinatorNone = "none"
)

// Options are one replica's settings; internal/app fills them from flags.
type Options struct {
	// UserAgent is sent to ACME servers. Defaults to "certhub".
	UserAgent string
	// Kubeconfig points at the hub cluster. Empty means in-cluster config, then $KUBECONFIG.
	Kubeconfig string
	// Namespace holds certhub's own objects in the hub. Defaults to DefaultNamespace.
	Namespace string
	// ClusterSecretNamespace holds the Argo CD cluster Secrets. Defaults to DefaultClusterSecretNamespace.
	ClusterSecretNamespace string
	// ClusterSelector optionally narrows the cluster Secrets served (label selector syntax).
	ClusterSelector string
	// KubeconfigDir, when set, replaces the cluster Secrets: one cluster per kubeconfig file.
	KubeconfigDir string
	// MetricsAddr defaults to DefaultMetricsAddr; "0" disables the metrics server.
	MetricsAddr string
	// HealthProbeAddr defaults to DefaultHealthProbeAddr; "0" disables probes.
	HealthProbeAddr string
	// DownstreamCompression asks downstream API servers for gzip (inventory.Options.Compression). Defaults to false.
	DownstreamCompression bool
	// PprofAddr serves net/http/pprof (controller-runtime's manager); empty
	// or "0", the default, disables it.
	PprofAddr string
	// Identity names this replica in what it writes. Defaults to $POD_NAME, then the hostname.
	Identity string
	// IssuerRetryInterval is how soon a Certificate whose issuer is missing or not ready is retried.
	IssuerRetryInterval time.Duration
	// ReconcileTimeout is the deadline of one Certificate reconcile;
	// RequestTimeout bounds every downstream request but watches. Default
	// certsync.DefaultReconcileTimeout and inventory.DefaultRequestTimeout.
	ReconcileTimeout, RequestTimeout time.Duration
	// IngressShim and GatewayShim make Certificates from annotated Ingresses
	// and Gateways downstream, as cert-manager's certificate-shim does
	// (Gateways only where their CRDs are served). Both default to true.
	IngressShim, GatewayShim bool
	// DefaultIssuerName, Kind and Group serve Ingresses annotated only with
	// an auto annotation (AutoCertificateAnnotations, default
	// kubernetes.io/tls-acme). Kind defaults to ClusterIssuer.
	DefaultIssuerName, DefaultIssuerKind, DefaultIssuerGroup string
	AutoCertificateAnnotations                               []string
	// Controllers selects the optional controllers in cert-manager's
	// syntax ("*", "-name"); Complete turns it into TrustBundles,
	// IngressShim and GatewayShim. Defaults to "*".
	Controllers string
	// enabled is what Controllers turned on, by name (Complete).
	enabled map[string]bool
	// TrustBundles keeps the CA ClusterIssuers' certificates in a ConfigMap
	// (TrustBundleConfigMap, key TrustBundleKey) in the downstream
	// namespaces TrustBundleNamespaces selects (label selector; "" = all).
	TrustBundles                                                bool
	TrustBundleConfigMap, TrustBundleKey, TrustBundleNamespaces string
	// Discovery finds every TLS certificate downstream, whoever wrote it
	// (internal/discovery), reading changed Secrets at DiscoveryReadQPS per
	// cluster; DiscoveryMaxSeries caps its expiry series, and a cluster's
	// report is written at most every DiscoveryReportInterval. Defaults:
	// true, discovery.DefaultReadQPS, DefaultMaxSeries, DefaultReportInterval.
	Discovery               bool
	DiscoveryReadQPS        float64
	DiscoveryMaxSeries      int
	DiscoveryReportInterval time.Duration
	// StandbyPairs keeps every DR standby cluster (certhub.io/standby-for
	// on its Secret) issued for its primary's Certificates
	// (internal/drpair), looking at each pair every StandbyPairInterval.
	// Defaults: true, drpair.DefaultInterval.
	StandbyPairs        bool
	StandbyPairInterval time.Duration
	// RevocationInterval is how often each CertificateRevocation in
	// progress is looked at in every cluster; CRLBindAddress serves the CA
	// ClusterIssuers' CRLs over HTTP at /crl/<issuer> ("" or "0", the
	// default: not served; they are in ConfigMaps certhub-crl-<issuer>).
	// Default revocation.DefaultInterval.
	RevocationInterval time.Duration
	CRLBindAddress     string
	// IssuedMaxEntries bounds the hub's record of issued certificates
	// (internal/issued): past it nothing is signed until expired entries
	// leave. IssuedRebuildWindow is how long the record rebuilds from what
	// downstream holds when its head is missing. Defaults:
	// issued.DefaultMaxEntries, issued.DefaultRebuildWindow.
	IssuedMaxEntries    int
	IssuedRebuildWindow time.Duration
	// RotationSoak, RotationPause, RotationDeadline and RotationGrace time a
	// CA rotation (internal/rotation).
	RotationSoak, RotationPause, RotationDeadline, RotationGrace time.Duration
	// CertManagerCheckInterval is how often each cluster is looked at for
	// a running cert-manager (internal/writegate); CertManagerLeaseNamespace
	// holds its leader-election Lease.
	CertManagerCheckInterval  time.Duration
	CertManagerLeaseNamespace string
	// IssuanceRate is certificates per second for the whole hub (0: no
	// limit); each replica admits its share, by the clusters it owns.
	IssuanceRate float64
	// IssuanceReserve is the fraction of the budget's bucket kept for
	// tenants with nothing else waiting (budget.Options.Reserve), so a
	// quiet namespace is not queued behind another's backlog.
	IssuanceReserve float64
	// MaxBudgetDelay is the fraction of a certificate's remaining life at
	// renewal it may wait for the budget (certsync.DefaultMaxBudgetDelay).
	MaxBudgetDelay float64
	// RenewalJitter renews earlier by up to this fraction of the renewal
	// window, fixed per Certificate (0: cert-manager's renewal time).
	RenewalJitter float64
	// MaxNamesPerCertificate bounds the names (SANs, literalSubject or CSR
	// subject attributes) one Certificate or CertificateRequest may ask
	// for; more is refused before any other work. Defaults to
	// issuers.DefaultMaxNames.
	MaxNamesPerCertificate int
	// CertificateMetrics is certsync.Options' CertificateMetrics
	// (--certificate-metrics: all, problems or none). Default problems.
	CertificateMetrics string
	// Workers reconcile Certificates of every cluster, at most
	// WorkersPerCluster of them for one cluster at once (0: half, rounded up).
	Workers, WorkersPerCluster int
	// LoopMaxIssuances and LoopWindow configure certsync's loop guard: more
	// issuances of one Certificate generation than this within the window
	// pause it. Default certsync.DefaultLoopMaxIssuances and DefaultLoopWindow.
	LoopMaxIssuances int
	LoopWindow       time.Duration
	// AllowPlainHTTPClusters and AllowLinkLocalClusters lift the inventory's
	// refusal of http:// servers and of link-local / cloud metadata
	// addresses. Default false.
	AllowPlainHTTPClusters, AllowLinkLocalClusters bool
	// ExecPlugins are the exec credential plugins registrations may name.
	// Defaults to inventory.DefaultExecPlugins (argocd-k8s-auth).
	ExecPlugins []string
	// ExecShim is the certhub binary that runs exec plugins in a minimal
	// environment with a deadline; `certhub run` sets it to itself.
	ExecShim string
	// DefaultPolicy decides Certificates no IssuancePolicy selects: "allow"
	// (certhub before policies) or "deny". Defaults to "allow"; the shipped
	// kustomize base sets "deny".
	DefaultPolicy string
	// Coordinator picks who writes which cluster: CoordinatorCerthub (default), CoordinatorUpstream or CoordinatorNone.
	Coordinator string
	// Shard holds the sharding coordinator's settings; zero values take internal/shard's defaults.
	Shard ShardOptions
	// ACME holds the ACME issuers' settings; zero values take internal/acme's defaults.
	ACME ACMEOptions
}

// ACMEOptions are the flag-settable parts of acme.Options.
type ACMEOptions struct {
	// DNS01Nameservers, DNS01NameserversOnly: cert-manager's
	// --dns01-recursive-nameservers and --dns01-recursive-nameservers-only.
	DNS01Nameservers     []string
	DNS01NameserversOnly bool
	// DNS01Settle, PropagationTimeout and OrderHold: acme.Options' DNS01Settle, PropagationTimeout and HoldDuration.
	DNS01Settle, PropagationTimeout, OrderHold time.Duration
	// RenewalInfoInterval is acme.Options' RenewalInfoInterval (ARI); negative: off.
	RenewalInfoInterval time.Duration
	// AmbientCredentials is acme.Options' AmbientCredentials
	// (--cluster-issuer-ambient-credentials). Default true, as cert-manager's.
	AmbientCredentials bool
}

// ShardOptions are the flag-settable parts of shard.Options.
type ShardOptions struct {
	LeaseDuration, RenewDeadline, RetryPeriod, RenewInterval, MaxClockSkew time.Duration
	Buckets, Standby                                                       int
	Weight                                                                 float64
}

// NewOptions returns Options with every default applied.
func NewOptions() *Options {
	o := &Options{
		UserAgent:                  "certhub",
		Namespace:                  DefaultNamespace,
		ClusterSecretNamespace:     DefaultClusterSecretNamespace,
		MetricsAddr:                DefaultMetricsAddr,
		HealthProbeAddr:            DefaultHealthProbeAddr,
		Identity:                   os.Getenv("POD_NAME"),
		Coordinator:                CoordinatorCerthub,
		IssuerRetryInterval:        certsync.DefaultIssuerRetryInterval,
		ReconcileTimeout:           certsync.DefaultReconcileTimeout,
		Workers:                    certsync.DefaultMaxConcurrentReconciles,
		MaxBudgetDelay:             certsync.DefaultMaxBudgetDelay,
		MaxNamesPerCertificate:     issuers.DefaultMaxNames,
		CertificateMetrics:         certmetrics.DefaultMode,
		IssuanceReserve:            budget.DefaultReserve,
		RotationSoak:               5 * time.Minute,
		RotationPause:              5 * time.Minute,
		RotationDeadline:           30 * time.Minute,
		RotationGrace:              10 * time.Minute,
		CertManagerCheckInterval:   writegate.DefaultInterval,
		CertManagerLeaseNamespace:  writegate.DefaultLeaseNamespace,
		IngressShim:                true,
		TrustBundles:               true,
		Discovery:                  true,
		DiscoveryReadQPS:           discovery.DefaultReadQPS,
		DiscoveryMaxSeries:         discovery.DefaultMaxSeries,
		DiscoveryReportInterval:    discovery.DefaultReportInterval,
		StandbyPairs:               true,
		StandbyPairInterval:        drpair.DefaultInterval,
		RevocationInterval:         revocation.DefaultInterval,
		IssuedMaxEntries:           issued.DefaultMaxEntries,
		IssuedRebuildWindow:        issued.DefaultRebuildWindow,
		Controllers:                "*",
		TrustBundleConfigMap:       trust.DefaultConfigMapName,
		TrustBundleKey:             trust.DefaultKey,
		GatewayShim:                true,
		DefaultIssuerKind:          shim.DefaultIssuerKind,
		DefaultIssuerGroup:         shim.DefaultIssuerGroup,
		AutoCertificateAnnotations: []string{shim.DefaultAutoCertificateAnnotation},
		RequestTimeout:             inventory.DefaultRequestTimeout,
		LoopMaxIssuances:           certsync.DefaultLoopMaxIssuances,
		LoopWindow:                 certsync.DefaultLoopWindow,
		DefaultPolicy:              string(policy.Allow),
		ExecPlugins:                append([]string(nil), inventory.DefaultExecPlugins...),
		ACME:                       ACMEOptions{PropagationTimeout: acme.DefaultPropagationTimeout, OrderHold: acme.DefaultHoldDuration, RenewalInfoInterval: acme.DefaultRenewalInfoInterval, AmbientCredentials: true},
		Shard: ShardOptions{
			LeaseDuration: shard.DefaultLeaseDuration,
			RenewDeadline: shard.DefaultRenewDeadline,
			RetryPeriod:   shard.DefaultRetryPeriod,
			RenewInterval: shard.DefaultRenewInterval,
			MaxClockSkew:  shard.DefaultMaxClockSkew,
			Buckets:       shard.DefaultBuckets,
			Weight:        1,
		},
	}
	o.defaultIdentity()
	return o
}

// defaultIdentity names the replica $POD_NAME, then the hostname, unless
// named already.
func (o *Options) defaultIdentity() {
	if o.Identity == "" {
		o.Identity = os.Getenv("POD_NAME")
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
}

// Validate reports whether the options are usable.
func (o *Options) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if o.ClusterSecretNamespace == "" {
		errs = append(errs, errors.New("--cluster-secret-namespace must not be empty"))
	}
	if o.Identity == "" {
		errs = append(errs, errors.New("--identity must not be empty (no $POD_NAME and no hostname)"))
	}
	if _, err := labels.Parse(o.ClusterSelector); err != nil {
		errs = append(errs, fmt.Errorf("--cluster-selector: %w", err))
	}
	if o.LoopMaxIssuances < 1 || o.LoopWindow <= 0 {
		errs = append(errs, fmt.Errorf("--loop-max-issuances (%d) must be at least 1 and --loop-window (%s) positive", o.LoopMaxIssuances, o.LoopWindow))
	}
	if _, err := labels.Parse(o.TrustBundleNamespaces); err != nil {
		errs = append(errs, fmt.Errorf("--trust-bundle-namespaces: %w", err))
	}
	if o.StandbyPairInterval <= 0 {
		errs = append(errs, fmt.Errorf("--standby-pair-interval (%s) must be positive", o.StandbyPairInterval))
	}
	if o.DiscoveryReadQPS <= 0 || o.DiscoveryMaxSeries < 1 || o.DiscoveryReportInterval <= 0 {
		errs = append(errs, fmt.Errorf("--discovery-read-qps (%v), --discovery-max-series (%d) and --discovery-report-interval (%s) must be positive",
			o.DiscoveryReadQPS, o.DiscoveryMaxSeries, o.DiscoveryReportInterval))
	}
	if o.IssuedMaxEntries <= 0 || o.IssuedRebuildWindow <= 0 {
		errs = append(errs, fmt.Errorf("--issued-max-entries (%d) and --issued-rebuild-window (%s) must be positive", o.IssuedMaxEntries, o.IssuedRebuildWindow))
	}
	if o.RevocationInterval <= 0 {
		errs = append(errs, fmt.Errorf("--revocation-interval (%s) must be positive", o.RevocationInterval))
	}
	if o.RotationSoak <= 0 || o.RotationPause <= 0 || o.RotationDeadline <= 0 || o.RotationGrace <= 0 {
		errs = append(errs, fmt.Errorf("--rotation-soak, --rotation-pause, --rotation-deadline and --rotation-grace must be positive"))
	}
	if !slices.Contains(certmetrics.Modes, o.CertificateMetrics) {
		errs = append(errs, fmt.Errorf("--certificate-metrics %q: want one of %v", o.CertificateMetrics, certmetrics.Modes))
	}
	if o.MaxNamesPerCertificate < 1 {
		errs = append(errs, fmt.Errorf("--max-names-per-certificate (%d) must be at least 1", o.MaxNamesPerCertificate))
	}
	if o.RenewalJitter < 0 || o.RenewalJitter > 1 {
		errs = append(errs, fmt.Errorf("--renewal-jitter (%v) must be in [0, 1]", o.RenewalJitter))
	}
	if o.IssuanceRate < 0 || o.MaxBudgetDelay <= 0 || o.MaxBudgetDelay > 1 || o.IssuanceReserve < 0 || o.IssuanceReserve > 0.9 {
		errs = append(errs, fmt.Errorf("--issuance-rate (%v) must not be negative, --max-budget-delay (%v) must be in (0, 1] and --issuance-reserve (%v) in [0, 0.9]", o.IssuanceRate, o.MaxBudgetDelay, o.IssuanceReserve))
	}
	if o.Workers < 1 || o.WorkersPerCluster < 0 || o.WorkersPerCluster > o.Workers {
		errs = append(errs, fmt.Errorf("--concurrent-workers (%d) must be at least 1 and --concurrent-workers-per-cluster (%d) between 0 and it", o.Workers, o.WorkersPerCluster))
	}
	if o.ReconcileTimeout <= 0 || o.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--reconcile-timeout (%s) and --request-timeout (%s) must be positive", o.ReconcileTimeout, o.RequestTimeout))
	}
	if _, err := policy.ParseMode(o.DefaultPolicy); err != nil {
		errs = append(errs, fmt.Errorf("--default-policy: %w", err))
	}
	switch o.Coordinator {
	case CoordinatorCerthub, CoordinatorUpstream, CoordinatorNone:
	default:
		errs = append(errs, fmt.Errorf("--shard-coordinator %q must be one of certhub, upstream, none", o.Coordinator))
	}
	return errors.Join(errs...)
}

// The optional controllers --controllers names (cert-manager's syntax).
const (
	ControllerTrustBundles = "trust-bundles"
	ControllerIngressShim  = "ingress-shim"
	ControllerGatewayShim  = "gateway-shim"
	ControllerDiscovery    = "discovery"
	ControllerStandbyPairs = "standby-pairs"
)

// OptionalControllers are the controllers --controllers can turn off: the
// names the component table lists (components.go).
var OptionalControllers = optionalControllers()

// Enabled reports whether the optional controller name is on: the switch
// of a controller that has one (TrustBundles, ...), else what --controllers
// said (Complete; every one when it was not called).
func (o *Options) Enabled(name string) bool {
	switch name {
	case ControllerTrustBundles:
		return o.TrustBundles
	case ControllerIngressShim:
		return o.IngressShim
	case ControllerGatewayShim:
		return o.GatewayShim
	case ControllerDiscovery:
		return o.Discovery
	case ControllerStandbyPairs:
		return o.StandbyPairs
	}
	return o.enabled == nil || o.enabled[name]
}

// Complete resolves what the flags leave open: the replica's identity
// ($POD_NAME, then the hostname) and --controllers into the controller
// switches. Call it after parsing and before Run.
func (o *Options) Complete() error {
	o.defaultIdentity()
	on, err := parseControllers(o.Controllers)
	if err != nil {
		return err
	}
	o.TrustBundles, o.IngressShim, o.GatewayShim = on[ControllerTrustBundles], on[ControllerIngressShim], on[ControllerGatewayShim]
	o.Discovery, o.StandbyPairs = on[ControllerDiscovery], on[ControllerStandbyPairs]
	o.enabled = on
	return nil
}

// parseControllers reads cert-manager's --controllers syntax: "*" turns on
// every controller, "name" one, "-name" turns one off; later items win.
func parseControllers(spec string) (map[string]bool, error) {
	on := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		name, off := strings.CutPrefix(item, "-")
		switch {
		case item == "":
		case item == "*":
			for _, c := range OptionalControllers {
				on[c] = true
			}
		case slices.Contains(OptionalControllers, name):
			on[name] = !off
		default:
			return nil, fmt.Errorf("--controllers: unknown controller %q (known: *, %s)", name, strings.Join(OptionalControllers, ", "))
		}
	}
	return on, nil
}
