package shard

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names; every one carries the certhub_shard_ prefix.
const (
	metricOwned         = "certhub_shard_owned_clusters"
	metricClusterOwned  = "certhub_shard_cluster_owned"
	metricHandoffs      = "certhub_shard_handoffs_total"
	metricFenceFailures = "certhub_shard_fence_failures_total"
	metricUnowned       = "certhub_shard_unowned_clusters"
	metricPeers         = "certhub_shard_peers"
	metricStandby       = "certhub_shard_standby_clusters"
	metricLayout        = "certhub_shard_layout_conflict"
)

type shardMetrics struct {
	owned          prometheus.Gauge
	clusterOwned   *prometheus.GaugeVec
	handoffs       prometheus.Counter
	fenceFailures  *prometheus.CounterVec
	unowned        prometheus.Gauge
	peers          prometheus.Gauge
	standby        prometheus.Gauge
	layoutConflict prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*shardMetrics, error) {
	m := &shardMetrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricOwned,
			Help: "Downstream clusters this replica owns and has engaged (holds the fence of and is connected to)."}),
		clusterOwned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricClusterOwned,
			Help: "1 while this replica holds the cluster's fence (connected or still trying to connect); no series for the clusters it does not hold, so the fleet has one series per owned cluster."}, []string{"cluster"}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: metricHandoffs,
			Help: "Fences this replica took over from another replica (failover or rebalancing)."}),
		fenceFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricFenceFailures,
			Help: "Fence Lease writes that failed, by operation (acquire, renew, release) and for renew deadlines missed (lost)."}, []string{"reason"}),
		unowned: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricUnowned,
			Help: "Clusters whose fence has had no live holder for longer than LeaseDuration + RetryPeriod, as this replica sees them."}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricPeers,
			Help: "Live replicas in the membership snapshot this replica decides with."}),
		standby: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricStandby,
			Help: "Clusters this replica keeps warm (connected, cache synced, not written to) because it would take them over first (--standby)."}),
		layoutConflict: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricLayout,
			Help: "1 while another replica uses another fence layout (--shard-buckets): this replica holds no fence meanwhile."}),
	}
	for _, c := range []prometheus.Collector{m.owned, m.clusterOwned, m.handoffs, m.fenceFailures, m.unowned, m.peers, m.standby, m.layoutConflict} {
		if err := reg.Register(c); err != nil {
			are := prometheus.AlreadyRegisteredError{}
			if errors.As(err, &are) {
				return nil, errors.New("shard: metrics already registered; give each Coordinator in a process its own Registerer")
			}
			return nil, err
		}
	}
	return m, nil
}

func (c *Coordinator) updateMetrics(keys map[string]int) {
	now := c.opts.clock.Now()
	threshold := c.opts.LeaseDuration + c.opts.RetryPeriod
	var owned, unowned int
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.reported {
		if key, known := c.keys[name]; !known || !c.heldLocked(key) {
			c.metrics.clusterOwned.DeleteLabelValues(string(name))
			delete(c.reported, name)
		}
	}
	for _, cs := range c.clusters {
		if cs.engCancel != nil {
			owned++
		}
	}
	for name, key := range c.keys {
		if _, ok := c.reported[name]; !ok && c.heldLocked(key) {
			c.metrics.clusterOwned.WithLabelValues(string(name)).Set(1)
			c.reported[name] = struct{}{}
		}
	}
	for k := range keys {
		if c.heldLocked(k) || c.obs.live(leaseName(c.opts.FencePrefix, k), now) {
			delete(c.unownedFrom, k)
			continue
		}
		since, ok := c.unownedFrom[k]
		if !ok {
			c.unownedFrom[k] = now
			continue
		}
		if now.Sub(since) > threshold {
			unowned++
		}
	}
	for k := range c.unownedFrom {
		if keys[k] == 0 {
			delete(c.unownedFrom, k)
		}
	}
	c.metrics.owned.Set(float64(owned))
	c.metrics.unowned.Set(float64(unowned))
}
