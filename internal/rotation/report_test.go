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

// Moved and total add up over every observed cluster; missing lists the
// clusters of the waves rolled so far with Certificates not moved, and those
// nobody observed as -1; later waves are not missing.
func TestTally(t *testing.T) {
	waveOf := map[multicluster.ClusterName]int{"a": 0, "b": 0, "c": 1, "d": 1, "e": 2}
	view := map[multicluster.ClusterName]progress{
		"a": {Moved: 2, Total: 2}, "b": {Moved: 1, Total: 3}, "c": {Moved: 0, Total: 4}, "e": {Moved: 0, Total: 1},
	}
	for _, tc := range []struct {
		upTo         int
		moved, total int
		missing      map[multicluster.ClusterName]int
	}{
		{0, 3, 10, map[multicluster.ClusterName]int{"b": 2}},
		{1, 3, 10, map[multicluster.ClusterName]int{"b": 2, "c": 4, "d": -1}},
		{2, 3, 10, map[multicluster.ClusterName]int{"b": 2, "c": 4, "d": -1, "e": 1}},
	} {
		moved, total, missing := tally(view, waveOf, tc.upTo)
		if moved != tc.moved || total != tc.total || !reflect.DeepEqual(missing, tc.missing) {
			t.Errorf("up to wave %d: moved %d/%d missing %v, want %d/%d %v", tc.upTo, moved, total, missing, tc.moved, tc.total, tc.missing)
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
	if got["north"] != (progress{Total: 1}) || got["west"] != (progress{Published: true, Moved: 2, Total: 2}) {
		t.Errorf("merged %v", got)
	}
	// east: both reported; the later report (b) wins.
	if got["east"] != (progress{Moved: 0, Total: 2}) {
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
	if got := c.merge(ctx, "ca", nil); got["west"] != (progress{}) {
		t.Errorf("a stale report was used: %v", got["west"])
	}
	// Rotations that ended leave the reports.
	a.forget(ctx, map[string]bool{})
	_ = hub.Get(ctx, client.ObjectKey{Namespace: "certhub", Name: ReportPrefix + "a"}, cm)
	if _, ok := cm.Data["ca"]; ok {
		t.Errorf("a's report of an ended rotation is still there")
	}
}
