package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	failed := map[string]string{} // path → last error, to log each problem once
	for first := true; ; first = false {
		p.scanDir(dir, failed)
		if first && p.opts.Connect != nil {
			p.opts.Connect.RegistrationsSynced() // every file has been registered or found invalid
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.opts.DirResync):
		case <-p.wakeDir: // the gate changed its mind about a cluster
		}
	}
}

// scanDir is one pass of watchDir. failed remembers each file's last error
// across passes, so every problem is logged once.
func (p *Provider) scanDir(dir string, failed map[string]string) {
	log := p.log.WithValues("kubeconfigDir", dir)
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
		changed, err := p.engage(source, c)
		var dup *DuplicateError
		switch {
		case errors.As(err, &dup):
			// a.yaml and a.yml both name cluster "a": the first one found serves it.
			p.metrics.invalid.WithLabelValues(source, ReasonDuplicateClusterName).Set(1)
			if failed[path] != err.Error() {
				clog.Error(nil, "duplicate cluster name; ignoring this file", "servedFrom", dup.ServedFrom)
				failed[path] = err.Error()
			}
			continue
		case err != nil:
			p.metrics.reachable.WithLabelValues(name).Set(0)
			if failed[path] != err.Error() {
				clog.Error(err, "failed to engage cluster")
				failed[path] = err.Error()
			}
			continue
		case !changed:
			continue
		}
		delete(failed, path)
		p.metrics.reachable.WithLabelValues(name).Set(1)
		clog.Info("cluster connected", "server", redactServer(c.Server))
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
			p.metrics.forgetCluster(string(name))
			log.Info("cluster disengaged: its kubeconfig is gone", "cluster", name)
		}
	}
}
