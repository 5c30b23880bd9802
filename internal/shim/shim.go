package shim

import (
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmcontroller "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/go-logr/logr"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/writegate"
)

const (
	// FieldManager is the field manager of the Certificates the shims write
	// (cert-manager's shim uses "cert-manager-certificate-shim").
	FieldManager = "certhub-certificate-shim"
	// DefaultAutoCertificateAnnotation asks for a Certificate from the
	// default issuer, on Ingresses (cert-manager's default).
	DefaultAutoCertificateAnnotation = "kubernetes.io/tls-acme"
	// DefaultIssuerKind completes --default-issuer-name: issuers live in the
	// hub as ClusterIssuers (cert-manager's default is Issuer).
	DefaultIssuerKind = cmapi.ClusterIssuerKind
	// DefaultIssuerGroup is cert-manager's.
	DefaultIssuerGroup = "cert-manager.io"
)

// Informers are the downstream objects the enabled shims watch in every
// cluster (Gateways, served only in some, start when the shim engages).
func Informers(o Options) []client.Object {
	if !o.Ingress {
		return nil
	}
	return []client.Object{&networkingv1.Ingress{}, certificateObject()}
}

// Options configure the shims.
type Options struct {
	// Ingress enables the Ingress shim. The zero Options enable nothing;
	// the app enables both by default, as cert-manager does.
	Ingress bool
	// Gateway enables the Gateway shim in clusters serving Gateway API v1 Gateways.
	Gateway bool
	// DefaultIssuerName, Kind and Group serve Ingresses carrying only an
	// auto annotation (kubernetes.io/tls-acme: "true"). Kind and Group
	// default to DefaultIssuerKind and DefaultIssuerGroup.
	DefaultIssuerName, DefaultIssuerKind, DefaultIssuerGroup string
	// AutoCertificateAnnotations default to [DefaultAutoCertificateAnnotation].
	AutoCertificateAnnotations []string
	// Fence gates every write and bounds it by the owner's deadline. Nil:
	// this replica writes everywhere.
	Fence fence.Fence
	// MaxConcurrentReconciles per shim. Defaults to 2.
	MaxConcurrentReconciles int
	// Changes, when set, registers a function called with each cluster
	// whose Fence answer may have changed (a mode change, cert-manager seen
	// gone): its Ingresses and Gateways are synced again, as those skipped
	// while it said no are not otherwise.
	Changes func(fn func(multicluster.ClusterName))
}

func (o *Options) defaults() {
	if o.DefaultIssuerKind == "" {
		o.DefaultIssuerKind = DefaultIssuerKind
	}
	if o.DefaultIssuerGroup == "" {
		o.DefaultIssuerGroup = DefaultIssuerGroup
	}
	if o.AutoCertificateAnnotations == nil {
		o.AutoCertificateAnnotations = []string{DefaultAutoCertificateAnnotation}
	}
	if o.MaxConcurrentReconciles == 0 {
		o.MaxConcurrentReconciles = 2
	}
}

// CertManagerDefaults are the options cert-manager's SyncFnFor takes.
func (o Options) CertManagerDefaults() cmcontroller.IngressShimOptions {
	o.defaults()
	return cmcontroller.IngressShimOptions{DefaultIssuerName: o.DefaultIssuerName, DefaultIssuerKind: o.DefaultIssuerKind,
		DefaultIssuerGroup: o.DefaultIssuerGroup, DefaultAutoCertificateAnnotations: o.AutoCertificateAnnotations}
}

var gatewayGK = schema.GroupKind{Group: gwapi.GroupName, Kind: "Gateway"}

// servesGateways engages the Gateway shim with a cluster only if it serves
// gateway.networking.k8s.io/v1 Gateways (decided when the cluster is
// engaged; CRDs installed later take effect at the next engagement).
func servesGateways(log logr.Logger) mcbuilder.ClusterFilterFunc {
	return func(name multicluster.ClusterName, cl cluster.Cluster) bool {
		_, err := cl.GetRESTMapper().RESTMapping(gatewayGK, gwapi.GroupVersion.Version)
		if err != nil {
			log.V(1).Info("no Gateway API v1 Gateways served; the Gateway shim skips the cluster", "cluster", name, "reason", err.Error())
		}
		return err == nil
	}
}

// Shim is the enabled shims, before they are added to a manager.
type Shim struct{ opts Options }

// New applies opts' defaults.
func New(opts Options) (*Shim, error) {
	opts.defaults()
	return &Shim{opts: opts}, nil
}

// SetupWithManager registers the enabled shims with mgr.
func (sh *Shim) SetupWithManager(mgr mcmanager.Manager) error {
	opts := sh.opts
	base := mgr.GetLogger().WithName("shim")
	type shimKind struct {
		name    string
		enabled bool
		object  func() client.Object
		list    func() client.ObjectList
		kind    string
		filter  mcbuilder.ClusterFilterFunc
	}
	for _, k := range []shimKind{
		{name: "ingress-shim", enabled: opts.Ingress, object: func() client.Object { return &networkingv1.Ingress{} },
			list: func() client.ObjectList { return &networkingv1.IngressList{} }, kind: "Ingress"},
		{name: "gateway-shim", enabled: opts.Gateway, object: func() client.Object { return &gwapi.Gateway{} },
			list: func() client.ObjectList { return &gwapi.GatewayList{} }, kind: "Gateway", filter: servesGateways(base)},
	} {
		if !k.enabled {
			continue
		}
		r := &reconciler{getCluster: mgr.GetCluster, opts: opts, object: k.object, kind: k.kind, clients: map[multicluster.ClusterName]*clusterClients{}}
		log := base.WithName(k.name)
		var engage []mcbuilder.ForOption
		var watchEngage []mcbuilder.WatchesOption
		if k.filter != nil {
			engage = append(engage, mcbuilder.WithClusterFilter(k.filter))
			watchEngage = append(watchEngage, mcbuilder.WithClusterFilter(k.filter))
		}
		err := mcbuilder.ControllerManagedBy(mgr).
			Named(k.name).
			For(k.object(), engage...).
			// A shim Certificate edited or deleted by someone: its owner is synced again.
			Watches(certificateObject(), mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](ownedBy(k.kind)), watchEngage...).
			WatchesRawSource(writegate.RequeueSource(opts.Changes, mgr.GetCluster, k.list, nil, log)). // skipped while the gate said no
			WithOptions(controller.TypedOptions[mcreconcile.Request]{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
			WithLogConstructor(func(req *mcreconcile.Request) logr.Logger {
				if req == nil {
					return log
				}
				return log.WithValues("cluster", req.ClusterName, "namespace", req.Namespace, "name", req.Name)
			}).
			Complete(fence.RetryPaused(opts.Fence, r)) // a late fence renewal: what ran meanwhile is tried again
		if err != nil {
			return fmt.Errorf("failed to set up the %s: %w", k.name, err)
		}
	}
	return nil
}
