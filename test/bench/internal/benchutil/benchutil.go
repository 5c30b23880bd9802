// Package benchutil holds what the benchmark commands share: a watch that
// records when Certificates turn Ready, a scrape of an API server's request
// counters, order statistics, and the JSON results file.
package benchutil

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// Logf prints a progress line with the time to stderr (tables go to stdout).
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// WriteJSON writes v to out, or to test/bench/results/<prefix>-<UTC time>.json
// when out is empty, and returns the path.
func WriteJSON(prefix, out string, v any) (string, error) {
	if out == "" {
		out = filepath.Join("test", "bench", "results", prefix+"-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	return out, os.WriteFile(out, raw, 0o644)
}

// Median of xs (the upper one for an even count); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Quantile q (0..1) of ds by nearest rank.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

// MS is d in milliseconds.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ReadyWatcher records when each Certificate in a namespace is first seen Ready.
type ReadyWatcher struct {
	mu      sync.Mutex
	readyAt map[string]time.Time
	waiters map[string]chan struct{}
}

// WatchReady starts watching Certificates in ns (all namespaces when empty)
// until ctx ends.
func WatchReady(ctx context.Context, cfg *rest.Config, ns string) (*ReadyWatcher, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: testbed.Scheme()})
	if err != nil {
		return nil, err
	}
	var opts []client.ListOption
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	wi, err := c.Watch(ctx, &cmapi.CertificateList{}, opts...)
	if err != nil {
		return nil, err
	}
	w := &ReadyWatcher{readyAt: map[string]time.Time{}, waiters: map[string]chan struct{}{}}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			crt, ok := ev.Object.(*cmapi.Certificate)
			if !ok || ev.Type == watch.Deleted || !fixture.IsReady(crt) {
				continue
			}
			now := time.Now()
			key := crt.Namespace + "/" + crt.Name
			w.mu.Lock()
			if _, seen := w.readyAt[key]; !seen {
				w.readyAt[key] = now
				if ch := w.waiters[key]; ch != nil {
					close(ch)
					delete(w.waiters, key)
				}
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// Wait returns a channel closed once namespace/name is Ready.
func (w *ReadyWatcher) Wait(namespace, name string) <-chan struct{} {
	key := namespace + "/" + name
	w.mu.Lock()
	defer w.mu.Unlock()
	c := make(chan struct{})
	if _, ok := w.readyAt[key]; ok {
		close(c)
		return c
	}
	if old := w.waiters[key]; old != nil {
		return old
	}
	w.waiters[key] = c
	return c
}

// ReadyAt is when namespace/name was first seen Ready.
func (w *ReadyWatcher) ReadyAt(namespace, name string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.readyAt[namespace+"/"+name]
	return t, ok
}

// CreateAndWait creates crt with c and returns how long until w saw it
// Ready (at most two minutes).
func (w *ReadyWatcher) CreateAndWait(ctx context.Context, c client.Client, crt *cmapi.Certificate) (time.Duration, error) {
	ready := w.Wait(crt.Namespace, crt.Name)
	start := time.Now()
	if err := c.Create(ctx, crt); err != nil {
		return 0, err
	}
	select {
	case <-ready:
		at, _ := w.ReadyAt(crt.Namespace, crt.Name)
		return at.Sub(start), nil
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("%s never Ready", crt.Name)
	}
}

// Ready is how many Certificates were seen Ready.
func (w *ReadyWatcher) Ready() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.readyAt)
}

// Request is one series of apiserver_request_total.
type Request struct {
	Verb, Resource, Subresource, Code string
}

// Write reports whether the request changed state.
func (r Request) Write() bool {
	switch r.Verb {
	case "POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE":
		return true
	}
	return false
}

// ReadsPerCert is the GETs of single objects in d by n issued
// certificates (lists and watches are not counted), and the same by
// resource: what the write path reads per issuance.
func ReadsPerCert(d map[Request]float64, n int) (float64, map[string]float64) {
	by := map[string]float64{}
	total := 0.0
	for k, v := range d {
		if k.Verb != "GET" || k.Resource == "leases" {
			continue
		}
		by[k.Resource] += v / float64(n)
		total += v
	}
	return total / float64(n), by
}

// Requests scrapes the API server's apiserver_request_total counters.
func Requests(ctx context.Context, cfg *rest.Config) (map[Request]float64, error) {
	m, err := fleet.APIServerMetrics(ctx, cfg)
	if err != nil {
		return nil, err
	}
	out := map[Request]float64{}
	for _, x := range m["apiserver_request_total"] {
		l := x.Labels
		out[Request{Verb: l["verb"], Resource: l["resource"], Subresource: l["subresource"], Code: l["code"]}] += x.Value
	}
	return out, nil
}

// Delta is after - before per series, dropping zeros.
func Delta(before, after map[Request]float64) map[Request]float64 {
	out := map[Request]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// WritesPerCert divides the write requests in d by n issued certificates,
// less the n Certificate creates the benchmark itself made. It returns the total and
// the same by "VERB resource[/subresource]".
func WritesPerCert(d map[Request]float64, n int) (float64, map[string]float64) {
	by := map[string]float64{}
	total := 0.0
	for k, v := range d {
		if !k.Write() || k.Resource == "leases" { // kube-apiserver's own identity Lease
			continue
		}
		if k.Verb == "POST" && k.Resource == "certificates" && k.Subresource == "" {
			v -= float64(n)
		}
		if v <= 0 {
			continue
		}
		name := k.Verb + " " + k.Resource
		if k.Subresource != "" {
			name += "/" + k.Subresource
		}
		if !strings.HasPrefix(k.Code, "2") {
			name += " " + k.Code
		}
		by[name] += v / float64(n)
		total += v
	}
	return total / float64(n), by
}

// Download saves the body of a GET of url at path.
func Download(ctx context.Context, url, path string) error {
	return download(ctx, http.DefaultClient, url, path)
}

// APIServerProfile saves a CPU profile of the API server at cfg, taken over
// the next d (its /debug/pprof/profile, as cfg's user), at path.
func APIServerProfile(ctx context.Context, cfg *rest.Config, d time.Duration, path string) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	return download(ctx, hc, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(cfg.Host, "/"), int(d.Seconds())), path)
}

func download(ctx context.Context, hc *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return f.Close()
}

// CreateInBatches calls create(i) for i in [0, n), 8 at a time (what one
// client's connection pool serves without queueing), and returns the
// first error.
func CreateInBatches(n int, create func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := create(i); err != nil {
				errs <- err
			}
		})
		if i%8 == 7 {
			wg.Wait()
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}
