package issued

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// index is every entry of the record's ConfigMaps, by key and by object.
// A key held by two ConfigMaps (two replicas recorded one CertificateRequest)
// is one entry, counted until the last one drops it.
type index struct {
	mu       sync.RWMutex
	byKey    map[string]*Entry
	refs     map[string]int
	byObject map[Object][]*Entry
	// byCluster: cluster → key → entry (revocation selects per cluster).
	byCluster map[string]map[string]*Entry
	chunks    map[string]map[string]struct{} // ConfigMap name → its keys
	bad       map[string]error               // ConfigMap/key → why it did not decode
	// local: entries this replica stored that no ConfigMap seen holds yet.
	local map[string]struct{}
}

func newIndex() *index {
	return &index{byKey: map[string]*Entry{}, refs: map[string]int{}, byObject: map[Object][]*Entry{}, byCluster: map[string]map[string]*Entry{},
		chunks: map[string]map[string]struct{}{}, bad: map[string]error{}, local: map[string]struct{}{}}
}

// apply makes the index hold cm's entries (nil data: cm was deleted). Only
// keys cm did not hold before are decoded: entries are never changed in
// place, only added and pruned.
func (x *index) apply(name string, data map[string]string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	had := x.chunks[name]
	for k := range had {
		if _, still := data[k]; !still {
			x.drop(k)
		}
	}
	if len(data) == 0 {
		delete(x.chunks, name)
		return
	}
	keys := make(map[string]struct{}, len(data))
	for k, v := range data {
		keys[k] = struct{}{}
		if _, old := had[k]; old {
			continue
		}
		e, err := decode(v)
		if err != nil {
			x.bad[name+"/"+k] = err
			continue
		}
		x.add(k, e)
		if _, ok := x.local[k]; ok {
			delete(x.local, k) // the informer shows what this replica stored
			x.drop(k)
		}
	}
	x.chunks[name] = keys
}

// add counts one more holder of key; the first one's entry is kept.
func (x *index) add(k string, e *Entry) {
	x.refs[k]++
	if _, ok := x.byKey[k]; ok {
		return
	}
	x.byKey[k] = e
	o := e.Object()
	x.byObject[o] = append(x.byObject[o], e)
	if x.byCluster[e.Cluster] == nil {
		x.byCluster[e.Cluster] = map[string]*Entry{}
	}
	x.byCluster[e.Cluster][k] = e
}

func (x *index) drop(k string) {
	x.refs[k]--
	if x.refs[k] > 0 {
		return
	}
	delete(x.refs, k)
	e, ok := x.byKey[k]
	if !ok {
		return
	}
	delete(x.byKey, k)
	if m := x.byCluster[e.Cluster]; m != nil {
		delete(m, k)
		if len(m) == 0 {
			delete(x.byCluster, e.Cluster)
		}
	}
	o := e.Object()
	list := slices.DeleteFunc(x.byObject[o], func(p *Entry) bool { return p == e })
	if len(list) == 0 {
		delete(x.byObject, o)
	} else {
		x.byObject[o] = list
	}
}

// remember holds entries this replica stored until the informer shows
// them in a ConfigMap.
func (x *index) remember(es []*Entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, e := range es {
		k := e.Key()
		if _, ok := x.local[k]; ok || x.refs[k] > 0 {
			continue
		}
		x.local[k] = struct{}{}
		x.add(k, e)
	}
}

func (x *index) lookup(k string) (Entry, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, ok := x.byKey[k]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

func (x *index) object(o Object) []Entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]Entry, 0, len(x.byObject[o]))
	for _, e := range x.byObject[o] {
		out = append(out, *e)
	}
	return out
}

func (x *index) cluster(name string) []Entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]Entry, 0, len(x.byCluster[name]))
	for _, e := range x.byCluster[name] {
		out = append(out, *e)
	}
	return out
}

func (x *index) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byKey)
}

// Entries decodes every entry of cms, one per key (the CLI's and a
// rebuild's view); undecodable values are returned as errors by name.
func Entries(cms []corev1.ConfigMap) ([]Entry, map[string]error) {
	x := newIndex()
	for i := range cms {
		if cms[i].Labels[RecordLabel] == RecordChunk {
			x.apply(cms[i].Name, cms[i].Data)
		}
	}
	out := make([]Entry, 0, len(x.byKey))
	for _, e := range x.byKey {
		out = append(out, *e)
	}
	SortEntries(out)
	return out, x.bad
}

// SortEntries orders entries by when they were recorded, then key.
func SortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		if c := a.RecordedAt.Compare(b.RecordedAt); c != 0 {
			return c
		}
		if a.Key() < b.Key() {
			return -1
		}
		return 1
	})
}

// Undelivered reports the serials of entries whose certificate never
// reached their object: a later entry of the same object replaced the same
// serial (the replica that recorded the first was stopped before it wrote).
func Undelivered(es []Entry) map[string]bool {
	type slot struct {
		o        Object
		replaces string
	}
	latest := map[slot]Entry{}
	out := map[string]bool{}
	for _, e := range es {
		if e.Kind != KindCertificate || e.Why == WhyAdopted || e.Why == WhyRebuilt {
			continue
		}
		s := slot{e.Object(), e.Replaces}
		prev, ok := latest[s]
		switch {
		case !ok:
			latest[s] = e
		case e.RecordedAt.After(prev.RecordedAt):
			out[prev.Key()] = true
			latest[s] = e
		default:
			out[e.Key()] = true
		}
	}
	return out
}
