package issued

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// The record's ConfigMaps.
const (
	// RecordLabel marks them; RecordChunk on the ConfigMaps holding
	// entries, RecordHead on the head (HeadName).
	RecordLabel = "certhub.io/record"
	RecordChunk = "issued"
	RecordHead  = "head"
	// HeadName is the head: it exists once the record is complete or
	// rebuilding (RebuildUntilKey).
	HeadName        = "certhub-issued"
	RebuildUntilKey = "rebuildUntil"
	// WriterAnnotation names the replica that appends to a chunk.
	WriterAnnotation = "certhub.io/record-writer"
	chunkPrefix      = "certhub-issued-"
)

// Defaults of Options.
const (
	DefaultMaxChunkBytes     = 768 << 10
	DefaultMaxEntries        = 250_000
	DefaultRetainAfterExpiry = 24 * time.Hour
	DefaultPruneInterval     = time.Hour
	DefaultRebuildWindow     = 24 * time.Hour
	maxBatch                 = 512
)

// ErrFull is returned by Add when the record holds MaxEntries: nothing is
// signed for delivery until pruning makes room.
var ErrFull = errors.New("the record of issued certificates is full (--issued-max-entries)")

// Options configure a Record.
type Options struct {
	// Client writes the record's ConfigMaps in the hub. Required.
	Client client.Client
	// Cache serves the informer on ConfigMaps the index is built from. Required.
	Cache cache.Cache
	// Namespace is the hub namespace of the record. Required.
	Namespace string
	// Writer names this replica (its chunks are certhub-issued-<hash>-<n>). Required.
	Writer string
	// MaxChunkBytes bounds one ConfigMap's data. Default DefaultMaxChunkBytes.
	MaxChunkBytes int
	// MaxEntries bounds the record; past it Add returns ErrFull. Default DefaultMaxEntries.
	MaxEntries int
	// RetainAfterExpiry is how long an entry stays after notAfter. Default DefaultRetainAfterExpiry.
	RetainAfterExpiry time.Duration
	// PruneInterval is how often expired entries are removed. Default DefaultPruneInterval.
	PruneInterval time.Duration
	// RebuildWindow is how long the record rebuilds after its head was
	// found missing. Default DefaultRebuildWindow.
	RebuildWindow time.Duration
	// Log defaults to discard.
	Log logr.Logger

	Clock clock.Clock
}

// Record is the hub's record of issued certificates. Start it with the
// manager (every replica: NeedLeaderElection is false).
type Record struct {
	opts  Options
	idx   *index
	queue chan pending
	ready chan struct{}

	mu           sync.Mutex
	rebuildUntil time.Time
	// writer's state: its current chunk (nil until first written).
	current *corev1.ConfigMap
	seq     int
	full    bool
}

type pending struct {
	e    *Entry
	done chan error
}

// New returns a Record; Add blocks until Start runs.
func New(opts Options) (*Record, error) {
	if opts.Client == nil || opts.Cache == nil || opts.Namespace == "" || opts.Writer == "" {
		return nil, errors.New("issued: Client, Cache, Namespace and Writer are required")
	}
	if opts.MaxChunkBytes <= 0 {
		opts.MaxChunkBytes = DefaultMaxChunkBytes
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.RetainAfterExpiry <= 0 {
		opts.RetainAfterExpiry = DefaultRetainAfterExpiry
	}
	if opts.PruneInterval <= 0 {
		opts.PruneInterval = DefaultPruneInterval
	}
	if opts.RebuildWindow <= 0 {
		opts.RebuildWindow = DefaultRebuildWindow
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Record{opts: opts, idx: newIndex(), queue: make(chan pending), ready: make(chan struct{})}, nil
}

// SetupWithManager adds r to mgr (the hub's manager).
func (r *Record) SetupWithManager(mgr manager.Manager) error { return mgr.Add(r) }

// NeedLeaderElection is false: every replica records what it signs.
func (r *Record) NeedLeaderElection() bool { return false }

// Start builds the index, opens the head, and stores what Add is given
// until ctx ends.
func (r *Record) Start(ctx context.Context) error {
	inf, err := r.opts.Cache.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("issued: informer on ConfigMaps: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.observe(o, false) },
		UpdateFunc: func(_, o any) { r.observe(o, false) },
		DeleteFunc: func(o any) { r.observe(o, true) },
	}); err != nil {
		return fmt.Errorf("issued: informer on ConfigMaps: %w", err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	if err := r.openHead(ctx); err != nil {
		return err
	}
	if err := r.resume(ctx); err != nil {
		return err
	}
	close(r.ready)
	go r.pruneLoop(ctx)
	r.writeLoop(ctx)
	return nil
}

func (r *Record) observe(o any, deleted bool) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o, deleted = t.Obj, true
	}
	cm, ok := o.(*corev1.ConfigMap)
	if !ok || cm.Namespace != r.opts.Namespace {
		return
	}
	switch cm.Labels[RecordLabel] {
	case RecordChunk:
		if deleted {
			r.idx.apply(cm.Name, nil)
			return
		}
		r.idx.apply(cm.Name, cm.Data)
	case RecordHead:
		if !deleted {
			r.setRebuild(cm)
		}
	}
}

func (r *Record) setRebuild(head *corev1.ConfigMap) {
	t, _ := time.Parse(time.RFC3339, head.Data[RebuildUntilKey])
	r.mu.Lock()
	r.rebuildUntil = t
	r.mu.Unlock()
}

// openHead reads the head, creating it (rebuilding) when it is missing.
func (r *Record) openHead(ctx context.Context) error {
	head := &corev1.ConfigMap{}
	err := r.opts.Client.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: HeadName}, head)
	if apierrors.IsNotFound(err) {
		until := r.opts.Clock.Now().Add(r.opts.RebuildWindow).UTC().Format(time.RFC3339)
		head = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Namespace, Name: HeadName,
			Labels: map[string]string{RecordLabel: RecordHead}}, Data: map[string]string{RebuildUntilKey: until}}
		r.opts.Log.Info("the record of issued certificates has no head: rebuilding it from what downstream holds", "until", until)
		err = r.opts.Client.Create(ctx, head)
		if apierrors.IsAlreadyExists(err) {
			err = r.opts.Client.Get(ctx, client.ObjectKeyFromObject(head), head)
		}
	}
	if err != nil {
		return fmt.Errorf("issued: head %s: %w", HeadName, err)
	}
	r.setRebuild(head)
	return nil
}

// Rebuilding reports whether certificates found downstream that verify
// against their hub issuer are recorded (WhyRebuilt) rather than re-issued.
func (r *Record) Rebuilding() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opts.Clock.Now().Before(r.rebuildUntil)
}

func (r *Record) writerID() string {
	sum := sha256.Sum256([]byte(r.opts.Writer))
	return hex.EncodeToString(sum[:5])
}

// resume finds this writer's last chunk, to append to it.
func (r *Record) resume(ctx context.Context) error {
	list := &corev1.ConfigMapList{}
	if err := r.opts.Client.List(ctx, list, client.InNamespace(r.opts.Namespace), client.MatchingLabels{RecordLabel: RecordChunk}); err != nil {
		return fmt.Errorf("issued: list the record: %w", err)
	}
	prefix := chunkPrefix + r.writerID() + "-"
	for i := range list.Items {
		cm := &list.Items[i]
		n, err := strconv.Atoi(strings.TrimPrefix(cm.Name, prefix))
		if !strings.HasPrefix(cm.Name, prefix) || err != nil {
			continue
		}
		if r.current == nil || n > r.seq {
			r.current, r.seq = cm.DeepCopy(), n
		}
	}
	r.full = r.current != nil && size(r.current) >= r.opts.MaxChunkBytes*15/16
	return nil
}

// Add stores e and returns once it is stored (or ctx ends): only then may
// its certificate leave the hub. An entry already recorded is not stored
// again.
func (r *Record) Add(ctx context.Context, e Entry) error {
	if _, ok := r.idx.lookup(e.Key()); ok {
		return nil
	}
	if r.idx.len() >= r.opts.MaxEntries {
		return ErrFull
	}
	if e.RecordedAt.IsZero() {
		e.RecordedAt = r.opts.Clock.Now().UTC()
	}
	e.RecordedBy = r.opts.Writer
	p := pending{e: &e, done: make(chan error, 1)}
	select {
	case r.queue <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Lookup is the entry of serial signed by issuer (for a PerObject one:
// LookupFor).
func (r *Record) Lookup(issuer, serial string) (Entry, bool) {
	return r.idx.lookup(Key(issuer, serial))
}

// LookupFor is the entry of serial signed by issuer as delivered to o: its
// PerObject entry, else the serial's entry (whoever it was signed for).
func (r *Record) LookupFor(issuer, serial string, o Object) (Entry, bool) {
	if e, ok := r.idx.lookup(ObjectKey(issuer, serial, o)); ok {
		return e, true
	}
	return r.Lookup(issuer, serial)
}

// Object is every entry signed for o, oldest first.
func (r *Record) Object(o Object) []Entry {
	es := r.idx.object(o)
	SortEntries(es)
	return es
}

// Cluster is every entry signed for objects in cluster name, oldest first.
func (r *Record) Cluster(name string) []Entry {
	es := r.idx.cluster(name)
	SortEntries(es)
	return es
}

// Len is the number of entries.
func (r *Record) Len() int { return r.idx.len() }

// Ready is closed once the index is built.
func (r *Record) Ready() <-chan struct{} { return r.ready }

// writeLoop commits what Add queues, in batches: every Add waiting while a
// write runs goes into the next one.
func (r *Record) writeLoop(ctx context.Context) {
	for {
		var batch []pending
		select {
		case <-ctx.Done():
			return
		case p := <-r.queue:
			batch = append(batch, p)
		}
	more:
		for len(batch) < maxBatch {
			select {
			case p := <-r.queue:
				batch = append(batch, p)
			default:
				break more
			}
		}
		err := r.commit(ctx, batch)
		for _, p := range batch {
			p.done <- err
		}
	}
}

// commit appends batch to this writer's current chunk, opening the next
// when it is full.
func (r *Record) commit(ctx context.Context, batch []pending) error {
	enc := make(map[string]string, len(batch))
	var es []*Entry
	for _, p := range batch {
		s, err := p.e.encode()
		if err != nil {
			return fmt.Errorf("issued: encode %s: %w", p.e.Key(), err)
		}
		enc[p.e.Key()] = s
		es = append(es, p.e)
	}
	for attempt := 0; len(enc) > 0; attempt++ {
		if attempt > 20 {
			return errors.New("issued: the record's chunk kept changing under this writer")
		}
		if r.current == nil || r.full {
			if r.current != nil {
				r.seq++
			}
			r.full = false
			r.current = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Namespace,
				Name:        fmt.Sprintf("%s%s-%d", chunkPrefix, r.writerID(), r.seq),
				Labels:      map[string]string{RecordLabel: RecordChunk},
				Annotations: map[string]string{WriterAnnotation: r.opts.Writer}}}
		}
		next := r.current.DeepCopy()
		if next.Data == nil {
			next.Data = map[string]string{}
		}
		written := map[string]bool{}
		n := size(next)
		for k, v := range enc {
			if _, ok := next.Data[k]; ok {
				written[k] = true // stored by an earlier try whose answer was lost
				continue
			}
			if n+len(k)+len(v) > r.opts.MaxChunkBytes && len(next.Data) > 0 {
				continue
			}
			next.Data[k] = v
			n += len(k) + len(v)
			written[k] = true
		}
		var err error
		if next.ResourceVersion == "" {
			err = r.opts.Client.Create(ctx, next)
		} else {
			err = r.opts.Client.Update(ctx, next)
		}
		switch {
		case err == nil:
			r.current = next
			for k := range written {
				delete(enc, k)
			}
			r.full = len(enc) > 0 // the rest goes to the next chunk
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
			// Changed under us (a prune), or a write whose answer was lost:
			// read it again and merge.
			live := &corev1.ConfigMap{}
			if gerr := r.opts.Client.Get(ctx, client.ObjectKeyFromObject(next), live); gerr == nil {
				r.current = live
			} else if apierrors.IsNotFound(gerr) {
				r.current.ResourceVersion, r.current.Data = "", nil
			} else {
				return fmt.Errorf("issued: read chunk %s: %w", next.Name, gerr)
			}
		default:
			return fmt.Errorf("issued: write chunk %s: %w", next.Name, err)
		}
	}
	r.idx.remember(es)
	return nil
}

func size(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	return n
}
