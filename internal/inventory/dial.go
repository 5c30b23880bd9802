package inventory

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// dial connects to the cluster and starts its cache; the cache stops with
// ctx. log becomes the cluster's own logger.
func (p *Provider) dial(ctx context.Context, log logr.Logger, c *Cluster) (cluster.Cluster, error) {
	if err := checkServer(c.Server, p.opts.AllowPlainHTTP, p.opts.AllowLinkLocal); err != nil {
		return nil, err // kubeconfig files; Secrets were checked when parsed
	}
	if err := checkExec(c.Config, p.opts.ExecPlugins); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = p.opts.QPS, p.opts.Burst
	cfg.DisableCompression = !p.opts.Compression
	if p.opts.ExecShim != "" {
		shimExec(cfg, p.opts.ExecShim, p.opts.RequestTimeout)
		restrictExec(cfg, []string{p.opts.ExecShim}) // the command was checked above; only the shim runs it
	} else {
		restrictExec(cfg, p.opts.ExecPlugins)
	}
	if !p.opts.AllowLinkLocal && cfg.Dial == nil {
		cfg.Dial = guardedDialer(p.opts.ConnectTimeout)
	}
	withRequestTimeout(cfg, p.opts.RequestTimeout)
	p.metrics.instrument(ctx, c.Name, cfg)
	// One HTTP client for the probe and the cluster's clients and caches:
	// one TLS handshake per connect, not one per transport.
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to build the HTTP client of %s: %w", c.Name, err)
	}
	if err := withinDeadline(ctx, p.opts.ConnectTimeout+time.Second, "the first request to "+c.Name, func() error { return p.probe(ctx, cfg, httpClient, c) }); err != nil {
		httpClient.CloseIdleConnections()
		return nil, shimTimedOut(err, c, p.opts.RequestTimeout)
	}
	opts := append([]cluster.Option{func(o *cluster.Options) {
		o.HTTPClient = httpClient
		o.Scheme = p.opts.Scheme
		o.Logger = log
		o.MapperProvider = leanMapper
		// Nothing the hub does downstream reads managedFields (Secrets are
		// applied, status is updated); they are a good part of a cached object.
		o.Cache.DefaultTransform = cache.TransformStripManagedFields()
	}}, p.opts.ClusterOptions...)
	if len(c.Namespaces) > 0 {
		// A namespace-scoped registration: watch (and so write) only there, so
		// namespaced RBAC downstream is enough.
		opts = append(opts, func(o *cluster.Options) {
			o.Cache.DefaultNamespaces = map[string]cache.Config{}
			for _, ns := range c.Namespaces {
				o.Cache.DefaultNamespaces[ns] = cache.Config{}
			}
		})
	}
	base, err := cluster.New(cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("failed to create cluster client: %w", err)
	}
	cl := &downstreamCluster{Cluster: base, cache: newFanoutCache(ctx, base.GetCache(), base.GetScheme()), events: newClusterEvents(ctx, base.GetClient(), p.opts.Scheme, log, p.opts.RequestTimeout)}
	p.mu.Lock()
	indexers := append([]index(nil), p.indexers...)
	p.mu.Unlock()
	for _, idx := range indexers {
		if err := cl.GetFieldIndexer().IndexField(ctx, idx.obj, idx.field, idx.extract); err != nil {
			return nil, fmt.Errorf("failed to index field %q: %w", idx.field, err)
		}
	}
	go func() {
		if err := cl.Start(ctx); err != nil {
			log.Error(err, "cluster cache stopped")
		}
		// At once, not at the transport's idle timeout: a disconnected
		// cluster keeps no connection open.
		cl.GetHTTPClient().CloseIdleConnections()
	}()
	if p.opts.Informers != nil {
		for _, obj := range p.opts.Informers(len(c.Namespaces) > 0) {
			if _, err := cl.GetCache().GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err != nil {
				return nil, fmt.Errorf("failed to start the informer of %T: %w", obj, err)
			}
		}
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, p.opts.ConnectTimeout)
	defer syncCancel()
	if !cl.GetCache().WaitForCacheSync(syncCtx) {
		return nil, fmt.Errorf("timed out after %s waiting for the cache of cluster %q", p.opts.ConnectTimeout, c.Name)
	}
	return cl, nil
}

// probe makes one cheap request that needs what the hub needs — listing
// Certificates (in the first registered namespace, if scoped) — so unreachable
// servers, bad or anonymous credentials, missing RBAC and missing CRDs are
// reported before anything is engaged.
func (p *Provider) probe(ctx context.Context, cfg *rest.Config, httpClient *http.Client, c *Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ConnectTimeout)
	defer cancel()
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return fmt.Errorf("failed to build client: %w", err)
	}
	path := "/apis/cert-manager.io/v1/certificates"
	if len(c.Namespaces) > 0 {
		path = "/apis/cert-manager.io/v1/namespaces/" + c.Namespaces[0] + "/certificates"
	}
	err = dc.RESTClient().Get().AbsPath(path).Param("limit", "1").Do(ctx).Error()
	host := redactServer(cfg.Host)
	switch {
	case err == nil:
		return nil
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("API server %s refused the credentials (401 Unauthorized): %w", host, remoteError(err))
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the credentials may not list Certificates at %s (403 Forbidden; see kustomize/downstream for the RBAC): %w", host, remoteError(err))
	case apierrors.IsNotFound(err):
		return fmt.Errorf("cert-manager's CRDs are not installed at %s: %w", host, remoteError(err))
	default:
		return fmt.Errorf("failed to reach API server %s: %w", host, remoteError(err))
	}
}
