package inventory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func newTestEvents(t *testing.T, funcs interceptor.Funcs) (*clusterEvents, client.Client, *testingclock.FakeClock, context.CancelFunc) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).Build(), funcs)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := newClusterEvents(ctx, cl, scheme, logr.Discard(), 5*time.Second)
	fc := testingclock.NewFakeClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	e.clock, e.instance = fc, "hub-0"
	return e, cl, fc, cancel
}

// events lists the cluster's Events once the recorder has written them all.
func writtenEvents(t *testing.T, e *clusterEvents, cl client.Client) []eventsv1.Event {
	t.Helper()
	idle := func(context.Context) (bool, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		return !e.draining, nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, idle); err != nil {
		t.Fatalf("events still being written: %v", err)
	}
	var l eventsv1.EventList
	if err := cl.List(context.Background(), &l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// The hub's recorder writes what client-go's events.k8s.io/v1 recorder
// writes: one Event per occurrence, isomorphic ones within six minutes
// folded into a series, and nothing once the cluster is disconnected.
func TestEventsAreWrittenAndFoldedIntoSeries(t *testing.T) {
	e, cl, fc, cancel := newTestEvents(t, interceptor.Funcs{})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}
	rec := (&downstreamCluster{events: e}).GetEventRecorder("certhub")

	rec.Eventf(pod, nil, corev1.EventTypeNormal, "Issuing", "Issue", "issuing %d", 1)
	got := writtenEvents(t, e, cl)
	if len(got) != 1 {
		t.Fatalf("events: %+v", got)
	}
	ev := got[0]
	if ev.Namespace != "shop" || ev.Regarding.Name != "web" || ev.Regarding.Kind != "Pod" || ev.Reason != "Issuing" || ev.Action != "Issue" ||
		ev.Note != "issuing 1" || ev.Type != corev1.EventTypeNormal || ev.ReportingController != "certhub" ||
		ev.ReportingInstance != "certhub-hub-0" || ev.Series != nil {
		t.Errorf("event %+v", ev)
	}

	for range 2 {
		fc.Step(time.Minute)
		rec.Eventf(pod, nil, corev1.EventTypeNormal, "Issuing", "Issue", "issuing again")
	}
	got = writtenEvents(t, e, cl)
	if len(got) != 1 || got[0].Series == nil || got[0].Series.Count != 3 || !got[0].Series.LastObservedTime.Equal(&metav1.MicroTime{Time: fc.Now()}) {
		t.Fatalf("two repeats: %d events, first %+v; want one with a series of 3", len(got), got[0])
	}

	rec.Eventf(pod, nil, corev1.EventTypeWarning, "Issuing", "Issue", "another type")
	fc.Step(time.Millisecond) // Events are named after their time, as client-go names them
	rec.AnnotatedEventf(pod, nil, map[string]string{"a": "b"}, corev1.EventTypeNormal, "Issued", "Issue", "done")
	if got = writtenEvents(t, e, cl); len(got) != 3 {
		t.Fatalf("another type and reason: %d events, want 3", len(got))
	}

	fc.Step(seriesWindow) // the window has passed: forgotten, a new Event
	forgotten := func(context.Context) (bool, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.recent) == 0, nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, forgotten); err != nil {
		t.Errorf("events still kept after the series window: %v", err)
	}
	rec.Eventf(pod, nil, corev1.EventTypeNormal, "Issuing", "Issue", "later")
	if got = writtenEvents(t, e, cl); len(got) != 4 {
		t.Fatalf("after the window: %d events, want 4", len(got))
	}

	rec.Eventf(pod, nil, "Bogus", "Issuing", "Issue", "bad type")
	cancel()
	rec.Eventf(pod, nil, corev1.EventTypeNormal, "Gone", "Issue", "after disconnect")
	if got = writtenEvents(t, e, cl); len(got) != 4 {
		t.Errorf("an unsupported type or a disconnected cluster wrote: %d events, want 4", len(got))
	}
}

// A cluster whose API server hangs holds only its own Events back: each
// cluster writes from its own queue, and a full queue drops, never blocks.
func TestAHangingClusterHoldsBackOnlyItsOwnEvents(t *testing.T) {
	release := make(chan struct{})
	hung, _, _, _ := newTestEvents(t, interceptor.Funcs{Create: func(ctx context.Context, _ client.WithWatch, _ client.Object, _ ...client.CreateOption) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	}})
	defer close(release)
	healthy, cl, _, _ := newTestEvents(t, interceptor.Funcs{})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}
	stuck := (&downstreamCluster{events: hung}).GetEventRecorder("certhub")
	for i := range maxPendingEvents + 50 { // returns at once although nothing is written
		stuck.Eventf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p", UID: types.UID(fmt.Sprint("u", i))}},
			nil, corev1.EventTypeNormal, "Issuing", "Issue", "n")
	}
	hung.mu.Lock()
	queued := len(hung.queue)
	hung.mu.Unlock()
	if queued > maxPendingEvents {
		t.Errorf("%d events queued, want ≤ %d", queued, maxPendingEvents)
	}
	(&downstreamCluster{events: healthy}).GetEventRecorder("certhub").Eventf(pod, nil, corev1.EventTypeNormal, "Issued", "Issue", "ok")
	if got := writtenEvents(t, healthy, cl); len(got) != 1 {
		t.Errorf("the healthy cluster's events: %d, want 1", len(got))
	}
}
