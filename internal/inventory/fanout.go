package inventory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// fanoutCache is a connected cluster's cache whose informers serve every
// event handler added to them from one client-go registration each.
//
// Every controller watches a cluster through its own multicluster-runtime
// source, and each source adds its own handler to the cluster's informer:
// a client-go listener with a ring of at least 1,024 events and two
// goroutines. Measured at 10,000 clusters (docs/benchmarks.md) those
// listeners, 7.7 per cluster, held 35 % of a replica's live heap. Here a
// cluster has one listener per informer, however many handlers it serves.
//
// A handler added after the informer's own registration is given the
// informer's current objects first (as client-go gives a new listener
// its store), with no event delivered meanwhile: it may then see an
// object twice, never miss one. Handlers run one after the other on the
// informer's delivery goroutine, so they must not block (the controllers'
// handlers only enqueue). A handler that asks for periodic resyncs is
// registered with the informer itself.
type fanoutCache struct {
	cache.Cache
	ctx    context.Context // the connection's: a join waits for a sync at most this long
	scheme *runtime.Scheme

	mu        sync.Mutex
	informers map[fanoutKey]*fanoutInformer
}

// fanoutKey names one informer of the cache: controller-runtime keeps
// structured, unstructured and metadata-only informers of a kind apart.
type fanoutKey struct {
	gvk  schema.GroupVersionKind
	form string
}

const (
	formStructured   = "structured"
	formUnstructured = "unstructured"
	formMetadata     = "metadata"
)

func newFanoutCache(ctx context.Context, c cache.Cache, scheme *runtime.Scheme) *fanoutCache {
	return &fanoutCache{Cache: c, ctx: ctx, scheme: scheme, informers: map[fanoutKey]*fanoutInformer{}}
}

// GetInformer returns the informer of obj's kind, with one registration
// for all its handlers.
func (c *fanoutCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return inf, nil //nolint:nilerr // a kind it cannot name is served as it is
	}
	form := formStructured
	switch obj.(type) {
	case runtime.Unstructured:
		form = formUnstructured
	case *metav1.PartialObjectMetadata:
		form = formMetadata
	}
	return c.fanout(fanoutKey{gvk: gvk, form: form}, inf), nil
}

// GetInformerForKind is GetInformer by kind: structured if the scheme
// knows it, as controller-runtime decides.
func (c *fanoutCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	form := formUnstructured
	if c.scheme.Recognizes(gvk) {
		form = formStructured
	}
	return c.fanout(fanoutKey{gvk: gvk, form: form}, inf), nil
}

// RemoveInformer stops the informer of obj's kind; its handlers go with it.
func (c *fanoutCache) RemoveInformer(ctx context.Context, obj client.Object) error {
	if gvk, err := apiutil.GVKForObject(obj, c.scheme); err == nil {
		c.mu.Lock()
		for key := range c.informers {
			if key.gvk == gvk {
				delete(c.informers, key)
			}
		}
		c.mu.Unlock()
	}
	return c.Cache.RemoveInformer(ctx, obj)
}

func (c *fanoutCache) fanout(key fanoutKey, inf cache.Informer) *fanoutInformer {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.informers[key]
	if f == nil {
		f = &fanoutInformer{Informer: inf, c: c, key: key}
		c.informers[key] = f
	}
	return f
}

// list returns the objects key's informer holds now.
func (c *fanoutCache) list(ctx context.Context, key fanoutKey) ([]runtime.Object, error) {
	listGVK := key.gvk.GroupVersion().WithKind(key.gvk.Kind + "List")
	var list client.ObjectList
	switch key.form {
	case formUnstructured:
		u := &unstructured.UnstructuredList{}
		u.SetGroupVersionKind(listGVK)
		list = u
	case formMetadata:
		m := &metav1.PartialObjectMetadataList{}
		m.SetGroupVersionKind(listGVK)
		list = m
	default:
		o, err := c.scheme.New(listGVK)
		if err != nil {
			return nil, err
		}
		l, ok := o.(client.ObjectList)
		if !ok {
			return nil, fmt.Errorf("%s is not a list", listGVK)
		}
		list = l
	}
	if err := c.List(ctx, list); err != nil {
		return nil, err
	}
	return meta.ExtractList(list)
}

// fanoutInformer is one informer of a fanoutCache. Its registration with
// the informer exists while it serves a handler.
type fanoutInformer struct {
	cache.Informer // HasSynced, IsStopped, AddIndexers are the informer's
	c              *fanoutCache
	key            fanoutKey

	// mu is held for reading while an event is delivered, for writing
	// while handlers join or leave.
	mu   sync.RWMutex
	subs []*fanoutHandler // replaced, never changed in place
	reg  toolscache.ResourceEventHandlerRegistration
}

// AddEventHandler adds h to the handlers served.
func (f *fanoutInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return f.add(h)
}

// AddEventHandlerWithResyncPeriod adds h; one that asks for resyncs is
// registered with the informer itself.
func (f *fanoutInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	if resync > 0 {
		return f.Informer.AddEventHandlerWithResyncPeriod(h, resync)
	}
	return f.add(h)
}

// AddEventHandlerWithOptions adds h; one that asks for resyncs is
// registered with the informer itself.
func (f *fanoutInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	if opts.ResyncPeriod != nil && *opts.ResyncPeriod > 0 {
		return f.Informer.AddEventHandlerWithOptions(h, opts)
	}
	return f.add(h)
}

// RemoveEventHandler stops serving the handler of reg; the registration
// with the informer ends with the last one.
func (f *fanoutInformer) RemoveEventHandler(reg toolscache.ResourceEventHandlerRegistration) error {
	s, ok := reg.(*fanoutHandler)
	if !ok {
		return f.Informer.RemoveEventHandler(reg)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.subs, s)
	if i < 0 {
		return nil
	}
	f.subs = slices.Delete(slices.Clone(f.subs), i, i+1)
	if len(f.subs) == 0 && f.reg != nil {
		err := f.Informer.RemoveEventHandler(f.reg)
		f.reg = nil
		return err
	}
	return nil
}

// add serves h: the first handler registers with the informer (which
// gives it every object), a later one is given the objects held now.
func (f *fanoutInformer) add(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if !toolscache.WaitForCacheSync(f.c.ctx.Done(), f.HasSynced) { // at once, usually: GetInformer waited
		return nil, fmt.Errorf("the informer of %s did not sync: %w", f.key.gvk, context.Cause(f.c.ctx))
	}
	s := &fanoutHandler{h: h, f: f}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reg == nil {
		reg, err := f.Informer.AddEventHandler(fanoutDelivery{f})
		if err != nil {
			return nil, err
		}
		f.reg = reg // it delivers nothing before f.mu is released
	} else {
		objs, err := f.c.list(f.c.ctx, f.key)
		if err != nil {
			return nil, fmt.Errorf("failed to list %s for a new handler: %w", f.key.gvk, err)
		}
		for _, obj := range objs {
			h.OnAdd(obj, true)
		}
	}
	f.subs = append(slices.Clone(f.subs), s)
	return s, nil
}

// fanoutDelivery is f's one registration with the informer: it delivers
// each event to every handler f serves.
type fanoutDelivery struct{ f *fanoutInformer }

func (d fanoutDelivery) OnAdd(obj any, initial bool) {
	d.f.deliver(func(h toolscache.ResourceEventHandler) { h.OnAdd(obj, initial) })
}

func (d fanoutDelivery) OnUpdate(old, obj any) {
	d.f.deliver(func(h toolscache.ResourceEventHandler) { h.OnUpdate(old, obj) })
}

func (d fanoutDelivery) OnDelete(obj any) {
	d.f.deliver(func(h toolscache.ResourceEventHandler) { h.OnDelete(obj) })
}

func (f *fanoutInformer) deliver(call func(toolscache.ResourceEventHandler)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, s := range f.subs {
		call(s.h)
	}
}

// synced reports whether f's registration has delivered the informer's
// initial objects (a handler given them at once needs no more).
func (f *fanoutInformer) synced() bool {
	f.mu.RLock()
	reg := f.reg
	f.mu.RUnlock()
	return reg == nil || reg.HasSynced()
}

// fanoutHandler is one handler a fanoutInformer serves; it is the
// registration returned to whoever added it.
type fanoutHandler struct {
	h toolscache.ResourceEventHandler
	f *fanoutInformer

	once sync.Once
	done chan struct{}
}

// HasSynced reports whether h has been given every object the informer
// held at its initial list.
func (s *fanoutHandler) HasSynced() bool { return s.f.synced() }

// HasSyncedChecker is HasSynced as a channel.
func (s *fanoutHandler) HasSyncedChecker() toolscache.DoneChecker {
	s.once.Do(func() {
		s.done = make(chan struct{})
		go func() {
			if toolscache.WaitForCacheSync(s.f.c.ctx.Done(), s.HasSynced) {
				close(s.done)
			}
		}()
	})
	return s
}

// Name names what HasSyncedChecker waits for.
func (s *fanoutHandler) Name() string { return "fanout handler of " + s.f.key.gvk.String() }

// Done is closed once HasSynced.
func (s *fanoutHandler) Done() <-chan struct{} { return s.done }
