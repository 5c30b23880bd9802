package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Events are written downstream by a small recorder of the hub's own, not by
// controller-runtime's: that one starts two event broadcasters per cluster
// (six 1,000-event queues and their goroutines, ~130 KiB per connected
// cluster in P6'), kept until the cluster is disconnected. This one keeps
// what client-go's events.k8s.io/v1 recorder does for the user — an Event
// per occurrence, isomorphic Events within six minutes folded into one with
// a series count — and holds per cluster only a small record per recent
// Event and a queue drained by one goroutine while there is something to write.
const (
	// seriesWindow is client-go's: isomorphic Events this close fold into a series.
	seriesWindow = 6 * time.Minute
	// maxPendingEvents per cluster; beyond it new Events are dropped (logged).
	maxPendingEvents = 256
	// maxRecentEvents per cluster kept for folding; the oldest goes first.
	maxRecentEvents = 1024
)

// downstreamCluster is a connected cluster whose Event recorder is the
// hub's, and whose cache registers one handler per informer (fanout.go).
type downstreamCluster struct {
	cluster.Cluster
	cache  *fanoutCache
	events *clusterEvents
}

// GetCache returns the cluster's cache, whose informers serve all their
// event handlers from one registration each.
func (c *downstreamCluster) GetCache() cache.Cache {
	if c.cache == nil {
		return c.Cluster.GetCache()
	}
	return c.cache
}

// GetEventRecorder returns a recorder writing events.k8s.io/v1 Events to
// the cluster with reportingController name.
func (c *downstreamCluster) GetEventRecorder(name string) recorder.EventRecorder {
	return eventRecorder{c.events, name}
}

// recentEvent is what is kept of a written Event to fold the next isomorphic one into it.
type recentEvent struct {
	event   *eventsv1.Event // as first recorded; Series set once it repeats
	written bool            // created downstream
	pending bool            // queued for writing
}

// clusterEvents records one cluster's Events.
type clusterEvents struct {
	ctx      context.Context // the cluster's; writes stop with it
	cl       client.Client
	scheme   *runtime.Scheme
	log      logr.Logger
	clock    clock.WithDelayedExecution
	instance string // reportingInstance suffix: the host name
	timeout  time.Duration

	mu       sync.Mutex
	recent   map[uint64]*recentEvent
	queue    []uint64
	draining bool
	dropping bool // the queue was full; logged once until it has room again
	sweep    clock.Timer
}

func newClusterEvents(ctx context.Context, cl client.Client, scheme *runtime.Scheme, log logr.Logger, timeout time.Duration) *clusterEvents {
	host, _ := os.Hostname()
	e := &clusterEvents{ctx: ctx, cl: cl, scheme: scheme, log: log.WithName("events"), clock: clock.RealClock{},
		instance: host, timeout: timeout, recent: map[uint64]*recentEvent{}}
	context.AfterFunc(ctx, e.stop)
	return e
}

// stop forgets everything once the cluster is disconnected.
func (e *clusterEvents) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sweep != nil {
		e.sweep.Stop()
		e.sweep = nil
	}
	e.recent, e.queue = map[uint64]*recentEvent{}, nil
}

type eventRecorder struct {
	e    *clusterEvents
	name string
}

func (r eventRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.e.record(r.name, regarding, related, nil, eventtype, reason, action, note, args...)
}

func (r eventRecorder) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	r.e.record(r.name, regarding, related, annotations, eventtype, reason, action, note, args...)
}

// record builds the Event as client-go's recorder does and queues it, or
// folds it into a recent isomorphic one (same type, action, reason,
// reporter, regarding and related object).
func (e *clusterEvents) record(controller string, regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	message := fmt.Sprintf(note, args...)
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		e.log.Error(nil, "unsupported event type, not recorded", "type", eventtype, "reason", reason)
		return
	}
	ref, err := reference.GetReference(e.scheme, regarding)
	if err != nil {
		e.log.Error(err, "cannot refer to the object, event not recorded", "reason", reason, "message", message)
		return
	}
	var relRef *corev1.ObjectReference
	if related != nil {
		relRef, _ = reference.GetReference(e.scheme, related)
	}
	now := e.clock.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	if len(message) > 1024 { // events.k8s.io/v1 note limit
		message = message[:1021] + "..."
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ref.Name, now.UnixNano()), Namespace: ns, Annotations: annotations},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: controller,
		ReportingInstance:   controller + "-" + e.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             relRef,
		Note:                message,
		Type:                eventtype,
	}
	e.log.V(1).Info(message, "type", eventtype, "object", ref, "reason", reason)
	key := isomorphicKey(ev)

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx.Err() != nil {
		return
	}
	if r := e.recent[key]; r != nil && now.Sub(lastSeen(r.event)) < seriesWindow {
		if r.event.Series == nil {
			r.event.Series = &eventsv1.EventSeries{Count: 1}
		}
		r.event.Series.Count++
		r.event.Series.LastObservedTime = metav1.NewMicroTime(now)
		e.enqueueLocked(key, r)
		return
	}
	if len(e.recent) >= maxRecentEvents {
		e.dropOldestLocked()
	}
	r := &recentEvent{event: ev}
	e.recent[key] = r
	e.enqueueLocked(key, r)
	if e.sweep == nil {
		e.sweep = e.clock.AfterFunc(seriesWindow, e.sweepLater)
	}
}

// sweepLater runs forgetOld apart from the timer's callback (a fake clock
// calls it holding its own lock).
func (e *clusterEvents) sweepLater() { go e.forgetOld() }

func (e *clusterEvents) enqueueLocked(key uint64, r *recentEvent) {
	if r.pending {
		return // the write to come carries this occurrence too
	}
	if len(e.queue) >= maxPendingEvents {
		if !e.dropping { // once per episode, not once per Event
			e.log.Info("too many events waiting to be written; dropping new ones until the queue drains", "pending", len(e.queue))
			e.dropping = true
		}
		return
	}
	e.dropping = false
	r.pending = true
	e.queue = append(e.queue, key)
	if !e.draining {
		e.draining = true
		go e.drain()
	}
}

// drain writes the queued Events one by one, then ends.
func (e *clusterEvents) drain() {
	for {
		e.mu.Lock()
		if len(e.queue) == 0 || e.ctx.Err() != nil {
			e.queue, e.draining = nil, false
			e.mu.Unlock()
			return
		}
		key := e.queue[0]
		e.queue = e.queue[1:]
		r := e.recent[key]
		if r == nil {
			e.mu.Unlock()
			continue
		}
		r.pending = false
		ev, written := r.event.DeepCopy(), r.written
		e.mu.Unlock()

		err := e.write(ev, written)
		if err == nil {
			e.mu.Lock()
			r.written = true
			e.mu.Unlock()
			continue
		}
		e.log.Error(err, "failed to write event", "reason", ev.Reason, "object", ev.Regarding.Name, "namespace", ev.Namespace)
	}
}

// write creates the Event, or patches its series once it repeats (and
// creates it if it has gone).
func (e *clusterEvents) write(ev *eventsv1.Event, written bool) error {
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	if written && ev.Series != nil {
		patch, err := json.Marshal(map[string]any{"series": ev.Series})
		if err != nil {
			return err
		}
		err = e.cl.Patch(ctx, ev.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	err := e.cl.Create(ctx, ev)
	if apierrors.IsAlreadyExists(err) && written {
		return nil
	}
	return err
}

// forgetOld drops what is kept of Events whose series window has passed.
func (e *clusterEvents) forgetOld() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	for k, r := range e.recent {
		if !r.pending && now.Sub(lastSeen(r.event)) >= seriesWindow {
			delete(e.recent, k)
		}
	}
	e.sweep = nil
	if len(e.recent) > 0 && e.ctx.Err() == nil {
		e.sweep = e.clock.AfterFunc(seriesWindow, e.sweepLater)
	}
}

func (e *clusterEvents) dropOldestLocked() {
	var oldest uint64
	var at time.Time
	for k, r := range e.recent {
		if t := lastSeen(r.event); !r.pending && (at.IsZero() || t.Before(at)) {
			oldest, at = k, t
		}
	}
	delete(e.recent, oldest)
}

func lastSeen(ev *eventsv1.Event) time.Time {
	if ev.Series != nil {
		return ev.Series.LastObservedTime.Time
	}
	return ev.EventTime.Time
}

// isomorphicKey is client-go's grouping of Events into a series.
func isomorphicKey(ev *eventsv1.Event) uint64 {
	d := xxhash.New()
	for _, s := range []string{ev.Type, ev.Action, ev.Reason, ev.ReportingController, ev.ReportingInstance} {
		_, _ = d.WriteString(s)
		_, _ = d.Write([]byte{0})
	}
	for _, r := range []*corev1.ObjectReference{&ev.Regarding, ev.Related} {
		if r == nil {
			_, _ = d.Write([]byte{1})
			continue
		}
		for _, s := range []string{r.Kind, r.Namespace, r.Name, string(r.UID), r.APIVersion, r.ResourceVersion, r.FieldPath} {
			_, _ = d.WriteString(s)
			_, _ = d.Write([]byte{0})
		}
	}
	return d.Sum64()
}
