package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

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
