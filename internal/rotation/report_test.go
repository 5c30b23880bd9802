package rotation

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// Moved, total and stuck add up over every observed cluster; missing lists
// the reachable clusters of the waves rolled so far with Certificates
// neither moved nor stuck; a cluster nobody observed is unreachable, not
// missing; later waves are not missing.
func TestTally(t *testing.T) {
	in := stepInput{waveOf: map[multicluster.ClusterName]int{"a": 0, "b": 0, "c": 1, "d": 1, "e": 2}, view: map[multicluster.ClusterName]progress{
		"a": {Published: true, Moved: 2, Total: 2}, "b": {Published: true, Moved: 1, Total: 4, Stuck: 1, StuckNames: []string{"shop/web (PolicyDenied)"}},
		"c": {Moved: 0, Total: 4}, "e": {Published: true, Moved: 0, Total: 1},
	}}
	for _, tc := range []struct {
		upTo    int
		missing map[multicluster.ClusterName]int
	}{
		{0, map[multicluster.ClusterName]int{"b": 2}},
		{1, map[multicluster.ClusterName]int{"b": 2, "c": 4}},
		{2, map[multicluster.ClusterName]int{"b": 2, "c": 4, "e": 1}},
	} {
		got := tally(in, tc.upTo)
		if got.moved != 3 || got.total != 11 || got.stuck != 1 || !reflect.DeepEqual(got.missing, tc.missing) {
			t.Errorf("up to wave %d: moved %d/%d stuck %d missing %v, want 3/11 1 %v", tc.upTo, got.moved, got.total, got.stuck, got.missing, tc.missing)
		}
		if !reflect.DeepEqual(got.unreachable, []multicluster.ClusterName{"d"}) || !reflect.DeepEqual(got.unpublished, []multicluster.ClusterName{"c"}) ||
			!reflect.DeepEqual(got.stuckNames, []string{"b/shop/web (PolicyDenied)"}) {
			t.Errorf("unreachable %v unpublished %v stuck %v", got.unreachable, got.unpublished, got.stuckNames)
		}
	}
}

// Each replica publishes what it saw of its own clusters; merging takes
// the others' fresh reports for the clusters it does not observe, never a
// stale one, and its own view wins for its own clusters.
func TestReportsMerge(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	hub := fake.NewClientBuilder().WithScheme(s).Build()
	replica := func(id string) *Rotator {
		return &Rotator{opts: Options{Namespace: "certhub", Identity: id, Hub: hub, Tick: time.Second}, log: logr.Discard(), reported: map[string]report{}}
	}
	ctx := context.Background()
	a, b, c := replica("a"), replica("b"), replica("c")
	a.publish(ctx, "ca", map[multicluster.ClusterName]progress{"east": {Published: true, Moved: 1, Total: 2}})
	b.publish(ctx, "ca", map[multicluster.ClusterName]progress{"west": {Published: true, Moved: 2, Total: 2}, "east": {Moved: 0, Total: 2}})
	got := c.merge(ctx, "ca", map[multicluster.ClusterName]progress{"north": {Total: 1}})
	if !reflect.DeepEqual(got["north"], progress{Total: 1}) || !reflect.DeepEqual(got["west"], progress{Published: true, Moved: 2, Total: 2}) {
		t.Errorf("merged %v", got)
	}
	// east: both reported; the later report (b) wins.
	if !reflect.DeepEqual(got["east"], progress{Moved: 0, Total: 2}) {
		t.Errorf("east from %v, want b's later report", got["east"])
	}
	// a's own view of east wins over b's report.
	if got := a.merge(ctx, "ca", map[multicluster.ClusterName]progress{"east": {Published: true, Moved: 1, Total: 2}}); got["east"].Moved != 1 {
		t.Errorf("a's own view lost: %v", got["east"])
	}
	// An unchanged view is not written again before the heartbeat.
	cm := &corev1.ConfigMap{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: "certhub", Name: ReportPrefix + "b"}, cm); err != nil {
		t.Fatal(err)
	}
	b.publish(ctx, "ca", map[multicluster.ClusterName]progress{"west": {Published: true, Moved: 2, Total: 2}, "east": {Moved: 0, Total: 2}})
	again := &corev1.ConfigMap{}
	_ = hub.Get(ctx, client.ObjectKey{Namespace: "certhub", Name: ReportPrefix + "b"}, again)
	if again.ResourceVersion != cm.ResourceVersion {
		t.Errorf("an unchanged report was written again")
	}
	// A stale report (three heartbeats old) is not used.
	b.mu.Lock()
	b.reported = map[string]report{}
	b.mu.Unlock()
	stale := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	again.Data["ca"] = `{"at":"` + stale + `","clusters":{"west":{"published":true,"moved":2,"total":2}}}`
	if err := hub.Update(ctx, again); err != nil {
		t.Fatal(err)
	}
	if got := c.merge(ctx, "ca", nil); !reflect.DeepEqual(got["west"], progress{}) {
		t.Errorf("a stale report was used: %v", got["west"])
	}
	// Rotations that ended leave the reports.
	a.forget(ctx, map[string]bool{})
	_ = hub.Get(ctx, client.ObjectKey{Namespace: "certhub", Name: ReportPrefix + "a"}, cm)
	if _, ok := cm.Data["ca"]; ok {
		t.Errorf("a's report of an ended rotation is still there")
	}
}
