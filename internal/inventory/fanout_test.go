package inventory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// oneInformer is a cache with a single, synced informer of ConfigMaps: it
// keeps its objects for List and its registrations, and delivers events to
// them as client-go does (the store first, then every registration).
type oneInformer struct {
	cache.Cache // nil: only what the fanout uses is served
	mu          sync.Mutex
	objs        map[string]*corev1.ConfigMap
	regs        []*fakeReg
	added       int // registrations ever made
}

type fakeReg struct {
	h      toolscache.ResourceEventHandler
	resync time.Duration
	synced chan struct{} // closed once the store was delivered
}

func (r *fakeReg) HasSynced() bool {
	select {
	case <-r.synced:
		return true
	default:
		return false
	}
}

func (*fakeReg) HasSyncedChecker() toolscache.DoneChecker { return nil }

func (c *oneInformer) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return fakeInformer{c}, nil
}

func (c *oneInformer) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := list.(*corev1.ConfigMapList)
	if !ok {
		return fmt.Errorf("oneInformer lists ConfigMaps only, not %T", list)
	}
	for _, o := range c.objs {
		l.Items = append(l.Items, *o.DeepCopy())
	}
	return nil
}

// set stores cm and delivers its event.
func (c *oneInformer) set(cm *corev1.ConfigMap) {
	c.mu.Lock()
	old := c.objs[cm.Name]
	c.objs[cm.Name] = cm
	regs := slices.Clone(c.regs)
	c.mu.Unlock()
	for _, r := range regs {
		if old == nil {
			r.h.OnAdd(cm, false)
		} else {
			r.h.OnUpdate(old, cm)
		}
	}
}

func (c *oneInformer) registrations() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.regs)
}

type fakeInformer struct{ c *oneInformer }

func (i fakeInformer) add(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	i.c.mu.Lock()
	r := &fakeReg{h: h, resync: resync, synced: make(chan struct{})}
	i.c.regs = append(i.c.regs, r)
	i.c.added++
	objs := make([]*corev1.ConfigMap, 0, len(i.c.objs))
	for _, o := range i.c.objs {
		objs = append(objs, o)
	}
	i.c.mu.Unlock()
	go func() { // client-go gives a new registration its store, from its own goroutine
		for _, o := range objs {
			h.OnAdd(o, true)
		}
		close(r.synced)
	}()
	return r, nil
}

func (i fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add(h, 0)
}

func (i fakeInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add(h, p)
}

func (i fakeInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	var p time.Duration
	if o.ResyncPeriod != nil {
		p = *o.ResyncPeriod
	}
	return i.add(h, p)
}

func (i fakeInformer) RemoveEventHandler(reg toolscache.ResourceEventHandlerRegistration) error {
	i.c.mu.Lock()
	defer i.c.mu.Unlock()
	i.c.regs = slices.DeleteFunc(i.c.regs, func(r *fakeReg) bool { return r == reg })
	return nil
}

func (fakeInformer) AddIndexers(toolscache.Indexers) error { return nil }
func (fakeInformer) HasSynced() bool                       { return true }
func (fakeInformer) HasSyncedChecker() toolscache.DoneChecker {
	return nil
}
func (fakeInformer) IsStopped() bool { return false }

// seen records the names a handler was told about, in order.
type seen struct {
	mu    sync.Mutex
	names []string
}

func (s *seen) record(obj any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := fmt.Sprintf("not a ConfigMap: %T", obj)
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		name = cm.Name
	}
	s.names = append(s.names, name)
}

func (s *seen) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    s.record,
		UpdateFunc: func(_, obj any) { s.record(obj) },
		DeleteFunc: s.record,
	}
}

func (s *seen) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.names))
}

func configMap(name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"v": value}}
}

func waitSynced(t *testing.T, reg toolscache.ResourceEventHandlerRegistration) {
	t.Helper()
	if !toolscache.WaitForCacheSync(t.Context().Done(), reg.HasSynced) {
		t.Fatal("the registration never synced")
	}
}

// Every handler of an informer is served by one registration; a handler
// that comes late is first given the objects the informer holds; the
// registration ends with the last handler.
func TestFanoutServesHandlersFromOneRegistration(t *testing.T) {
	ctx := t.Context()
	under := &oneInformer{objs: map[string]*corev1.ConfigMap{}}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := newFanoutCache(ctx, under, scheme)
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	under.set(configMap("before", "1"))

	var first, late seen
	reg1, err := inf.AddEventHandler(first.handler())
	if err != nil {
		t.Fatal(err)
	}
	waitSynced(t, reg1)
	under.set(configMap("between", "1"))
	again, err := c.GetInformer(ctx, &corev1.ConfigMap{}) // another source's informer of the same kind
	if err != nil {
		t.Fatal(err)
	}
	reg2, err := again.AddEventHandlerWithOptions(late.handler(), toolscache.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := under.registrations(); n != 1 {
		t.Fatalf("%d registrations on the informer for 2 handlers, want 1", n)
	}
	if got, want := late.got(), []string{"before", "between"}; !slices.Equal(got, want) {
		t.Errorf("the late handler was given %v, want the objects held when it came: %v", got, want)
	}
	under.set(configMap("after", "1"))
	if got, want := first.got(), []string{"after", "before", "between"}; !slices.Equal(got, want) {
		t.Errorf("the first handler saw %v, want %v", got, want)
	}
	if got, want := late.got(), []string{"after", "before", "between"}; !slices.Equal(got, want) {
		t.Errorf("the late handler saw %v, want %v", got, want)
	}
	for _, reg := range []toolscache.ResourceEventHandlerRegistration{reg1, reg2} {
		if !reg.HasSynced() {
			t.Error("a handler's registration has not synced")
		}
	}

	if err := inf.RemoveEventHandler(reg1); err != nil {
		t.Fatal(err)
	}
	under.set(configMap("after", "2"))
	if n := len(first.got()); n != 3 {
		t.Errorf("a removed handler was still told: %v", first.got())
	}
	if n := len(late.got()); n != 4 {
		t.Errorf("the handler left saw %v, want the update of after", late.got())
	}
	if err := again.RemoveEventHandler(reg2); err != nil {
		t.Fatal(err)
	}
	if n := under.registrations(); n != 0 {
		t.Errorf("%d registrations on the informer after its last handler left, want 0", n)
	}

	var next seen
	reg3, err := inf.AddEventHandler(next.handler())
	if err != nil {
		t.Fatal(err)
	}
	waitSynced(t, reg3)
	if got, want := next.got(), []string{"after", "before", "between"}; !slices.Equal(got, want) || under.added != 2 {
		t.Errorf("a handler after the last left: saw %v after %d registrations, want %v after 2", got, under.added, want)
	}
}

// A handler that asks for periodic resyncs is the informer's own.
func TestFanoutLeavesResyncingHandlersToTheInformer(t *testing.T) {
	ctx := t.Context()
	under := &oneInformer{objs: map[string]*corev1.ConfigMap{}}
	c := newFanoutCache(ctx, under, clientgoscheme.Scheme)
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var a, b seen
	if _, err := inf.AddEventHandler(a.handler()); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithResyncPeriod(b.handler(), time.Minute); err != nil {
		t.Fatal(err)
	}
	under.mu.Lock()
	defer under.mu.Unlock()
	if len(under.regs) != 2 || under.regs[1].resync != time.Minute {
		t.Errorf("the resyncing handler was not registered with the informer itself: %d registrations", len(under.regs))
	}
}
