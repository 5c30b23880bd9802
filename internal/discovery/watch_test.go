package discovery

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/test/fixture"
)

func secretMeta(ns, name, rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
}

// TestSecretStoreReplace: a full list records every Secret, forgets those
// of its own namespace it no longer holds (another namespace's watch owns
// the rest), queues what changed since it was read, and says synced once.
func TestSecretStoreReplace(t *testing.T) {
	key := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	cases := []struct {
		name       string
		ns         string
		typed      map[types.NamespacedName]string
		records    map[types.NamespacedName]string // resourceVersion read
		refs       []types.NamespacedName          // named by an Ingress
		list       []any
		wantTyped  map[types.NamespacedName]string
		wantQueued []types.NamespacedName
	}{
		{name: "first list", ns: "a", list: []any{secretMeta("a", "x", "1"), secretMeta("a", "y", "2")},
			wantTyped: map[types.NamespacedName]string{key("a", "x"): "1", key("a", "y"): "2"}},
		{name: "relist forgets its namespace's deleted Secrets only", ns: "a",
			typed:     map[types.NamespacedName]string{key("a", "x"): "1", key("a", "gone"): "1", key("b", "other"): "1"},
			list:      []any{secretMeta("a", "x", "1")},
			wantTyped: map[types.NamespacedName]string{key("a", "x"): "1", key("b", "other"): "1"}},
		{name: "the whole cluster's relist forgets in every namespace", ns: metav1.NamespaceAll,
			typed:     map[types.NamespacedName]string{key("a", "x"): "1", key("b", "gone"): "1"},
			list:      []any{secretMeta("a", "x", "1")},
			wantTyped: map[types.NamespacedName]string{key("a", "x"): "1"}},
		{name: "a changed Secret is read again, an unchanged one is not", ns: "a",
			typed:      map[types.NamespacedName]string{key("a", "x"): "1", key("a", "y"): "1"},
			records:    map[types.NamespacedName]string{key("a", "x"): "1", key("a", "y"): "1"},
			list:       []any{secretMeta("a", "x", "1"), secretMeta("a", "y", "5")},
			wantTyped:  map[types.NamespacedName]string{key("a", "x"): "1", key("a", "y"): "5"},
			wantQueued: []types.NamespacedName{key("a", "y")}},
		{name: "a deleted Secret an Ingress names is read again", ns: "a",
			typed:      map[types.NamespacedName]string{key("a", "served"): "1"},
			records:    map[types.NamespacedName]string{key("a", "served"): "1"},
			refs:       []types.NamespacedName{key("a", "served")},
			wantTyped:  map[types.NamespacedName]string{},
			wantQueued: []types.NamespacedName{key("a", "served")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &clusterState{records: map[types.NamespacedName]Record{}, refs: map[types.NamespacedName][]types.NamespacedName{},
				typed: map[types.NamespacedName]string{}, listed: tc.records != nil}
			maps.Copy(st.typed, tc.typed)
			for k, rv := range tc.records {
				st.records[k] = Record{resourceVersion: rv}
			}
			if tc.refs != nil {
				st.refs[types.NamespacedName{Namespace: "a", Name: "ingress"}] = tc.refs
			}
			w := &watch{st: st, queue: newQueue()}
			s := &secretStore{w: w, ns: tc.ns, synced: make(chan struct{})}
			if err := s.Replace(tc.list, "10"); err != nil {
				t.Fatal(err)
			}
			if err := s.Replace(tc.list, "11"); err != nil { // a second list must not close synced again
				t.Fatal(err)
			}
			select {
			case <-s.synced:
			default:
				t.Error("synced is not closed after the first list")
			}
			if !maps.Equal(st.typed, tc.wantTyped) {
				t.Errorf("versions %v, want %v", st.typed, tc.wantTyped)
			}
			var queued []types.NamespacedName
			for w.queue.Len() > 0 {
				k, _ := w.queue.Get()
				queued = append(queued, k)
				w.queue.Done(k)
			}
			if !slices.Equal(queued, tc.wantQueued) {
				t.Errorf("queued %v, want %v", queued, tc.wantQueued)
			}
		})
	}
}

// countingInformer counts the handlers registered on it.
type countingInformer struct {
	cache.Informer
	mu       sync.Mutex
	handlers int
}

func (i *countingInformer) AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.handlers++
	return nil, nil
}

func (i *countingInformer) RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.handlers--
	return nil
}

func (i *countingInformer) count() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.handlers
}

// A handler on the cluster's informer lasts as long as the engagement: the
// cluster engaged again after its first engagement ended holds one.
func TestHandleUntilEngagementEnds(t *testing.T) {
	inf := &countingInformer{}
	first, endFirst := context.WithCancel(t.Context())
	if err := handleUntil(first, inf, toolscache.ResourceEventHandlerFuncs{}); err != nil {
		t.Fatal(err)
	}
	endFirst()
	if err := handleUntil(t.Context(), inf, toolscache.ResourceEventHandlerFuncs{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return inf.count() == 1, nil
	}); err != nil {
		t.Fatalf("%d handlers registered after the first engagement ended, want 1", inf.count())
	}
}

// A Secret the hub holds at the version the watch shows (it wrote it) is
// inspected without a read; another version, or one the hub does not
// hold, is read from the API server.
func TestWrittenSecretsAreNotReadAgain(t *testing.T) {
	now := time.Now()
	written := fixture.TLSSecret(t, "apps", "web", fixture.WithValidity(now, now.Add(90*24*time.Hour)))
	written.ResourceVersion = "7"
	other := fixture.TLSSecret(t, "apps", "other", fixture.WithValidity(now, now.Add(30*24*time.Hour)))
	other.ResourceVersion = "3"
	cs := k8sfake.NewClientset(written.DeepCopy(), other.DeepCopy())
	d, _, _ := newTestDiscoverer(t, nil, now, func(o *Options) {
		o.Written = func(_ multicluster.ClusterName, key client.ObjectKey, rv string) *corev1.Secret {
			if key == client.ObjectKeyFromObject(written) && rv == "7" {
				return written.DeepCopy()
			}
			return nil
		}
	})
	st := addCluster(d, "east")
	st.typed[client.ObjectKeyFromObject(written)] = "7"
	st.typed[client.ObjectKeyFromObject(other)] = "3"
	w := &watch{d: d, name: "east", st: st, secrets: cs.CoreV1(), queue: newQueue()}
	for _, s := range []*corev1.Secret{written, other} {
		w.queue.Add(client.ObjectKeyFromObject(s))
		if !w.readNext(context.Background()) {
			t.Fatal("queue shut down")
		}
	}
	var gets []string
	for _, a := range cs.Actions() {
		if g, ok := a.(k8stesting.GetAction); ok && a.GetVerb() == "get" {
			gets = append(gets, g.GetName())
		}
	}
	if !slices.Equal(gets, []string{"other"}) {
		t.Errorf("Secrets read: %v, want only other (web was written by the hub at the version the watch shows)", gets)
	}
	for _, s := range []*corev1.Secret{written, other} {
		if r := st.records[client.ObjectKeyFromObject(s)]; r.NotAfter.IsZero() {
			t.Errorf("%s: not inspected (%+v)", s.Name, r)
		}
	}
}
