package app

import (
	"context"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/issuance"
)

// newScheme returns the types certhub reads and writes, in the hub and downstream.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := cmapi.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Run wires the hub manager against cfg and blocks until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return fmt.Errorf("failed to build scheme: %w", err)
	}

	provider, err := inventory.New(inventory.Options{
		Namespace:      o.ClusterSecretNamespace,
		Scheme:         scheme,
		ClusterOptions: []cluster.Option{certsync.CacheOptions()},
	})
	if err != nil {
		return err
	}

	// The hub caches Secrets only in the two namespaces certhub reads.
	secretNamespaces := map[string]cache.Config{o.Namespace: {}, o.ClusterSecretNamespace: {}}
	mgr, err := mcmanager.New(cfg, provider, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress: o.HealthProbeAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: secretNamespaces},
		}},
	})
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	if err := provider.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up inventory: %w", err)
	}
	resolver, err := issuance.New(issuance.Options{Client: mgr.GetLocalManager().GetClient(), Namespace: o.Namespace})
	if err != nil {
		return err
	}
	if err := certsync.SetupWithManager(mgr, certsync.Options{Issuers: resolver, Identity: o.Identity}); err != nil {
		return fmt.Errorf("failed to set up certsync: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}
