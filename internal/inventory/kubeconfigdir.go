package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// DefaultDirResync is how often a kubeconfig directory is rescanned.
const DefaultDirResync = 5 * time.Second

// ParseKubeconfig turns one kubeconfig file (its current context) into a
// Cluster named name.
func ParseKubeconfig(name string, raw []byte) (*Cluster, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, &FieldError{Field: "kubeconfig", Reason: "cannot be loaded", Err: err}
	}
	sum := sha256.Sum256(raw)
	return &Cluster{Name: name, Server: strings.TrimRight(cfg.Host, "/"), Config: cfg, Hash: hex.EncodeToString(sum[:])}, nil
}

// watchDir serves one cluster per kubeconfig file in dir, named after the
// file without its extension: added files are engaged, changed ones
// re-engaged, removed ones disengaged (nothing downstream is deleted). Bad
// files are logged with `cluster` and retried on the next scan.
func (p *Provider) watchDir(ctx context.Context, dir string) {
	log := p.log.WithValues("kubeconfigDir", dir)
	failed := map[string]string{} // path → last error, to log each problem once
	for {
		entries, err := os.ReadDir(dir)
		if err != nil {
			log.Error(err, "cannot read kubeconfig directory")
		}
		seen := map[string]bool{}
		for _, e := range entries {
			if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			source := "file:" + path
			seen[source] = true
			name := strings.TrimSuffix(e.Name(), filepath.Ext(e.Name()))
			clog := log.WithValues("cluster", name, "file", path)
			raw, err := os.ReadFile(path)
			var c *Cluster
			if err == nil {
				c, err = ParseKubeconfig(name, raw)
			}
			if err != nil {
				if failed[path] != err.Error() {
					clog.Error(err, "invalid kubeconfig; keeping any running connection")
					failed[path] = err.Error()
				}
				p.metrics.invalid.WithLabelValues(source, ReasonInvalidClusterSecret).Set(1)
				continue
			}
			p.metrics.invalid.DeletePartialMatch(map[string]string{"secret": source})
			p.mu.Lock()
			prev, had := p.bySource[source]
			unchanged := had && p.clusters[prev].hash == c.Hash
			p.mu.Unlock()
			if unchanged {
				continue
			}
			if had {
				p.remove(source)
				clog.Info("kubeconfig changed; re-engaging")
			}
			if err := p.engage(ctx, p.log.WithValues("cluster", name), source, c); err != nil {
				p.metrics.reachable.WithLabelValues(name).Set(0)
				if failed[path] != err.Error() {
					clog.Error(err, "failed to engage cluster")
					failed[path] = err.Error()
				}
				continue
			}
			delete(failed, path)
			p.metrics.reachable.WithLabelValues(name).Set(1)
			clog.Info("cluster connected", "server", c.Server)
		}
		p.mu.Lock()
		var gone []string
		for source := range p.bySource {
			if strings.HasPrefix(source, "file:") && !seen[source] {
				gone = append(gone, source)
			}
		}
		p.mu.Unlock()
		for _, source := range gone {
			if name, ok := p.remove(source); ok {
				p.metrics.reachable.DeleteLabelValues(string(name))
				log.Info("cluster disengaged: its kubeconfig is gone", "cluster", name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.opts.DirResync):
		}
	}
}
