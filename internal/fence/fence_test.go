package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/fence"
)

// until is a fence that owns clusters until a fixed instant, or not at all.
type until struct {
	at    time.Time
	owned bool
	done  *int
}

func (u until) Owns(multicluster.ClusterName) (string, bool) { return "r/1", u.owned }
func (u until) BeginWrite(multicluster.ClusterName) (string, time.Time, func(), bool) {
	return "r/1", u.at, func() { *u.done++ }, u.owned
}

func TestWriteContext(t *testing.T) {
	at := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name      string
		f         fence.Fence
		wantErr   error
		stamp     string
		deadline  bool
		doneCalls int
	}{
		{name: "no fence: every write, no deadline", f: nil},
		{name: "static: every write, its stamp, no deadline", f: fence.Static{Identity: "solo"}, stamp: "solo"},
		{name: "owner: the owner's deadline, done told", f: until{at: at, owned: true, done: new(int)}, stamp: "r/1", deadline: true, doneCalls: 1},
		{name: "not the owner: ErrNotOwner", f: until{at: at, done: new(int)}, wantErr: fence.ErrNotOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stamp, ctx, done, err := fence.WriteContext(context.Background(), tc.f, "east")
			if !errors.Is(err, tc.wantErr) || stamp != tc.stamp {
				t.Fatalf("stamp %q err %v, want %q %v", stamp, err, tc.stamp, tc.wantErr)
			}
			d, ok := ctx.Deadline()
			if ok != tc.deadline || (ok && !d.Equal(at)) {
				t.Errorf("deadline %v (%v), want %v", d, ok, tc.deadline)
			}
			done()
			if u, isUntil := tc.f.(until); isUntil && *u.done != tc.doneCalls {
				t.Errorf("done called %d times, want %d", *u.done, tc.doneCalls)
			}
		})
	}
	if s := (fence.Static{}).Share(); s != 1 {
		t.Errorf("a static fence's share is %v, want 1", s)
	}
}

// pauser is a fence whose Mark is a counter the test moves; paused says
// whether this replica still keeps the cluster.
type pauser struct {
	fence.Static
	mark *uint64
	kept bool
}

func (p pauser) Mark(multicluster.ClusterName) uint64 { return *p.mark }
func (p pauser) Paused(_ multicluster.ClusterName, mark uint64) (time.Duration, bool) {
	return 2 * time.Second, p.kept && (*p.mark != mark || mark%2 == 1)
}

type reconcileFunc func(context.Context, mcreconcile.Request) (reconcile.Result, error)

func (f reconcileFunc) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	return f(ctx, req)
}

func TestRetryPaused(t *testing.T) {
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		start   uint64 // Mark before the reconcile: odd while paused
		end     uint64 // Mark after it
		kept    bool
		res     reconcile.Result
		err     error
		want    reconcile.Result
		wantErr error
	}{
		{name: "no pause", start: 4, end: 4, kept: true, res: reconcile.Result{RequeueAfter: time.Hour}, want: reconcile.Result{RequeueAfter: time.Hour}},
		{name: "a pause began during the reconcile", start: 4, end: 5, kept: true, want: reconcile.Result{RequeueAfter: 2 * time.Second}},
		{name: "begun and ended during the reconcile", start: 4, end: 6, kept: true, res: reconcile.Result{RequeueAfter: time.Hour}, want: reconcile.Result{RequeueAfter: 2 * time.Second}},
		{name: "ran during the pause, which ended since", start: 5, end: 6, kept: true, want: reconcile.Result{RequeueAfter: 2 * time.Second}},
		{name: "ran during a pause still on", start: 5, end: 5, kept: true, want: reconcile.Result{RequeueAfter: 2 * time.Second}},
		{name: "a sooner requeue is kept", start: 4, end: 5, kept: true, res: reconcile.Result{RequeueAfter: time.Second}, want: reconcile.Result{RequeueAfter: time.Second}},
		{name: "the cluster was lost: its next owner sees it", start: 4, end: 5, kept: false, want: reconcile.Result{}},
		{name: "an error is returned as it is (backoff)", start: 4, end: 5, kept: true, err: errBoom, wantErr: errBoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := tc.start
			p := pauser{mark: &mark, kept: tc.kept}
			r := fence.RetryPaused(p, reconcileFunc(func(context.Context, mcreconcile.Request) (reconcile.Result, error) {
				mark = tc.end
				return tc.res, tc.err
			}))
			got, err := r.Reconcile(context.Background(), mcreconcile.Request{ClusterName: "east"})
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("Reconcile = %+v, %v; want %+v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	// A fence without pauses leaves the reconciler as it is.
	inner := reconcileFunc(func(context.Context, mcreconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if r, ok := fence.RetryPaused(fence.Static{}, inner).(reconcileFunc); !ok || r == nil {
		t.Error("RetryPaused wrapped the reconciler of a fence that never pauses")
	}
}
