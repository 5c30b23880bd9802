package app

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/certhub/certhub/internal/acme"
	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/internal/shim"
	"github.com/certhub/certhub/internal/trust"
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

// Options are the controller's settings, filled from flags by AddFlags.
type Options struct {
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
	// TrustBundles keeps the CA ClusterIssuers' certificates in a ConfigMap
	// (TrustBundleConfigMap, key TrustBundleKey) in the downstream
	// namespaces TrustBundleNamespaces selects (label selector; "" = all).
	TrustBundles                                                bool
	TrustBundleConfigMap, TrustBundleKey, TrustBundleNamespaces string
	// RotationSoak, RotationPause, RotationDeadline and RotationGrace time a
	// CA rotation (internal/rotation).
	RotationSoak, RotationPause, RotationDeadline, RotationGrace time.Duration
	// IssuanceRate is certificates per second for the whole hub (0: no
	// limit); each replica admits its share, by the clusters it owns.
	IssuanceRate float64
	// MaxBudgetDelay is the fraction of a certificate's remaining life at
	// renewal it may wait for the budget (certsync.DefaultMaxBudgetDelay).
	MaxBudgetDelay float64
	// RenewalJitter renews earlier by up to this fraction of the renewal
	// window, fixed per Certificate (0: cert-manager's renewal time).
	RenewalJitter float64
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
		RotationSoak:               5 * time.Minute,
		RotationPause:              5 * time.Minute,
		RotationDeadline:           30 * time.Minute,
		RotationGrace:              10 * time.Minute,
		IngressShim:                true,
		TrustBundles:               true,
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
		ACME:                       ACMEOptions{PropagationTimeout: acme.DefaultPropagationTimeout, OrderHold: acme.DefaultHoldDuration, RenewalInfoInterval: acme.DefaultRenewalInfoInterval},
		Shard: ShardOptions{
			LeaseDuration: shard.DefaultLeaseDuration,
			RenewDeadline: shard.DefaultRenewDeadline,
			RetryPeriod:   shard.DefaultRetryPeriod,
			RenewInterval: shard.DefaultRenewInterval,
			MaxClockSkew:  shard.DefaultMaxClockSkew,
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

// AddFlags binds the options to flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster, then $KUBECONFIG)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Hub namespace for certhub's own objects (ClusterIssuer CA Secrets, Leases)")
	fs.StringVar(&o.ClusterSecretNamespace, "cluster-secret-namespace", o.ClusterSecretNamespace, "Hub namespace holding Argo CD cluster Secrets")
	fs.StringVar(&o.KubeconfigDir, "kubeconfig-dir", o.KubeconfigDir, "Serve one cluster per kubeconfig file in this directory (named after the file) instead of Argo CD cluster Secrets")
	fs.StringVar(&o.ClusterSelector, "cluster-selector", o.ClusterSelector, "Serve only cluster Secrets whose labels match this selector, e.g. certhub.io/enabled=true (default: all)")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address of the Prometheus metrics endpoint; 0 disables it")
	fs.StringVar(&o.HealthProbeAddr, "health-probe-bind-address", o.HealthProbeAddr, "Address of /healthz and /readyz; 0 disables them")
	fs.BoolVar(&o.DownstreamCompression, "downstream-compression", o.DownstreamCompression, "Ask downstream API servers for gzip-compressed responses (off: each open watch would hold a ~40 KiB gzip reader; turn on for clusters behind thin links)")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, "Address of net/http/pprof (/debug/pprof/); empty or 0, the default, disables it")
	fs.StringVar(&o.Identity, "identity", "", "Name of this replica in what it writes (default: $POD_NAME, then the hostname)")
	fs.DurationVar(&o.IssuerRetryInterval, "issuer-retry-interval", o.IssuerRetryInterval, "How soon a Certificate whose issuer is missing or not ready is tried again")
	fs.StringVar(&o.TrustBundleConfigMap, "trust-bundle-configmap", o.TrustBundleConfigMap, "Name of the trust bundle ConfigMap downstream")
	fs.StringVar(&o.TrustBundleKey, "trust-bundle-key", o.TrustBundleKey, "Key of the PEM bundle in the trust bundle ConfigMap")
	fs.StringVar(&o.TrustBundleNamespaces, "trust-bundle-namespaces", o.TrustBundleNamespaces, "Label selector of the downstream namespaces that get the trust bundle (empty: all)")
	fs.StringVar(&o.DefaultIssuerName, "default-issuer-name", o.DefaultIssuerName, "Issuer of Certificates for Ingresses annotated only with an auto annotation (kubernetes.io/tls-acme: \"true\")")
	fs.StringVar(&o.DefaultIssuerKind, "default-issuer-kind", o.DefaultIssuerKind, "Kind of --default-issuer-name")
	fs.StringVar(&o.DefaultIssuerGroup, "default-issuer-group", o.DefaultIssuerGroup, "Group of --default-issuer-name")
	fs.StringSliceVar(&o.AutoCertificateAnnotations, "auto-certificate-annotations", o.AutoCertificateAnnotations, "Ingress annotations that, set to \"true\", ask for a Certificate from the default issuer")
	fs.DurationVar(&o.RotationSoak, "rotation-soak", o.RotationSoak, "CA rotation: how long the new CA sits in every trust bundle before the first wave re-issues")
	fs.DurationVar(&o.RotationPause, "rotation-pause", o.RotationPause, "CA rotation: pause between waves")
	fs.DurationVar(&o.RotationDeadline, "rotation-deadline", o.RotationDeadline, "CA rotation: a wave whose Certificates are not all re-issued and Ready by then halts the rotation (resume: annotate certhub.io/rotation-resume)")
	fs.DurationVar(&o.RotationGrace, "rotation-grace", o.RotationGrace, "CA rotation: after the last wave, how long the old CA stays in the trust bundles")
	fs.Float64Var(&o.IssuanceRate, "issuance-rate", o.IssuanceRate, "Certificates issued per second by the whole hub (0: no limit); each replica admits its share, by the clusters it owns, shared fairly by cluster (weight: label certhub.io/issuance-weight on its Secret) and namespace, nearest expiry first within a namespace")
	fs.Float64Var(&o.MaxBudgetDelay, "max-budget-delay", o.MaxBudgetDelay, "Fraction of a certificate's remaining life at its renewal time it may wait for --issuance-rate; past it, it is issued regardless")
	fs.Float64Var(&o.RenewalJitter, "renewal-jitter", o.RenewalJitter, "Renew each certificate earlier than cert-manager would by up to this fraction of its renewal window (renewal time to expiry), fixed per Certificate, so Certificates issued together do not renew together (0: exactly cert-manager's time)")
	fs.IntVar(&o.Workers, "concurrent-workers", o.Workers, "Workers reconciling Certificates, shared by all clusters in turn")
	fs.IntVar(&o.WorkersPerCluster, "concurrent-workers-per-cluster", o.WorkersPerCluster, "Most workers one cluster occupies at once, so a hung API server leaves the rest to the others (0: half of --concurrent-workers, rounded up)")
	fs.DurationVar(&o.ReconcileTimeout, "reconcile-timeout", o.ReconcileTimeout, "Deadline of one Certificate reconcile (above the slowest key generation)")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "Deadline of every downstream API request but watches, response body included: a hung or slow cluster cannot hold a worker longer")
	fs.IntVar(&o.LoopMaxIssuances, "loop-max-issuances", o.LoopMaxIssuances, "Loop guard: a Certificate issued more often than this for one spec within --loop-window (no spec change, Secret deletion or manual trigger between) is paused with Ready=False/IssuanceLoopDetected and retried on back-off")
	fs.DurationVar(&o.LoopWindow, "loop-window", o.LoopWindow, "Loop guard: the window --loop-max-issuances counts in")
	fs.StringSliceVar(&o.ExecPlugins, "exec-plugin-allowlist", o.ExecPlugins, "Exec credential plugins cluster Secrets may make the hub run (execProviderConfig.command; awsAuthConfig runs argocd-k8s-auth), matched on the resolved path; empty: none")
	fs.BoolVar(&o.AllowPlainHTTPClusters, "allow-plain-http-clusters", false, "Serve registrations whose server is http:// (their credentials cross the network in clear)")
	fs.BoolVar(&o.AllowLinkLocalClusters, "allow-link-local-clusters", false, "Connect to link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10, fd00:ec2::254), refused by default")
	fs.StringVar(&o.DefaultPolicy, "default-policy", o.DefaultPolicy, "Issuance policy for Certificates no IssuancePolicy selects: allow or deny (the shipped kustomize base uses deny)")
	fs.StringSliceVar(&o.ACME.DNS01Nameservers, "acme-dns01-recursive-nameservers", o.ACME.DNS01Nameservers, "ACME DNS-01: nameservers (host:port) asked for zones and, with --acme-dns01-recursive-nameservers-only, for the TXT records' propagation (default: the system's resolvers)")
	fs.BoolVar(&o.ACME.DNS01NameserversOnly, "acme-dns01-recursive-nameservers-only", o.ACME.DNS01NameserversOnly, "ACME DNS-01: check propagation on --acme-dns01-recursive-nameservers only, not on each zone's authoritative nameservers (port 53)")
	fs.DurationVar(&o.ACME.DNS01Settle, "acme-dns01-settle-delay", o.ACME.DNS01Settle, "ACME DNS-01: extra wait after the TXT records are served before the CA is asked to validate (0: none; for DNS services whose public answers lag behind their own nameservers)")
	fs.DurationVar(&o.ACME.PropagationTimeout, "acme-dns01-propagation-timeout", o.ACME.PropagationTimeout, "ACME DNS-01: an order whose TXT records are not served within this fails")
	fs.DurationVar(&o.ACME.RenewalInfoInterval, "acme-renewal-info-interval", o.ACME.RenewalInfoInterval, "ACME: how often, at the most, the CA is asked for each issued certificate's renewal window (ARI, RFC 9773; sooner when its Retry-After says so); a window moved earlier renews early. Negative: ARI off")
	fs.DurationVar(&o.ACME.OrderHold, "acme-order-hold", o.ACME.OrderHold, "ACME: how long a replica's claim on an order lasts unrenewed; after a replica's death another resumes its orders this long after their last step")
	fs.StringVar(&o.Coordinator, "shard-coordinator", o.Coordinator, "Who writes which cluster: certhub (shard over all replicas), upstream (multicluster-runtime's experimental sharded coordinator, for comparison) or none (this replica engages every cluster; single replica only)")
	fs.DurationVar(&o.Shard.LeaseDuration, "shard-lease-duration", o.Shard.LeaseDuration, "Peer and fence Lease duration: how long an unrenewed claim stands, as observed by the other replicas")
	fs.DurationVar(&o.Shard.RenewDeadline, "shard-renew-deadline", o.Shard.RenewDeadline, "A replica that could not renew a fence for this long stops writing to its clusters (< --shard-lease-duration)")
	fs.DurationVar(&o.Shard.RetryPeriod, "shard-retry-period", o.Shard.RetryPeriod, "Decision loop tick and retry interval (--shard-renew-deadline > 1.2 × this)")
	fs.DurationVar(&o.Shard.RenewInterval, "shard-renew-interval", o.Shard.RenewInterval, "How often held Leases are renewed (< --shard-renew-deadline)")
	fs.DurationVar(&o.Shard.MaxClockSkew, "shard-max-clock-skew", o.Shard.MaxClockSkew, "How far replica clocks may differ: a Lease not renewed for --shard-lease-duration + this (by its renewTime) is expired even when first seen; negative: judge only by when this replica saw it change")
	fs.IntVar(&o.Shard.Buckets, "shard-buckets", o.Shard.Buckets, "Hash clusters into this many fence Leases instead of one per cluster (0: one per cluster); same on every replica")
	fs.IntVar(&o.Shard.Standby, "shard-standby", o.Shard.Standby, "Clusters this replica keeps warm besides those it owns (connected and cached, not written to): the ones it would take over first, so their failover needs no connection or cache sync")
	fs.Float64Var(&o.Shard.Weight, "shard-weight", o.Shard.Weight, "Relative share of clusters this replica takes")
	fs.StringVar(&o.Controllers, "controllers", o.Controllers, "Controllers to run, as cert-manager's flag: \"*\" is every one, \"-name\" turns one off (e.g. *,-gateway-shim); optional ones: "+strings.Join(optionalControllers, ", "))
	addDeprecatedFlags(fs, o)
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
	if o.RotationSoak <= 0 || o.RotationPause <= 0 || o.RotationDeadline <= 0 || o.RotationGrace <= 0 {
		errs = append(errs, fmt.Errorf("--rotation-soak, --rotation-pause, --rotation-deadline and --rotation-grace must be positive"))
	}
	if o.RenewalJitter < 0 || o.RenewalJitter > 1 {
		errs = append(errs, fmt.Errorf("--renewal-jitter (%v) must be in [0, 1]", o.RenewalJitter))
	}
	if o.IssuanceRate < 0 || o.MaxBudgetDelay <= 0 || o.MaxBudgetDelay > 1 {
		errs = append(errs, fmt.Errorf("--issuance-rate (%v) must not be negative and --max-budget-delay (%v) must be in (0, 1]", o.IssuanceRate, o.MaxBudgetDelay))
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
		errs = append(errs, fmt.Errorf("--coordinator %q must be one of certhub, upstream, none", o.Coordinator))
	}
	return errors.Join(errs...)
}
