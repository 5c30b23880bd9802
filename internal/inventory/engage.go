package inventory

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// engaged is a cluster name taken by one source: a valid registration,
// connecting (cancel set, cl nil), connected (both set), or neither (the
// gate does not want it here, or the last attempt failed).
type engaged struct {
	cl     cluster.Cluster
	cancel context.CancelFunc
	hash   string
	source string // the Secret ("<ns>/<name>") or file ("file:<path>") it came from
	labels map[string]string
	scoped bool // a namespace-scoped registration
	// namespaces are a namespace-scoped registration's namespaces.
	namespaces []string
}

// DuplicateError says another source already registers (or is connecting) the cluster name.
type DuplicateError struct {
	Name multicluster.ClusterName
	// ServedFrom is the source that holds the name: "<ns>/<secret>" or "file:<path>".
	ServedFrom string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("cluster name %q is already registered by %s", e.Name, e.ServedFrom)
}

// setLabels records the labels of the Secret source that serves name, and
// calls OnLabelsChanged when they changed.
func (p *Provider) setLabels(source string, name multicluster.ClusterName, l map[string]string) {
	p.mu.Lock()
	e, ok := p.clusters[name]
	changed := ok && e.source == source && !maps.Equal(e.labels, l)
	if changed {
		e.labels = maps.Clone(l)
	}
	p.mu.Unlock()
	if changed && p.opts.OnLabelsChanged != nil {
		p.opts.OnLabelsChanged(name)
	}
}

// engage is the one engage path of both sources (cluster Secrets and
// kubeconfig files). It records the registration under the lock — so a
// second source naming the same cluster gets a *DuplicateError at once
// instead of racing the first —, registers it with the gate, and connects
// it only if the gate wants it here (disconnecting it if the gate no longer
// does). A source whose connection data changed is disconnected first.
// changed is true when this call connected the cluster.
//
//	lock: name held by another source? ─▶ DuplicateError
//	      new or changed data?  ─▶ record it, drop this source's previous cluster
//	      wanted, not connected ─▶ reserve the connection (cancel set)
//	      unwanted, connected   ─▶ take the connection away
//	unlock ─▶ gate.Register ─▶ disconnect, or connect (probe, cache sync; up to ConnectTimeout)
//	lock: still our reservation? ─▶ serve (cl set) ─▶ aware.Engage
func (p *Provider) engage(source string, c *Cluster) (changed bool, err error) {
	name := multicluster.ClusterName(c.Name)
	p.mu.Lock()
	if other, ok := p.clusters[name]; ok && other.source != source {
		p.mu.Unlock()
		return false, &DuplicateError{Name: name, ServedFrom: other.source}
	}
	var stale *engaged
	staleName := multicluster.ClusterName("")
	e := p.clusters[name]
	if prev, ok := p.bySource[source]; !ok || prev != name || e == nil || e.hash != c.Hash {
		if ok {
			stale, staleName = p.clusters[prev], prev
			delete(p.clusters, prev)
		}
		e = &engaged{hash: c.Hash, source: source, labels: maps.Clone(c.Labels), scoped: len(c.Namespaces) > 0,
			namespaces: slices.Clone(c.Namespaces)}
		p.clusters[name] = e
		p.bySource[source] = name
	}
	p.mu.Unlock()
	if stale != nil {
		p.disconnect(stale)
		if staleName != name && p.opts.Connect != nil {
			p.opts.Connect.Unregister(staleName)
		}
		p.log.Info("cluster connection data changed; re-engaging", "cluster", name)
	}
	if p.opts.Connect != nil {
		p.opts.Connect.Register(name)
	}

	want := p.wanted(name)
	p.mu.Lock()
	if p.clusters[name] != e { // removed meanwhile
		p.mu.Unlock()
		return false, nil
	}
	if !want {
		cancel := e.cancel
		e.cl, e.cancel = nil, nil
		p.mu.Unlock()
		if cancel != nil {
			cancel()
			p.log.Info("cluster disconnected: another replica owns it", "cluster", name)
		}
		p.metrics.forgetCluster(string(name)) // the owner reports it; after cancel, so no request in flight counts again
		return false, nil
	}
	if e.cancel != nil { // connected, or connecting on another path
		p.mu.Unlock()
		return false, nil
	}
	clusterCtx, cancel := context.WithCancel(p.ctx)
	e.cancel = cancel // remove() during the connect stops it
	p.mu.Unlock()
	undo := func() {
		cancel()
		p.mu.Lock()
		if e.cl == nil && p.clusters[name] == e {
			e.cancel = nil
		}
		p.mu.Unlock()
	}

	cl, err := p.connect(clusterCtx, p.log.WithValues("cluster", name), c)
	if err != nil {
		undo()
		return false, err
	}
	p.mu.Lock()
	ours := p.clusters[name] == e && e.cancel != nil && clusterCtx.Err() == nil
	if ours {
		e.cl = cl
	}
	p.mu.Unlock()
	if !ours { // removed or disconnected while connecting
		cancel()
		return false, nil
	}
	p.metrics.connected.Inc()
	context.AfterFunc(clusterCtx, p.metrics.connected.Dec)
	if err := p.aware.Engage(clusterCtx, name, cl); err != nil {
		p.remove(source)
		return false, fmt.Errorf("failed to engage cluster %q: %w", name, err)
	}
	return true, nil
}

// disconnect stops a cluster's connection and cache (dial closes its idle
// connections when the cluster's context ends).
func (p *Provider) disconnect(e *engaged) {
	if e.cancel != nil {
		e.cancel()
	}
}

// remove disengages the cluster served from source, if any, and reports its name.
func (p *Provider) remove(source string) (multicluster.ClusterName, bool) {
	p.mu.Lock()
	name, ok := p.bySource[source]
	var e *engaged
	if ok {
		e = p.clusters[name]
		delete(p.bySource, source)
		delete(p.clusters, name)
	}
	p.mu.Unlock()
	if e != nil {
		p.disconnect(e)
	}
	if ok && p.opts.Connect != nil {
		p.opts.Connect.Unregister(name)
	}
	return name, ok
}
