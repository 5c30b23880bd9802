package shard

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/test/fixture/fleet"
)

// A rollout from per-cluster fences to the default buckets, as a Deployment
// makes it: the new replica starts beside the old one. Two fence layouts
// guard a cluster with two different Leases, so while both run neither
// holds a fence (both say so in certhub_shard_layout_conflict); no cluster
// ever has two live fences. Once the old replica stops, the new one fences
// every cluster in buckets and the Certificates created meanwhile become
// Ready.
//
// Its Certificates live in their own namespace and are deleted at the end:
// the writer audit of the other tests orders each cluster's writes by fence
// transition, and two layouts count transitions on different Leases.
func TestRolloutOfAnotherBucketCount(tt *testing.T) {
	t := fleet.RecordFailures(tt)
	ctx := context.Background()
	_, replicas := prepare(t)
	const layoutNS = "layout"
	for _, cp := range bed.Downstreams {
		if err := client.IgnoreAlreadyExists(cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: layoutNS}})); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, cp := range bed.Downstreams {
			_ = cp.Client.DeleteAllOf(ctx, &cmapi.Certificate{}, client.InNamespace(layoutNS))
			_ = cp.Client.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(layoutNS))
		}
	})
	oldCfg, newCfg := replicas, replicas
	oldCfg.Args = []string{"--shard-buckets=0"}
	newCfg.Args = []string{fmt.Sprintf("--shard-buckets=%d", shard.DefaultBuckets)}

	var mu sync.Mutex
	running := map[string]*fleet.Replica{}
	live := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]bool{}
		for id := range running {
			out[id] = true
		}
		return out
	}
	start := func(cfg fleet.Config, id string) *fleet.Replica {
		r := cfg.Start(t, id)
		if err := r.WaitReady(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		running[id] = r
		mu.Unlock()
		return r
	}
	old := start(oldCfg, "layout-old")
	waitConverged(t, map[string]*fleet.Replica{old.ID: old})
	sampler := fleet.SampleOwnership(bed.Hub.Client, bed.HubNamespace(), live)
	stopLoad := trickleIn(layoutNS, "layout", 200*time.Millisecond)

	next := start(newCfg, "layout-new")
	conflict := func(r *fleet.Replica) float64 {
		m, err := r.Metrics(ctx)
		if err != nil {
			return -1
		}
		return m.Sum("certhub_shard_layout_conflict", nil)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		fences, err := fleet.FenceHolders(ctx, bed.Hub.Client, bed.HubNamespace())
		if err != nil {
			return false, nil
		}
		for _, cp := range bed.Downstreams {
			if fences.Of(cp.Name).Holder != "" {
				return false, nil
			}
		}
		return conflict(old) == 1 && conflict(next) == 1, nil
	})
	if err != nil {
		t.Fatalf("with two layouts running, fences are still held or a replica does not report the conflict (old %v, new %v)", conflict(old), conflict(next))
	}

	mu.Lock()
	delete(running, old.ID)
	mu.Unlock()
	if err := old.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("%s exited with %v after SIGTERM", old.ID, err)
	}
	holders := waitConverged(t, map[string]*fleet.Replica{next.ID: next})
	stopLoad()
	waitAllReadyIn(t, layoutNS, time.Minute)
	fences, err := fleet.FenceHolders(ctx, bed.Hub.Client, bed.HubNamespace())
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range bed.Downstreams {
		if f := fences.ByKey[shard.FenceKey(cp.Name, shard.DefaultBuckets)]; f.Holder != next.ID {
			t.Errorf("%s: bucket fence held by %q, want %s (holders %v)", cp.Name, f.Holder, next.ID, holders)
		}
	}
	if c := conflict(next); c != 0 {
		t.Errorf("certhub_shard_layout_conflict of %s = %v once alone, want 0", next.ID, c)
	}

	samples := sampler.Finish()
	for _, b := range fleet.HeldByStopped(samples) {
		t.Errorf("ownership sample: %s", b)
	}
	twice := 0
	for _, s := range samples {
		for _, cp := range bed.Downstreams {
			held := 0
			for _, key := range []string{cp.Name, shard.FenceKey(cp.Name, shard.DefaultBuckets)} {
				if f, ok := s.Fences.ByKey[key]; ok && f.Holder != "" && s.At.Before(f.Expires) {
					held++
				}
			}
			if held > 1 {
				twice++
				t.Errorf("%s: %s had a live per-cluster fence and a live bucket fence", s.At.Format("15:04:05.000"), cp.Name)
			}
		}
	}
	t.Logf("ownership samples: %d, clusters fenced twice: %d", len(samples), twice)
}
