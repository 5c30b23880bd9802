package budget

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// ParseWeight reads WeightLabel from a cluster Secret's labels.
func ParseWeight(labels map[string]string) float64 {
	w, err := strconv.ParseFloat(labels[hubapi.IssuanceWeightLabel], 64)
	if err != nil || w <= 0 || w > 1000 {
		return 1
	}
	return w
}

// Tenant is who asks for a token: a downstream cluster (with its weight)
// and a namespace in it. Shares go to clusters by weight, then to the
// namespaces of a cluster equally; within a namespace, the nearest due
// goes first.
type Tenant struct {
	Cluster   string `json:"c,omitempty"`
	Namespace string `json:"n,omitempty"`
	// Weight is the cluster's weight; 0 means 1.
	Weight float64 `json:"w,omitempty"`
}

func (t Tenant) weight() float64 {
	if t.Weight <= 0 {
		return 1
	}
	return t.Weight
}

// queued is one waiter as fair queuing sees it.
type queued struct {
	key    string
	tenant Tenant
	due    time.Time
	lane   Lane
}

// MaxTenantTags bounds the tenants Fairness remembers.
const MaxTenantTags = 64

// Fairness is start-time fair queuing over tenants, in the manner of
// Kubernetes' API Priority and Fairness: each tenant (a cluster's
// namespace) has a finish tag, the virtual time up to which it has been
// served; its waiters start at max(Virtual, its tag), one cost apart, and
// the smallest start is served first (then the nearest due). A namespace's
// cost is the number of its cluster's namespaces that wait divided by the
// cluster's weight, so clusters share by weight and a cluster's namespaces
// share its part. A tenant with a backlog thus takes its share while others
// wait, and all that others leave idle; a tenant that was served more
// than its share lately waits for the others to catch up. Only tags ahead
// of Virtual are kept (MaxTenantTags at most, the largest): the others are
// idle, and equal.
type Fairness struct {
	Virtual float64            `json:"virtual,omitempty"`
	Finish  map[string]float64 `json:"finish,omitempty"`
}

// starts is each waiter's start tag (q last in all).
func (f *Fairness) starts(all []queued) []float64 {
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		if c := all[a].due.Compare(all[b].due); c != 0 {
			return c
		}
		return cmp.Compare(all[a].key, all[b].key)
	})
	type ns struct{ cluster, namespace string }
	seen := make(map[ns]float64, len(all)) // each namespace's next start
	perCluster := make(map[string]int, len(all))
	for _, w := range all {
		k := ns{w.tenant.Cluster, w.tenant.Namespace}
		if _, ok := seen[k]; !ok {
			seen[k] = -1
			perCluster[k.cluster]++
		}
	}
	start := make([]float64, len(all))
	for _, i := range idx {
		t := all[i].tenant
		k := ns{t.Cluster, t.Namespace}
		s := seen[k]
		if s < 0 {
			s = f.startOf(keyOf(t))
		}
		start[i] = s
		seen[k] = s + float64(perCluster[t.Cluster])/t.weight()
	}
	return start
}

// ahead returns the keys of the waiters of ws served before q (q itself,
// if in ws, is skipped): those of a more pressing lane, then those of
// q's lane by fair queuing.
func (f *Fairness) ahead(ws []queued, q queued) []string {
	if len(ws) == 0 {
		return nil
	}
	all := make([]queued, 0, len(ws)+1)
	for _, w := range ws {
		if w.key != q.key {
			all = append(all, w)
		}
	}
	all = append(all, q)
	start := f.starts(all)
	mine := start[len(all)-1]
	var out []string
	for i, w := range all[:len(all)-1] {
		if w.lane != q.lane {
			if w.lane > q.lane {
				out = append(out, w.key)
			}
			continue
		}
		if start[i] < mine || (start[i] == mine && (w.due.Before(q.due) || (w.due.Equal(q.due) && w.key < q.key))) {
			out = append(out, w.key)
		}
	}
	return out
}

// served records that q took a token while ws waited: its tenant's tag
// moves one cost past where it started, and virtual time to that start.
func (f *Fairness) served(ws []queued, q queued) {
	namespaces := map[string]bool{q.tenant.Namespace: true}
	for _, w := range ws {
		if w.tenant.Cluster == q.tenant.Cluster {
			namespaces[w.tenant.Namespace] = true
		}
	}
	_ = f.serve(keyOf(q.tenant), len(namespaces), q.tenant.weight()) // the ledger keeps no index
}

// compact drops the tags of idle tenants and keeps MaxTenantTags; it
// returns the tenants whose tags it dropped while still ahead of Virtual.
func (f *Fairness) compact() (dropped []string) {
	for id, tag := range f.Finish {
		if tag <= f.Virtual {
			delete(f.Finish, id)
		}
	}
	if over := len(f.Finish) - MaxTenantTags; over > 0 {
		ids := slices.Collect(maps.Keys(f.Finish))
		slices.SortFunc(ids, func(a, b string) int {
			if c := cmp.Compare(f.Finish[a], f.Finish[b]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for _, id := range ids[:over] {
			delete(f.Finish, id)
		}
		return ids[:over]
	}
	return nil
}
