package fleet

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/testbed"
)

// Write is one observed version of a managed Secret downstream.
type Write struct {
	Cluster, Secret, Writer string
	Transition              int
	RV                      string
	// Serial is the serial number of the certificate in tls.crt ("" if none).
	Serial string
}

// Auditor records every version of every certhub-managed Secret in the
// downstream clusters, in the order each API server serves them. An informer
// that loses its API server relists when it comes back, so versions written
// while the auditor was cut off may be missed; none is invented.
type Auditor struct {
	clusters []string
	mu       sync.Mutex
	writes   map[string][]Write         // by cluster
	deleted  map[string][]string        // by cluster: namespace/name
	serials  map[string]map[string]bool // by cluster/namespace/name
}

// StartAuditor starts one informer per downstream cluster; the test's cleanup stops them.
func StartAuditor(t testing.TB, downstreams []*testbed.ControlPlane) *Auditor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := &Auditor{writes: map[string][]Write{}, deleted: map[string][]string{}, serials: map[string]map[string]bool{}}
	for _, cp := range downstreams {
		a.clusters = append(a.clusters, cp.Name)
		cs, err := kubernetes.NewForConfig(cp.Config)
		if err != nil {
			t.Fatal(err)
		}
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = certsync.ManagedLabel + "=" + certsync.ManagedValue
		}))
		inf := f.Core().V1().Secrets().Informer()
		name := cp.Name
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { a.record(name, o) },
			UpdateFunc: func(_, o any) { a.record(name, o) },
			DeleteFunc: func(o any) {
				if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				if s, ok := o.(*corev1.Secret); ok {
					a.mu.Lock()
					a.deleted[name] = append(a.deleted[name], s.Namespace+"/"+s.Name)
					a.mu.Unlock()
				}
			},
		}); err != nil {
			t.Fatal(err)
		}
		f.Start(ctx.Done())
		if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("audit informer for %s did not sync", name)
		}
	}
	return a
}

func (a *Auditor) record(cluster string, o any) {
	s, ok := o.(*corev1.Secret)
	if !ok {
		return
	}
	w := Write{Cluster: cluster, Secret: s.Namespace + "/" + s.Name, RV: s.ResourceVersion, Serial: serial(s.Data[corev1.TLSCertKey])}
	stamp := s.Annotations[certsync.WriterAnnotation]
	if i := strings.LastIndex(stamp, "/"); i > 0 {
		w.Writer = stamp[:i]
		w.Transition, _ = strconv.Atoi(stamp[i+1:])
	} else {
		w.Writer, w.Transition = stamp, -1
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writes[cluster] = append(a.writes[cluster], w)
	if w.Serial != "" {
		k := cluster + "/" + w.Secret
		if a.serials[k] == nil {
			a.serials[k] = map[string]bool{}
		}
		a.serials[k][w.Serial] = true
	}
}

func serial(certPEM []byte) string {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return ""
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return ""
	}
	return c.SerialNumber.String()
}

// Check asserts no cluster was written by two replicas within one fence
// period: every write carries "<replica>/<fence transition>"; a transition
// number belongs to exactly one holder, and per cluster the transitions of
// successive writes never go backwards (a stale owner writing after a newer
// owner began would do exactly that). Writes are put in the order the API
// server made them by resourceVersion (etcd's revision, which envtest's API
// servers expose as is): after a watch breaks, the relist delivers objects
// in name order, not write order. It returns the number of writes seen.
func (a *Auditor) Check(t testing.TB) int {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	total := 0
	for cluster, all := range a.writes {
		ws := inWriteOrder(all)
		holder := map[int]string{}
		last := -1
		for _, w := range ws {
			total++
			if w.Transition < 0 {
				t.Errorf("%s: Secret %s (rv %s) has no fence stamp: %q", cluster, w.Secret, w.RV, w.Writer)
				continue
			}
			if h, ok := holder[w.Transition]; ok && h != w.Writer {
				t.Errorf("%s: fence transition %d written by both %s and %s", cluster, w.Transition, h, w.Writer)
			}
			holder[w.Transition] = w.Writer
			if w.Transition < last {
				t.Errorf("%s: write by %s with fence transition %d after a write with transition %d (stale owner)", cluster, w.Writer, w.Transition, last)
			}
			last = max(last, w.Transition)
		}
	}
	return total
}

// inWriteOrder sorts writes by resourceVersion, dropping repeats (a relist
// delivers versions already seen).
func inWriteOrder(ws []Write) []Write {
	seen := map[string]bool{}
	var out []Write
	for _, w := range ws {
		if !seen[w.RV] {
			seen[w.RV] = true
			out = append(out, w)
		}
	}
	rv := func(w Write) uint64 { n, _ := strconv.ParseUint(w.RV, 10, 64); return n }
	slices.SortStableFunc(out, func(x, y Write) int { return cmp.Compare(rv(x), rv(y)) })
	return out
}

// Deleted returns the managed Secrets seen deleted, as cluster/namespace/name.
func (a *Auditor) Deleted() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for c, names := range a.deleted {
		for _, n := range names {
			out = append(out, c+"/"+n)
		}
	}
	return out
}

// Serials returns how many distinct certificates the Secret
// cluster/namespace/name has carried, i.e. how often it was issued.
func (a *Auditor) Serials(cluster, namespace, name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.serials[cluster+"/"+namespace+"/"+name])
}

// WaitCaughtUp polls until the auditor has seen the certificate that every
// managed Secret holds now, as each API server lists it. An informer cut
// off by an outage relists only after its back-off (up to ~30 s); what it
// records then was issued before, and must not count as new in a check
// that starts now. It fails the test after timeout.
func (a *Auditor) WaitCaughtUp(t testing.TB, downstreams []*testbed.ControlPlane, timeout time.Duration) {
	t.Helper()
	var behind []string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		behind = behind[:0]
		for _, cp := range downstreams {
			list := &corev1.SecretList{}
			if err := cp.Client.List(ctx, list, client.MatchingLabels{certsync.ManagedLabel: certsync.ManagedValue}); err != nil {
				behind = append(behind, cp.Name+": "+err.Error())
				continue
			}
			a.mu.Lock()
			for _, s := range list.Items {
				if sn := serial(s.Data[corev1.TLSCertKey]); sn != "" && !a.serials[cp.Name+"/"+s.Namespace+"/"+s.Name][sn] {
					behind = append(behind, cp.Name+"/"+s.Namespace+"/"+s.Name)
				}
			}
			a.mu.Unlock()
		}
		return len(behind) == 0, nil
	})
	if err != nil {
		t.Fatalf("the auditor has not seen the current certificate of %d Secrets after %s: %v", len(behind), timeout, behind[:min(len(behind), 10)])
	}
}

// Issuances returns how many distinct certificates all managed Secrets have
// carried so far: it grows by one with every issuance the auditor sees.
func (a *Auditor) Issuances() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, s := range a.serials {
		n += len(s)
	}
	return n
}

// Summary lists, per cluster, how many writes each replica/transition made.
func (a *Auditor) Summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	for _, c := range a.clusters {
		writers := map[string]int{}
		for _, w := range a.writes[c] {
			writers[fmt.Sprintf("%s/%d", w.Writer, w.Transition)]++
		}
		fmt.Fprintf(&b, "%s: %v; ", c, writers)
	}
	return b.String()
}
