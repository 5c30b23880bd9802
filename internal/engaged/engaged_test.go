package engaged

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

type fakeCluster struct{ cluster.Cluster }

// A cluster is remembered until its context ends; one engaged again under
// the same name is not forgotten when the old context ends.
func TestSet(t *testing.T) {
	var s Set
	first, cancelFirst := context.WithCancel(context.Background())
	second, cancelSecond := context.WithCancel(context.Background())
	a, b := &fakeCluster{}, &fakeCluster{}
	_ = s.Engage(first, "east", a)
	if s.Get("east") != a || len(s.All()) != 1 {
		t.Fatalf("engaged: %v", s.All())
	}
	_ = s.Engage(second, "east", b)
	cancelFirst()
	// The first context's clean-up finds east engaged again: it stays.
	if got := s.Get("east"); got != b {
		t.Errorf("east is %v, want the second engagement", got)
	}
	cancelSecond()
	waitFor(t, func() bool { return s.Get("east") == nil })
	if len(s.All()) != 0 {
		t.Errorf("after its context ended, east is still engaged")
	}
	s.Forget(multicluster.ClusterName("west")) // forgetting the unknown is a no-op

	// The same cluster engaged again: the first engagement's end keeps it.
	third, cancelThird := context.WithCancel(context.Background())
	defer cancelThird()
	fourth, cancelFourth := context.WithCancel(context.Background())
	defer cancelFourth()
	_ = s.Engage(third, "east", a)
	_ = s.Engage(fourth, "east", a)
	cancelThird()
	// The first engagement's clean-up runs in a goroutine of its own:
	// watch for it to take east away, for longer than it takes to run.
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 500*time.Millisecond, true, func(context.Context) (bool, error) {
		if s.Get("east") != a {
			return false, errors.New("forgotten")
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Error("the same cluster engaged again was forgotten when the first engagement ended")
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return ok(), nil
	}); err != nil {
		t.Fatal("the engagement was never forgotten")
	}
}
