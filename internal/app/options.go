package app

import (
	"errors"
	"os"

	"github.com/spf13/pflag"
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
)

// Options are the controller's settings, filled from flags by AddFlags.
type Options struct {
	// Kubeconfig points at the hub cluster. Empty means in-cluster config, then $KUBECONFIG.
	Kubeconfig string
	// Namespace holds certhub's own objects in the hub. Defaults to DefaultNamespace.
	Namespace string
	// ClusterSecretNamespace holds the Argo CD cluster Secrets. Defaults to DefaultClusterSecretNamespace.
	ClusterSecretNamespace string
	// MetricsAddr defaults to DefaultMetricsAddr; "0" disables the metrics server.
	MetricsAddr string
	// HealthProbeAddr defaults to DefaultHealthProbeAddr; "0" disables probes.
	HealthProbeAddr string
	// Identity names this replica in what it writes. Defaults to $POD_NAME, then the hostname.
	Identity string
}

// NewOptions returns Options with every default applied.
func NewOptions() *Options {
	o := &Options{
		Namespace:              DefaultNamespace,
		ClusterSecretNamespace: DefaultClusterSecretNamespace,
		MetricsAddr:            DefaultMetricsAddr,
		HealthProbeAddr:        DefaultHealthProbeAddr,
		Identity:               os.Getenv("POD_NAME"),
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	return o
}

// AddFlags binds the options to flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster, then $KUBECONFIG)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Hub namespace for certhub's own objects (ClusterIssuer CA Secrets, Leases)")
	fs.StringVar(&o.ClusterSecretNamespace, "cluster-secret-namespace", o.ClusterSecretNamespace, "Hub namespace holding Argo CD cluster Secrets")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address of the Prometheus metrics endpoint; 0 disables it")
	fs.StringVar(&o.HealthProbeAddr, "health-probe-bind-address", o.HealthProbeAddr, "Address of /healthz and /readyz; 0 disables them")
	fs.StringVar(&o.Identity, "identity", o.Identity, "Name of this replica in what it writes (default: $POD_NAME, then hostname)")
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
	return errors.Join(errs...)
}
