package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/shard"
)

// Fence is one fence Lease as a sample saw it.
type Fence struct {
	Holder string
	// Expires is renewTime + leaseDurationSeconds.
	Expires time.Time
}

// Sample is one look at the fence Leases.
type Sample struct {
	At time.Time
	// Live are the replicas running when the sample was taken (read before the Leases).
	Live map[string]bool
	// Fences by fence key (the cluster name with per-cluster fences); nil when
	// the hub could not be read.
	Fences map[string]Fence
	Err    error
}

// Owned reports whether key had an owner in s: held by a running replica
// and not expired.
func (s Sample) Owned(key string) bool {
	f, ok := s.Fences[key]
	return ok && f.Holder != "" && s.Live[f.Holder] && s.At.Before(f.Expires)
}

// Sampler lists the fence Leases every 250ms until Finish.
type Sampler struct {
	mu      sync.Mutex
	samples []Sample
	stop    context.CancelFunc
	done    chan struct{}
}

// FenceHolders maps each fence key to its Lease.
func FenceHolders(ctx context.Context, hub client.Client, namespace string) (map[string]Fence, error) {
	list := &coordinationv1.LeaseList{}
	if err := hub.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{shard.LeaseKindLabel: "fence"}); err != nil {
		return nil, err
	}
	out := map[string]Fence{}
	for _, l := range list.Items {
		f := Fence{}
		if l.Spec.HolderIdentity != nil {
			f.Holder = *l.Spec.HolderIdentity
		}
		if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
			f.Expires = l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		}
		out[l.Annotations[shard.FenceKeyAnnotation]] = f
	}
	return out, nil
}

// SampleOwnership starts sampling; running says which replicas run now.
func SampleOwnership(hub client.Client, namespace string, running func() map[string]bool) *Sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sampler{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Who runs is read before the Leases: a replica removed from the
			// set has exited, so it holds nothing by the time we list.
			smp := Sample{Live: running()}
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			smp.Fences, smp.Err = FenceHolders(lctx, hub, namespace)
			cancel()
			smp.At = time.Now()
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
	}()
	return s
}

// Finish stops sampling and returns the samples.
func (s *Sampler) Finish() []Sample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// HeldByStopped lists every sample in which a fence named a replica that was not running.
func HeldByStopped(samples []Sample) []string {
	var bad []string
	for _, s := range samples {
		for k, f := range s.Fences {
			if f.Holder != "" && !s.Live[f.Holder] {
				bad = append(bad, fmt.Sprintf("%s: %s held by %s, which is not running", s.At.Format("15:04:05.000"), k, f.Holder))
			}
		}
	}
	return bad
}

// Gap is one stretch of time a cluster had no owner.
type Gap struct {
	Key      string
	From, To time.Time
	// HubDown is set when the hub could not be read during the gap: nobody
	// can hold a fence then, and the gap's length says nothing about failover.
	HubDown bool
}

// Length is To - From.
func (g Gap) Length() time.Duration { return g.To.Sub(g.From) }

// Gaps returns, for each key, the stretches between the first sample that
// saw it unowned and the first that saw it owned again. A gap still open at
// the last sample ends there.
func Gaps(samples []Sample, keys []string) []Gap {
	var out []Gap
	for _, k := range keys {
		var cur *Gap
		for _, s := range samples {
			if s.Err != nil {
				if cur != nil {
					cur.HubDown = true
				}
				continue
			}
			switch owned := s.Owned(k); {
			case !owned && cur == nil:
				cur = &Gap{Key: k, From: s.At}
			case owned && cur != nil:
				cur.To = s.At
				out = append(out, *cur)
				cur = nil
			}
		}
		if cur != nil && len(samples) > 0 {
			cur.To = samples[len(samples)-1].At
			out = append(out, *cur)
		}
	}
	return out
}
