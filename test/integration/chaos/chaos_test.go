package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// versionAnnotation counts the spec changes the driver made to a Certificate;
// its DNS name carries the same number, so the current spec needs exactly
// version+1 issuances in all.
const versionAnnotation = "chaos.certhub.io/version"

// report is what the run did; `make chaos` writes it as JSON (CHAOS_REPORT).
type report struct {
	Seed            uint64  `json:"seed"`
	Clusters        int     `json:"clusters"`
	Replicas        int     `json:"replicas"`
	DurationSeconds float64 `json:"faultWindowSeconds"`
	Created         int64   `json:"certificatesCreated"`
	Updated         int64   `json:"specChanges"`
	DriverErrors    int64   `json:"driverErrors"`
	Kills           int64   `json:"sigkills"`
	LateRestarts    int64   `json:"restartsAfterLeaseExpiry"`
	OutageSeconds   float64 `json:"downstreamOutageSeconds"`
	HubDownSeconds  float64 `json:"hubRestartDownSeconds"`
	ConvergeSeconds float64 `json:"convergeSecondsAfterFaults"`
	Issuances       int     `json:"issuancesSeen"`
	// The record of issued certificates against what reached the fleet.
	RecordEntries     int `json:"recordDeliveredEntries"`
	RecordUndelivered int `json:"recordUndeliveredEntries"`
	// RecordSeenReplaced: delivered entries the auditor missed (an outage
	// cut its watch) that a later entry replaced, read from the Secret.
	RecordSeenReplaced int      `json:"recordSeenOnlyAsReplaced"`
	Reached            int      `json:"certificatesReachedFleet"`
	ExactIssuances     int      `json:"certificatesIssuedExactlyAsRequired"`
	SecretWrites       int      `json:"secretWritesAudited"`
	Samples            int      `json:"ownershipSamples"`
	MaxGapSeconds      float64  `json:"maxUnownedSeconds"`
	FaultGaps          []string `json:"gapsOverlappingOutages,omitempty"`
	Checks             []string `json:"invariantsChecked"`
}

func TestChaos(tt *testing.T) {
	t := fleet.RecordFailures(tt) // the reasons again after the replicas' logs
	ctx := context.Background()
	rep := report{Seed: *seed, Clusters: len(bed.Downstreams), Replicas: 3, DurationSeconds: duration.Seconds()}
	if rep.Seed == 0 {
		rep.Seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-chaos.seed to repeat): %d Certificates, %d spec changes, %s of faults on %d clusters",
		rep.Seed, *certs, *updates, *duration, len(bed.Downstreams))
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, ns)
	}
	audit := fleet.StartAuditor(t, bed.Downstreams)
	timings := fleet.FastTimings
	replicas := fleet.Config{Binary: env.Binary, Kubeconfig: env.Kubeconfig,
		HubNamespace: bed.HubNamespace(), ArgoNamespace: bed.ArgoNamespace(), Timings: timings}

	ids := []string{"chaos-0", "chaos-1", "chaos-2"}
	var mu sync.Mutex
	running := map[string]*fleet.Replica{}
	live := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]bool{}
		for id, r := range running {
			out[id] = r.Running()
		}
		return out
	}
	for _, id := range ids {
		running[id] = replicas.Start(t, id)
	}
	for _, r := range running {
		if err := r.WaitReady(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	sampler := fleet.SampleOwnership(bed.Hub.Client, bed.HubNamespace(), live)

	start := time.Now()
	faultCtx, stopFaults := context.WithTimeout(ctx, *duration)
	defer stopFaults()
	var created, updated, driverErrs, kills, late atomic.Int64
	var drivers, faults sync.WaitGroup
	for i, cp := range bed.Downstreams {
		d := &driver{cp: cp, rng: rand.New(rand.NewPCG(rep.Seed, uint64(i))), created: &created, updated: &updated, errs: &driverErrs}
		n, u := share(*certs, len(bed.Downstreams), i), share(*updates, len(bed.Downstreams), i)
		drivers.Go(func() { d.run(ctx, start, *duration, n, u) })
		r := share(*requests, len(bed.Downstreams), i)
		drivers.Go(func() { createRequests(ctx, cp, start, *duration/2, r, func() { driverErrs.Add(1) }) })
	}

	// SIGKILL a random replica every few seconds and start it again under the
	// same identity; every third one stays down past its fences' expiry so
	// the other replicas take its clusters over first.
	rng := rand.New(rand.NewPCG(rep.Seed, 1<<32))
	faults.Go(func() {
		for {
			if !pause(faultCtx, *killEvery+time.Duration(rng.Int64N(int64(*killEvery)))) {
				return
			}
			mu.Lock()
			id := ids[rng.IntN(len(ids))]
			victim := running[id]
			delete(running, id) // not running from now on: its clusters count as unowned
			mu.Unlock()
			_ = victim.Stop(syscall.SIGKILL) // exits with "signal: killed"
			down := 500 * time.Millisecond
			if kills.Add(1)%3 == 0 {
				down = timings.LeaseDuration + 2*time.Second
				late.Add(1)
			}
			pause(ctx, down)
			r, err := replicas.TryStart(t, id)
			if err != nil {
				t.Errorf("restart %s: %v", id, err) // t.Fatal belongs to the test goroutine
				return
			}
			mu.Lock()
			running[id] = r
			mu.Unlock()
		}
	})
	// A replica that exits on its own is a failure (the hub must ride out
	// every fault here); like a kubelet, restart it so the run goes on.
	var crashed []string
	faults.Go(func() {
		for pause(faultCtx, 250*time.Millisecond) {
			mu.Lock()
			for id, r := range running {
				if !r.Running() {
					crashed = append(crashed, fmt.Sprintf("%s at %s", r, time.Now().Format("15:04:05.0")))
					restarted, err := replicas.TryStart(t, id)
					if err != nil {
						t.Errorf("restart %s: %v", id, err)
						delete(running, id)
						continue
					}
					running[id] = restarted
				}
			}
			mu.Unlock()
		}
	})
	var outageWin, hubWin window
	// Stop one downstream API server for -chaos.outage, a fifth into the run.
	faults.Go(func() {
		if !pause(faultCtx, *duration/5) {
			return
		}
		cp := bed.Downstreams[0]
		t0 := time.Now()
		outageWin.set(t0, time.Time{})
		if err := cp.StopAPIServer(); err != nil {
			t.Errorf("stop %s: %v", cp.Name, err)
			return
		}
		pause(ctx, *outage)
		if err := cp.StartAPIServer(ctx); err != nil {
			t.Errorf("start %s again: %v", cp.Name, err)
		}
		outageWin.set(t0, time.Now())
		rep.OutageSeconds = time.Since(t0).Seconds()
		t.Logf("%s's API server down %s → %s (%.1fs)", cp.Name, t0.Format("15:04:05.0"), time.Now().Format("15:04:05.0"), rep.OutageSeconds)
	})
	// Restart the hub API server once, two thirds into the run.
	faults.Go(func() {
		if !pause(faultCtx, *duration*2/3) {
			return
		}
		t0 := time.Now()
		hubWin.set(t0, time.Time{})
		if err := bed.Hub.StopAPIServer(); err != nil {
			t.Errorf("stop hub: %v", err)
			return
		}
		if err := bed.Hub.StartAPIServer(ctx); err != nil {
			t.Errorf("start hub again: %v", err)
		}
		hubWin.set(t0, time.Now())
		rep.HubDownSeconds = time.Since(t0).Seconds()
		t.Logf("hub API server restarted: down %s → %s (%.1fs)", t0.Format("15:04:05.0"), time.Now().Format("15:04:05.0"), rep.HubDownSeconds)
	})
	faults.Wait()
	drivers.Wait()
	faultsOver := time.Now()
	rep.Created, rep.Updated, rep.DriverErrors, rep.Kills, rep.LateRestarts = created.Load(), updated.Load(), driverErrs.Load(), kills.Load(), late.Load()
	t.Logf("faults over after %s: %d created, %d spec changes (%d driver errors retried), %d SIGKILLs (%d restarted after lease expiry)",
		time.Since(start).Round(time.Second), rep.Created, rep.Updated, rep.DriverErrors, rep.Kills, rep.LateRestarts)
	for _, c := range crashed {
		t.Errorf("%s exited on its own during the run", c)
	}
	if t.Failed() {
		t.FailNow()
	}

	all := waitConverged(t, 3*time.Minute)
	rep.ConvergeSeconds = time.Since(faultsOver).Seconds()
	samples := sampler.Finish()
	rep.Samples = len(samples)

	checkIssuedForSpec(t, all, audit, &rep)
	expectQuiet(t, all, audit, stableFor)
	rep.Checks = append(rep.Checks, fmt.Sprintf("stable: no issuance and no revision change in the %s after convergence", stableFor))
	checkNoSecretLost(t, audit, &rep)
	checkOwnershipGaps(t, samples, timings, &outageWin, &hubWin, &rep)
	checkRecordMatches(t, audit, *requests, &rep)
	rep.SecretWrites = audit.Check(t) // one writer per fence transition
	rep.Checks = append(rep.Checks, fmt.Sprintf("%d Secret writes audited: one writer per fence transition, transitions never go backwards", rep.SecretWrites))

	raw, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("chaos report:\n%s", raw)
	if p := os.Getenv("CHAOS_REPORT"); p != "" {
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// driver creates and updates one cluster's Certificates on a schedule: the
// creations spread over the first half of the fault window, the spec changes
// over the second. An operation that fails (the API server is down) is
// retried; the schedule then catches up.
type driver struct {
	cp                     *testbed.ControlPlane
	rng                    *rand.Rand
	created, updated, errs *atomic.Int64
}

func (d *driver) run(ctx context.Context, start time.Time, window time.Duration, n, u int) {
	every := func(k int) time.Duration { return window / 2 / time.Duration(max(k, 1)) }
	for i := 0; i < n; {
		pause(ctx, time.Until(start.Add(time.Duration(i)*every(n))))
		name := fmt.Sprintf("crt-%04d", i)
		err := d.cp.Client.Create(ctx, certificate(name, 0))
		if err == nil || apierrors.IsAlreadyExists(err) {
			d.created.Add(1)
			i++
			continue
		}
		d.errs.Add(1)
		pause(ctx, 500*time.Millisecond)
	}
	mid := start.Add(window / 2)
	for j := 0; j < u; {
		pause(ctx, time.Until(mid.Add(time.Duration(j)*every(u))))
		if d.updateOne(ctx) {
			d.updated.Add(1)
			j++
			continue
		}
		pause(ctx, 250*time.Millisecond)
	}
}

// updateOne changes the DNS name of a random Certificate that is issued for
// its current spec, so every change needs exactly one issuance.
func (d *driver) updateOne(ctx context.Context) bool {
	list := &cmapi.CertificateList{}
	if err := d.cp.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		d.errs.Add(1)
		return false
	}
	var ready []*cmapi.Certificate
	for i := range list.Items {
		if issuedForSpec(&list.Items[i]) {
			ready = append(ready, &list.Items[i])
		}
	}
	if len(ready) == 0 {
		return false
	}
	c := ready[d.rng.IntN(len(ready))]
	v, _ := strconv.Atoi(c.Annotations[versionAnnotation])
	next := certificate(c.Name, v+1)
	c.Annotations = next.Annotations
	c.Spec.CommonName, c.Spec.DNSNames = next.Spec.CommonName, next.Spec.DNSNames
	if err := d.cp.Client.Update(ctx, c); err != nil {
		d.errs.Add(1)
		return false
	}
	return true
}

func certificate(name string, version int) *cmapi.Certificate {
	cn := fmt.Sprintf("%s-v%d.chaos.example.com", name, version)
	return fixture.Certificate(ns, name, issuerName, fixture.WithAnnotation(versionAnnotation, strconv.Itoa(version)), fixture.WithNames(cn, cn))
}

// issuedForSpec: Ready, and Ready was decided on the current generation.
func issuedForSpec(c *cmapi.Certificate) bool {
	r := fixture.Condition(c, cmapi.CertificateConditionReady)
	return r != nil && r.Status == cmmeta.ConditionTrue && r.ObservedGeneration == c.Generation
}

type found struct {
	cp  *testbed.ControlPlane
	crt *cmapi.Certificate
}

// The invariants of the final state, each a checker of its own.

// checkIssuedForSpec: every Certificate is Ready with a certificate that
// verifies against the CA and matches its current spec (DNS names, key), and
// none was issued more often than its spec changes required (audited
// distinct certificates and status.revision).
func checkIssuedForSpec(t testing.TB, all []found, audit *fleet.Auditor, rep *report) {
	t.Helper()
	if len(all) != *certs {
		t.Errorf("%d Certificates downstream, want %d", len(all), *certs)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.CAPEM)
	for _, c := range all {
		s := &corev1.Secret{}
		if err := c.cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: c.crt.Spec.SecretName}, s); err != nil {
			t.Errorf("%s/%s: Secret %s: %v (lost)", c.cp.Name, c.crt.Name, c.crt.Spec.SecretName, err)
			continue
		}
		if err := validFor(s, c.crt, pool); err != nil {
			t.Errorf("%s/%s: %v", c.cp.Name, c.crt.Name, err)
		}
		want, _ := strconv.Atoi(c.crt.Annotations[versionAnnotation])
		want++
		seen := audit.Serials(c.cp.Name, ns, s.Name)
		rep.Issuances += seen
		if seen == want {
			rep.ExactIssuances++
		}
		if seen > want {
			t.Errorf("%s/%s: %d distinct certificates written, its spec needed %d", c.cp.Name, c.crt.Name, seen, want)
		}
		if r := c.crt.Status.Revision; r == nil || *r > want {
			t.Errorf("%s/%s: status.revision %v, its spec needed %d issuances", c.cp.Name, c.crt.Name, r, want)
		}
	}
	rep.Checks = append(rep.Checks, fmt.Sprintf("%d Certificates Ready with a certificate that verifies against the CA and matches DNS names and key", len(all)),
		fmt.Sprintf("issuances: %d seen, %d of %d Certificates issued exactly as often as their spec required, none more", rep.Issuances, rep.ExactIssuances, len(all)))
}

// checkNoSecretLost: no managed Secret was deleted (nothing in the run deletes one).
func checkNoSecretLost(t testing.TB, audit *fleet.Auditor, rep *report) {
	t.Helper()
	if del := audit.Deleted(); len(del) > 0 {
		t.Errorf("managed Secrets deleted during the run: %v", del)
	}
	rep.Checks = append(rep.Checks, "no managed Secret deleted or missing")
}

// checkOwnershipGaps: no cluster unowned longer than the fence duration +
// 2s. Two faults take ownership away by design: while the hub API server is
// down nobody can hold a fence, and a replica that starts while a cluster is
// unreachable cannot connect it, so if the assignment names that replica the
// cluster waits for it. Gaps overlapping those outages are reported with how
// long after the outage the cluster was owned again, which must be within
// the inventory's reconnect cap + the bound.
func checkOwnershipGaps(t testing.TB, samples []fleet.Sample, timings fleet.Timings, outageWin, hubWin *window, rep *report) {
	t.Helper()
	bound := timings.LeaseDuration + 2*time.Second
	afterFault := inventory.DefaultMaxReconnectDelay + bound
	var keys []string
	for _, cp := range bed.Downstreams {
		keys = append(keys, cp.Name)
	}
	var maxGap time.Duration
	for _, g := range fleet.Gaps(samples, keys) {
		fault, end := "", time.Time{}
		switch {
		case g.HubDown || hubWin.overlaps(g.From, g.To):
			fault, end = "hub restart", hubWin.to
		case g.Key == bed.Downstreams[0].Name && outageWin.overlaps(g.From, g.To):
			fault, end = "its API server down", outageWin.to
		}
		if fault != "" {
			after := g.To.Sub(end)
			rep.FaultGaps = append(rep.FaultGaps, fmt.Sprintf("%s %.1fs (%s → %s) during %s; owned again %.1fs after it ended",
				g.Key, g.Length().Seconds(), g.From.Format("15:04:05.0"), g.To.Format("15:04:05.0"), fault, after.Seconds()))
			if after > afterFault {
				t.Errorf("%s owned again only %s after the %s ended, want <= %s", g.Key, after.Round(10*time.Millisecond), fault, afterFault)
			}
			continue
		}
		maxGap = max(maxGap, g.Length())
		if g.Length() > bound {
			t.Errorf("%s unowned for %s (%s → %s), want <= lease duration + 2s = %s", g.Key, g.Length().Round(10*time.Millisecond),
				g.From.Format("15:04:05.000"), g.To.Format("15:04:05.000"), bound)
		}
	}
	rep.MaxGapSeconds = maxGap.Seconds()
	rep.Checks = append(rep.Checks, fmt.Sprintf("longest unowned stretch %.1fs (bound %s) over %d samples; %d stretches overlapped an outage and ended within %s of it",
		rep.MaxGapSeconds, bound, rep.Samples, len(rep.FaultGaps), afterFault))
}

// stableFor is the quiet period of the final stability check: several
// resyncs of every Certificate, and a re-issue loop runs tens of issuances
// a second.
const stableFor = 5 * time.Second

// expectQuiet checks the stability invariant on the converged fleet: for
// quiet, the auditor sees no new certificate in any managed Secret, and
// afterwards every Certificate still has the revision it converged with.
func expectQuiet(t testing.TB, all []found, audit *fleet.Auditor, quiet time.Duration) {
	t.Helper()
	// The auditor's informer of a cluster whose API server was down relists
	// after its back-off: what it has not recorded yet was issued before now.
	audit.WaitCaughtUp(t, bed.Downstreams, time.Minute)
	before := audit.Issuances()
	deadline := time.Now().Add(quiet)
	for time.Now().Before(deadline) {
		if n := audit.Issuances(); n != before {
			t.Errorf("%d certificates issued after convergence without a trigger", n-before)
			return
		}
		time.Sleep(100 * time.Millisecond) // the poll interval of a check that must hold for the whole period
	}
	for _, c := range all {
		cur := &cmapi.Certificate{}
		if err := c.cp.Client.Get(context.Background(), client.ObjectKeyFromObject(c.crt), cur); err != nil {
			t.Errorf("%s/%s: %v", c.cp.Name, c.crt.Name, err)
			continue
		}
		if !reflect.DeepEqual(cur.Status.Revision, c.crt.Status.Revision) {
			t.Errorf("%s/%s: revision %v after convergence, %v %s later", c.cp.Name, c.crt.Name, c.crt.Status.Revision, cur.Status.Revision, quiet)
		}
	}
}

// waitConverged waits until every Certificate in every cluster is issued for
// its current spec, and returns them.
func waitConverged(t testing.TB, timeout time.Duration) []found {
	t.Helper()
	var all []found
	var pending []string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		all, pending = all[:0], pending[:0]
		for _, cp := range bed.Downstreams {
			list := &cmapi.CertificateList{}
			if err := cp.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				pending = append(pending, cp.Name+": "+err.Error())
				continue
			}
			for i := range list.Items {
				c := &list.Items[i]
				all = append(all, found{cp: cp, crt: c})
				if !issuedForSpec(c) {
					pending = append(pending, cp.Name+"/"+c.Name)
				}
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		sort.Strings(pending)
		t.Fatalf("%d Certificates not issued for their current spec %s after the faults ended: %v", len(pending), timeout, pending[:min(len(pending), 20)])
	}
	return all
}

// validFor checks the Secret holds a certificate for crt's current spec,
// signed by the CA, with the matching private key.
func validFor(s *corev1.Secret, crt *cmapi.Certificate, roots *x509.CertPool) error {
	if _, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); err != nil {
		return fmt.Errorf("Secret %s: key and certificate do not match: %w", s.Name, err)
	}
	b, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if b == nil {
		return fmt.Errorf("Secret %s: no certificate", s.Name)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return fmt.Errorf("Secret %s: %w", s.Name, err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: crt.Spec.DNSNames[0]}); err != nil {
		return fmt.Errorf("Secret %s: certificate does not verify for %s: %w", s.Name, crt.Spec.DNSNames[0], err)
	}
	if !slices.Equal(cert.DNSNames, crt.Spec.DNSNames) {
		return fmt.Errorf("Secret %s: DNS names %v, spec wants %v", s.Name, cert.DNSNames, crt.Spec.DNSNames)
	}
	return nil
}

// share is cluster i's part of n spread over k clusters.
func share(n, k, i int) int {
	s := n / k
	if i < n%k {
		s++
	}
	return s
}

// window is a fault's [from, to]; to is zero while it lasts.
type window struct {
	mu       sync.Mutex
	from, to time.Time
}

func (w *window) set(from, to time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.from, w.to = from, to
}

// overlaps reports whether [a, b] meets the window.
func (w *window) overlaps(a, b time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.from.IsZero() {
		return false
	}
	return !b.Before(w.from) && (w.to.IsZero() || !a.After(w.to))
}

// pause waits d or until ctx ends; it reports whether d passed. It paces the
// load and the faults; nothing here waits for a state with it.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
