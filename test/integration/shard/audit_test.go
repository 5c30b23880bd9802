package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/shard"
)

// fenceHolders returns, per cluster, the holder of its fence Lease ("" when released).
func fenceHolders(ctx context.Context) (map[string]string, error) {
	list := &coordinationv1.LeaseList{}
	if err := bed.Hub.Client.List(ctx, list, client.InNamespace(bed.HubNamespace()),
		client.MatchingLabels{shard.LeaseKindLabel: "fence"}); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range list.Items {
		h := ""
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		out[l.Annotations[shard.FenceKeyAnnotation]] = h
	}
	return out, nil
}

// write is one observed version of a managed Secret downstream.
type write struct {
	cluster, secret, writer string
	transition              int
	rv                      string
}

// auditor records every version of every certhub-managed Secret in every
// downstream cluster, in the order each API server serves them.
type auditor struct {
	mu     sync.Mutex
	writes map[string][]write // by cluster
	stop   context.CancelFunc
}

func startAuditor(t *testing.T) *auditor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &auditor{writes: map[string][]write{}, stop: cancel}
	for _, cp := range bed.Downstreams {
		cs, err := kubernetes.NewForConfig(cp.Config)
		if err != nil {
			t.Fatal(err)
		}
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = certsync.ManagedLabel + "=" + certsync.ManagedValue
		}))
		inf := f.Core().V1().Secrets().Informer()
		name := cp.Name
		record := func(o any) {
			s, ok := o.(*corev1.Secret)
			if !ok {
				return
			}
			w := write{cluster: name, secret: s.Namespace + "/" + s.Name, rv: s.ResourceVersion}
			stamp := s.Annotations[certsync.WriterAnnotation]
			if i := strings.LastIndex(stamp, "/"); i > 0 {
				w.writer = stamp[:i]
				w.transition, _ = strconv.Atoi(stamp[i+1:])
			} else {
				w.writer, w.transition = stamp, -1
			}
			a.mu.Lock()
			a.writes[name] = append(a.writes[name], w)
			a.mu.Unlock()
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: record, UpdateFunc: func(_, o any) { record(o) },
		}); err != nil {
			t.Fatal(err)
		}
		f.Start(ctx.Done())
		if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("audit informer for %s did not sync", name)
		}
	}
	t.Cleanup(cancel)
	return a
}

// check asserts no cluster was written by two replicas within one fence
// period: every write carries "<replica>/<fence transition>"; a transition
// number belongs to exactly one holder, and per cluster the transitions of
// successive writes never go backwards (a stale owner writing after a newer
// owner began would do exactly that). It returns the number of writes seen.
func (a *auditor) check(t *testing.T) int {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	total := 0
	for cluster, ws := range a.writes {
		holder := map[int]string{}
		last := -1
		for _, w := range ws {
			total++
			if w.transition < 0 {
				t.Errorf("%s: Secret %s (rv %s) has no fence stamp: %q", cluster, w.secret, w.rv, w.writer)
				continue
			}
			if h, ok := holder[w.transition]; ok && h != w.writer {
				t.Errorf("%s: fence transition %d written by both %s and %s", cluster, w.transition, h, w.writer)
			}
			holder[w.transition] = w.writer
			if w.transition < last {
				t.Errorf("%s: write by %s with fence transition %d after a write with transition %d (stale owner)", cluster, w.writer, w.transition, last)
			}
			last = max(last, w.transition)
		}
	}
	return total
}

func (a *auditor) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	for _, cp := range bed.Downstreams {
		writers := map[string]int{}
		for _, w := range a.writes[cp.Name] {
			writers[fmt.Sprintf("%s/%d", w.writer, w.transition)]++
		}
		fmt.Fprintf(&b, "%s: %v; ", cp.Name, writers)
	}
	return b.String()
}

// ownershipSampler polls the fence Leases and records the worst moments.
type ownershipSampler struct {
	mu      sync.Mutex
	samples int
	bad     []string
	stop    context.CancelFunc
	done    chan struct{}
}

// sampleOwnership checks every interval that each registered cluster's fence
// names at most one holder, and that a held fence names a running replica.
func sampleOwnership(t *testing.T, running func() map[string]bool) *ownershipSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &ownershipSampler{stop: cancel, done: make(chan struct{})}
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
			live := running()
			holders, err := fenceHolders(ctx)
			if err != nil {
				continue
			}
			s.mu.Lock()
			s.samples++
			for c, h := range holders {
				if h != "" && !live[h] {
					s.bad = append(s.bad, fmt.Sprintf("%s held by %s, which is not running", c, h))
				}
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *ownershipSampler) finish() (samples int, bad []string) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.bad
}
