package rotation

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issuance"
	"github.com/certhub/certhub/internal/trust"
)

// StateLabel marks the state ConfigMaps (value "true"); trust watches them.
const StateLabel = trust.RotationStateLabel

// Options configure the rotations.
type Options struct {
	// Namespace is the hub namespace (CA Secrets, state ConfigMaps). Required.
	Namespace string
	// Soak, Pause, Deadline and Grace: see the package doc. Defaults 5m, 5m, 30m, 10m.
	Soak, Pause, Deadline, Grace time.Duration
	// Tick is how often rotations are stepped. Defaults to 1s.
	Tick time.Duration
	// BundleName and BundleKey name the trust bundle ConfigMap downstream;
	// empty BundleName: no bundles (publishing is not waited for).
	BundleName, BundleKey string
	// Clusters returns the engaged clusters and their labels. Required.
	Clusters func() map[multicluster.ClusterName]map[string]string
	// Scoped reports namespace-scoped registrations (they hold no bundle).
	Scoped func(multicluster.ClusterName) bool
	// GetCluster returns an engaged cluster. Required.
	GetCluster func(context.Context, multicluster.ClusterName) (cluster.Cluster, error)
	// Hub reads and writes the hub (cached reads). Required.
	Hub client.Client
	// Recorder writes Events on the ClusterIssuers. Required.
	Recorder recorder.EventRecorder
	// Registerer receives certhub_ca_rotation_*. Defaults to none.
	Registerer prometheus.Registerer
	// Fence, when set, says which clusters this replica owns: it observes
	// only those (it is connected to no others) and publishes what it saw
	// (report.go); every replica steps with the union of the fresh reports.
	// Nil: this replica observes every cluster itself. Defaults to nil.
	Fence fence.Fence
	// Identity names this replica's report. Required with Fence.
	Identity string
}

func (o *Options) defaults() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.Soak, 5 * time.Minute}, {&o.Pause, 5 * time.Minute}, {&o.Deadline, 30 * time.Minute}, {&o.Grace, 10 * time.Minute}, {&o.Tick, time.Second}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.Scoped == nil {
		o.Scoped = func(multicluster.ClusterName) bool { return false }
	}
}

// Rotator steps every rotation and answers certsync (which CA signs for a
// cluster) and trust (which CAs a bundle holds).
type Rotator struct {
	opts   Options
	log    logr.Logger
	halted *prometheus.GaugeVec
	wave   *prometheus.GaugeVec

	mu       sync.Mutex
	states   map[string]*State // by issuer
	subs     []func()
	reported map[string]report // by issuer: the last report this replica wrote
}

// New returns a Rotator; add it to the manager (it is a Runnable).
func New(opts Options, log logr.Logger) (*Rotator, error) {
	opts.defaults()
	if opts.Namespace == "" || opts.Clusters == nil || opts.GetCluster == nil || opts.Hub == nil || opts.Recorder == nil {
		return nil, errors.New("rotation: Namespace, Clusters, GetCluster, Hub and Recorder are required")
	}
	if opts.Fence != nil && opts.Identity == "" {
		return nil, errors.New("rotation: Identity is required with Fence")
	}
	r := &Rotator{opts: opts, log: log, states: map[string]*State{}, reported: map[string]report{},
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_ca_rotation_halted", Help: "1 while the CA rotation of the issuer is halted (a wave missed its deadline)."}, []string{"issuer"}),
		wave:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_ca_rotation_wave", Help: "The wave (1-based) the CA rotation of the issuer rolls; 0 before the first, waves+1 after the last."}, []string{"issuer"})}
	if opts.Registerer != nil {
		for _, g := range []**prometheus.GaugeVec{&r.halted, &r.wave} {
			if err := opts.Registerer.Register(*g); err != nil {
				are := prometheus.AlreadyRegisteredError{}
				if !errors.As(err, &are) {
					return nil, err
				}
				if existing, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
					*g = existing // a second hub in one process (tests) shares them
				}
			}
		}
	}
	return r, nil
}

// Subscribe calls fn after every phase or wave change.
func (r *Rotator) Subscribe(fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs = append(r.subs, fn)
}

// NeedLeaderElection is false: every replica steps (optimistic concurrency decides).
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start steps the rotations every Tick until ctx ends.
func (r *Rotator) Start(ctx context.Context) error {
	t := time.NewTicker(r.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.step(ctx)
		}
	}
}

func (r *Rotator) state(issuer string) *State {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.states[issuer]; s != nil {
		c := *s
		return &c
	}
	return nil
}

// Override returns the issuer of the next CA and its signing certificate
// when cluster must sign with it for ref now.
func (r *Rotator) Override(ctx context.Context, name multicluster.ClusterName, ref cmmeta.IssuerReference) (issuance.Issuer, *x509.Certificate, bool, error) {
	if ref.Kind != cmapi.ClusterIssuerKind || (ref.Group != "" && ref.Group != "cert-manager.io") {
		return nil, nil, false, nil
	}
	s := r.state(ref.Name)
	if s == nil {
		return nil, nil, false, nil
	}
	w, _ := r.waveOf(name)
	if !s.signsWithNext(w) {
		return nil, nil, false, nil
	}
	iss, ca, err := issuance.LoadCA(ctx, "next CA of ClusterIssuer "+ref.Name, r.opts.Hub, client.ObjectKey{Namespace: r.opts.Namespace, Name: s.Next})
	if err != nil {
		return nil, nil, false, err
	}
	return iss, ca, true, nil
}

// BundleSecrets returns the Secrets whose CAs the issuer's bundle holds,
// given the Secret its spec names.
func (r *Rotator) BundleSecrets(issuer, current string) []string {
	s := r.state(issuer)
	switch {
	case s == nil:
		return []string{current}
	case s.Phase == Complete:
		return []string{s.Next}
	default:
		return []string{current, s.Next}
	}
}

// waves orders the engaged clusters into waves: numeric WaveLabel values
// ascending, then the clusters without one (or not numeric).
func (r *Rotator) waves() (map[multicluster.ClusterName]int, int) {
	clusters := r.opts.Clusters()
	keys := map[int]bool{}
	unlabelled := false
	for _, l := range clusters {
		if n, err := strconv.Atoi(l[WaveLabel]); err == nil {
			keys[n] = true
		} else {
			unlabelled = true
		}
	}
	order := slices.Sorted(maps.Keys(keys))
	index := map[int]int{}
	for i, k := range order {
		index[k] = i
	}
	out := map[multicluster.ClusterName]int{}
	for name, l := range clusters {
		if n, err := strconv.Atoi(l[WaveLabel]); err == nil {
			out[name] = index[n]
		} else {
			out[name] = len(order)
		}
	}
	total := len(order)
	if unlabelled {
		total++
	}
	return out, total
}

func (r *Rotator) waveOf(name multicluster.ClusterName) (int, int) {
	w, n := r.waves()
	if i, ok := w[name]; ok {
		return i, n
	}
	return n, n // unknown: last
}

func (r *Rotator) step(ctx context.Context) {
	issuers := &cmapi.ClusterIssuerList{}
	if err := r.opts.Hub.List(ctx, issuers); err != nil {
		r.log.Error(err, "failed to list ClusterIssuers")
		return
	}
	active := map[string]bool{}
	for i := range issuers.Items {
		iss := &issuers.Items[i]
		if iss.Spec.CA == nil || iss.Annotations[NextCAAnnotation] == "" {
			continue
		}
		active[iss.Name] = true
		if err := r.stepIssuer(ctx, iss); err != nil {
			r.log.Error(err, "CA rotation step failed", "issuer", iss.Name)
		}
	}
	if r.opts.Fence != nil {
		r.forget(ctx, active)
	}
	// Rotations no longer asked for: their state goes.
	cms := &corev1.ConfigMapList{}
	if err := r.opts.Hub.List(ctx, cms, client.InNamespace(r.opts.Namespace), client.MatchingLabels{StateLabel: "true"}); err == nil {
		for i := range cms.Items {
			issuer := cms.Items[i].Data["issuer"]
			if !active[issuer] {
				_ = client.IgnoreNotFound(r.opts.Hub.Delete(ctx, &cms.Items[i]))
				r.set(issuer, nil)
				r.halted.DeleteLabelValues(issuer)
				r.wave.DeleteLabelValues(issuer)
			}
		}
	}
}

// set records s as the state of issuer and tells the subscribers when the
// phase or wave changed.
func (r *Rotator) set(issuer string, s *State) {
	r.mu.Lock()
	old := r.states[issuer]
	changed := (old == nil) != (s == nil) || (old != nil && (old.Phase != s.Phase || old.Wave != s.Wave || old.Next != s.Next))
	if s == nil {
		delete(r.states, issuer)
	} else {
		c := *s
		r.states[issuer] = &c
	}
	subs := slices.Clone(r.subs)
	r.mu.Unlock()
	if changed {
		for _, fn := range subs {
			fn()
		}
	}
}

func (r *Rotator) stepIssuer(ctx context.Context, iss *cmapi.ClusterIssuer) error {
	now := time.Now()
	key := client.ObjectKey{Namespace: r.opts.Namespace, Name: StatePrefix + iss.Name}
	cm := &corev1.ConfigMap{}
	err := r.opts.Hub.Get(ctx, key, cm)
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	exists := err == nil
	var s *State
	if exists {
		s = StateFrom(cm)
	}
	next := iss.Annotations[NextCAAnnotation]
	if s == nil || s.Next != next || s.Issuer != iss.Name {
		s = &State{Issuer: iss.Name, Next: next, Phase: Publishing, Since: now, Resume: iss.Annotations[ResumeAnnotation]}
		r.event(iss, corev1.EventTypeNormal, ReasonProgress, "CA rotation to Secret %s started: publishing the new CA in every trust bundle", next)
	}
	before := s.Data()
	waveOf, waves := r.waves()
	s.Waves = waves
	_, nextCA, err := issuance.LoadCA(ctx, "next CA of ClusterIssuer "+iss.Name, r.opts.Hub, client.ObjectKey{Namespace: r.opts.Namespace, Name: next})
	if err != nil {
		s.Reason = err.Error()
		return r.save(ctx, iss, cm, exists, s, before)
	}
	if s.Phase != Halted {
		s.Reason = ""
	}
	// Progress over every wave, and of the waves rolled so far.
	view := r.observe(ctx, iss.Name, nextCA)
	if r.opts.Fence != nil {
		r.publish(ctx, iss.Name, view)
		view = r.merge(ctx, iss.Name, view)
	}
	moved, total, missing := tally(view, waveOf, s.Wave)
	s.Moved, s.Total = moved, total
	switch s.Phase {
	case Publishing:
		if r.published(view) {
			s.Phase, s.Since = Soaking, now
			r.event(iss, corev1.EventTypeNormal, ReasonProgress, "New CA published in every cluster's trust bundle; soaking for %s", r.opts.Soak)
		}
	case Soaking:
		if now.Sub(s.Since) >= r.opts.Soak {
			s.Phase, s.Wave, s.Since = Rolling, 0, now
			r.startWave(iss, s)
		}
	case Rolling:
		if len(missing) == 0 {
			s.Since = now
			if s.Wave+1 < s.Waves {
				s.Phase = Pausing
				r.event(iss, corev1.EventTypeNormal, ReasonProgress, "Wave %d/%d done; pausing %s", s.Wave+1, s.Waves, r.opts.Pause)
			} else {
				s.Phase = Grace
				r.event(iss, corev1.EventTypeNormal, ReasonProgress, "Every wave done (%d Certificates on the new CA); grace period %s before the old CA leaves the bundles", s.Moved, r.opts.Grace)
			}
		} else if now.Sub(s.Since) >= r.opts.Deadline {
			s.Phase, s.Since = Halted, now
			s.Reason = fmt.Sprintf("wave %d/%d: Certificates not re-issued and Ready within %s: %s; annotate %s to resume", s.Wave+1, s.Waves, r.opts.Deadline, summarize(missing), ResumeAnnotation)
			r.halted.WithLabelValues(iss.Name).Set(1)
			r.event(iss, corev1.EventTypeWarning, ReasonHalted, "CA rotation halted at %s", s.Reason)
		}
	case Halted:
		if v := iss.Annotations[ResumeAnnotation]; v != s.Resume {
			s.Resume, s.Phase, s.Since, s.Reason = v, Rolling, now, ""
			r.halted.WithLabelValues(iss.Name).Set(0)
			r.event(iss, corev1.EventTypeNormal, ReasonProgress, "CA rotation resumed at wave %d/%d", s.Wave+1, s.Waves)
		}
	case Pausing:
		if now.Sub(s.Since) >= r.opts.Pause {
			s.Phase, s.Wave, s.Since = Rolling, s.Wave+1, now
			r.startWave(iss, s)
		}
	case Grace:
		if now.Sub(s.Since) >= r.opts.Grace {
			s.Phase, s.Since = Complete, now
			r.event(iss, corev1.EventTypeNormal, ReasonProgress, "CA rotation complete: the old CA left the trust bundles. Point spec.ca.secretName at %s, then remove %s", s.Next, NextCAAnnotation)
		}
	}
	switch s.Phase {
	case Rolling, Halted, Pausing:
		r.wave.WithLabelValues(iss.Name).Set(float64(s.Wave + 1))
	case Grace, Complete:
		r.wave.WithLabelValues(iss.Name).Set(float64(s.Waves + 1))
	default:
		r.wave.WithLabelValues(iss.Name).Set(0)
	}
	return r.save(ctx, iss, cm, exists, s, before)
}

func (r *Rotator) startWave(iss *cmapi.ClusterIssuer, s *State) {
	r.event(iss, corev1.EventTypeNormal, ReasonProgress, "Wave %d/%d: its clusters sign with the new CA; re-issuing what the old one signed", s.Wave+1, s.Waves)
}

func (r *Rotator) event(iss *cmapi.ClusterIssuer, typ, reason, format string, args ...any) {
	r.opts.Recorder.Eventf(iss, nil, typ, reason, "Rotate", format, args...)
	r.log.Info(fmt.Sprintf(format, args...), "issuer", iss.Name)
}

// save writes the state when it changed (the first writer of a transition
// wins; a conflict is decided again at the next tick) and publishes it.
func (r *Rotator) save(ctx context.Context, iss *cmapi.ClusterIssuer, cm *corev1.ConfigMap, exists bool, s *State, before map[string]string) error {
	// In memory first: the bundles and the signing follow at once; the
	// ConfigMap is what the other replicas (and kubectl) read.
	r.set(iss.Name, s)
	if exists && maps.Equal(before, s.Data()) && maps.Equal(cm.Data, before) {
		return nil
	}
	if !exists {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Namespace, Name: StatePrefix + iss.Name,
			Labels: map[string]string{StateLabel: "true"}}, Data: s.Data()}
		if err := r.opts.Hub.Create(ctx, cm); err != nil {
			return err
		}
	} else {
		cm = cm.DeepCopy()
		cm.Data = s.Data()
		if err := r.opts.Hub.Update(ctx, cm); err != nil {
			if apierrors.IsConflict(err) {
				return nil
			}
			return err
		}
	}
	return nil
}

// published reports whether the bundles of every registered cluster that
// holds one (not namespace-scoped) carry the new CA, as view says.
func (r *Rotator) published(view map[multicluster.ClusterName]progress) bool {
	if r.opts.BundleName == "" {
		return true
	}
	for name := range r.opts.Clusters() {
		if !r.opts.Scoped(name) && !view[name].Published {
			return false
		}
	}
	return true
}

// observe returns this replica's view of the rotation of issuer to next:
// for every cluster it owns (all it is connected to, without a Fence), whether
// its bundles hold next and how many of the issuer's Certificates moved.
// Clusters it cannot read are left out.
func (r *Rotator) observe(ctx context.Context, issuer string, next *x509.Certificate) map[multicluster.ClusterName]progress {
	want := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: next.Raw})
	out := map[multicluster.ClusterName]progress{}
	for name := range r.opts.Clusters() {
		if r.opts.Fence != nil {
			if _, owned := r.opts.Fence.Owns(name); !owned {
				continue
			}
		}
		cl, err := r.opts.GetCluster(ctx, name)
		if err != nil {
			continue
		}
		p := progress{Published: r.opts.BundleName == "" || r.opts.Scoped(name) || r.bundleHolds(ctx, cl, want)}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind + "List"))
		if err := cl.GetClient().List(ctx, list); err != nil {
			continue
		}
		for i := range list.Items {
			crt := &cmapi.Certificate{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, crt) != nil {
				continue
			}
			ref := crt.Spec.IssuerRef
			if ref.Kind != cmapi.ClusterIssuerKind || ref.Name != issuer {
				continue
			}
			p.Total++
			if r.movedTo(ctx, cl, crt, next) {
				p.Moved++
			}
		}
		out[name] = p
	}
	return out
}

// bundleHolds reports whether every bundle ConfigMap of the cluster holds ca (PEM).
func (r *Rotator) bundleHolds(ctx context.Context, cl cluster.Cluster, ca []byte) bool {
	list := &corev1.ConfigMapList{}
	if err := cl.GetClient().List(ctx, list, client.MatchingLabels{trust.ManagedLabel: "true"}); err != nil {
		return false
	}
	n := 0
	for _, cm := range list.Items {
		if cm.Name != r.opts.BundleName {
			continue
		}
		n++
		if !bytes.Contains([]byte(cm.Data[r.opts.BundleKey]), ca) {
			return false
		}
	}
	return n > 0
}

// tally counts the issuer's Certificates over every cluster (moved: Ready
// and signed by the new CA) and, per cluster of waves ≤ upTo, those not yet
// moved; a cluster of those waves that nobody observed counts as -1.
func tally(view map[multicluster.ClusterName]progress, waveOf map[multicluster.ClusterName]int, upTo int) (moved, total int, missing map[multicluster.ClusterName]int) {
	missing = map[multicluster.ClusterName]int{}
	for name, w := range waveOf {
		p, seen := view[name]
		switch {
		case !seen && w <= upTo:
			missing[name] = -1 // not reachable through the hub
		case seen:
			moved += p.Moved
			total += p.Total
			if w <= upTo && p.Moved < p.Total {
				missing[name] = p.Total - p.Moved
			}
		}
	}
	return moved, total, missing
}

func (r *Rotator) movedTo(ctx context.Context, cl cluster.Cluster, crt *cmapi.Certificate, next *x509.Certificate) bool {
	ready := false
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionReady && c.Status == cmmeta.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return false
	}
	s := &corev1.Secret{}
	if err := cl.GetClient().Get(ctx, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, s); err != nil {
		return false
	}
	b, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if b == nil {
		return false
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	return err == nil && leaf.CheckSignatureFrom(next) == nil
}

func summarize(missing map[multicluster.ClusterName]int) string {
	names := make([]string, 0, len(missing))
	for n := range missing {
		names = append(names, string(n))
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if c := missing[multicluster.ClusterName(n)]; c < 0 {
			parts = append(parts, n+" (unreachable)")
		} else {
			parts = append(parts, fmt.Sprintf("%s (%d)", n, c))
		}
	}
	return strings.Join(parts, ", ")
}
