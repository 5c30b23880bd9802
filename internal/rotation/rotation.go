package rotation

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issuers"
)

// StateLabel marks the state ConfigMaps (value "true"); trust watches them.
const StateLabel = hubapi.RotationStateLabel

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
	// Leaf reads the certificate of a managed Secret downstream (the hub
	// passes certsync's Secrets: read once per version, never where the
	// cluster's mode keeps keys downstream). Required.
	Leaf func(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, key client.ObjectKey) (*x509.Certificate, error)
	// Hub reads and writes the hub (cached reads). Required.
	Hub client.Client
	// Recorder writes Events on the ClusterIssuers. Required.
	Recorder recorder.EventRecorder
	// Registerer receives certhub_ca_rotation_*. Defaults to none.
	Registerer prometheus.Registerer
	// Log is the logger. Default: discard.
	Log logr.Logger
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
	stuck  *prometheus.GaugeVec

	mu        sync.Mutex
	states    map[string]*State                            // by issuer
	published map[string]map[multicluster.ClusterName]bool // by issuer: clusters whose bundles hold the next CA, as last seen
	subs      []func()
	reported  map[string]report // by issuer: the last report this replica wrote
}

// New returns a Rotator; add it to the manager (it is a Runnable).
func New(opts Options) (*Rotator, error) {
	opts.defaults()
	if opts.Namespace == "" || opts.Clusters == nil || opts.GetCluster == nil || opts.Leaf == nil || opts.Hub == nil || opts.Recorder == nil {
		return nil, errors.New("rotation: Namespace, Clusters, GetCluster, Leaf, Hub and Recorder are required")
	}
	if opts.Fence != nil && opts.Identity == "" {
		return nil, errors.New("rotation: Identity is required with Fence")
	}
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	r := &Rotator{opts: opts, log: log, states: map[string]*State{}, reported: map[string]report{}, published: map[string]map[multicluster.ClusterName]bool{},
		stuck:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_ca_rotation_stuck_certificates", Help: "Certificates of the issuer that cannot move to the new CA for reasons of their own (listed on the rotation's state and Events); they hold no wave."}, []string{"issuer"}),
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_ca_rotation_halted", Help: "1 while the CA rotation of the issuer is halted (a wave missed its deadline)."}, []string{"issuer"}),
		wave:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_ca_rotation_wave", Help: "The wave (1-based) the CA rotation of the issuer rolls; 0 before the first, waves+1 after the last."}, []string{"issuer"})}
	if opts.Registerer != nil {
		for _, g := range []**prometheus.GaugeVec{&r.halted, &r.wave, &r.stuck} {
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

// SetupWithManager adds r to mgr (the hub's manager).
func (r *Rotator) SetupWithManager(mgr manager.Manager) error { return mgr.Add(r) }

// Subscribe calls fn after every phase or wave change, and when a
// cluster's bundles come to hold a rotating CA's next key pair.
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

// Override returns the issuer that must sign for ref in cluster name now,
// and its signing certificate, when a rotation decides it: the next CA
// once the cluster's wave rolls and its own bundles hold the next CA
// (bundle first: a cluster that was unreachable is rotated when it is
// back and published), the current CA while an abort brings everything
// back.
func (r *Rotator) Override(ctx context.Context, name multicluster.ClusterName, ref cmmeta.IssuerReference) (issuers.Issuer, *x509.Certificate, bool, error) {
	if ref.Kind != cmapi.ClusterIssuerKind || (ref.Group != "" && ref.Group != "cert-manager.io") {
		return nil, nil, false, nil
	}
	s := r.state(ref.Name)
	if s == nil {
		return nil, nil, false, nil
	}
	secret := s.Next
	switch w, _ := r.waveOf(name); {
	case s.Phase == Aborting:
		iss := &cmapi.ClusterIssuer{}
		if err := r.opts.Hub.Get(ctx, client.ObjectKey{Name: ref.Name}, iss); err != nil || iss.Spec.CA == nil {
			return nil, nil, false, err
		}
		secret = iss.Spec.CA.SecretName
	case !s.signsWithNext(w) || !r.bundled(ref.Name, name):
		return nil, nil, false, nil
	}
	iss, ca, err := issuers.LoadCA(ctx, "CA of ClusterIssuer "+ref.Name+" (rotation)", r.opts.Hub, client.ObjectKey{Namespace: r.opts.Namespace, Name: secret})
	if err != nil {
		return nil, nil, false, err
	}
	return iss, ca, true, nil
}

// bundled reports whether the last step saw cluster's bundles hold the
// next CA of issuer.
func (r *Rotator) bundled(issuer string, cluster multicluster.ClusterName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.published[issuer][cluster]
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
		if n, err := strconv.Atoi(l[hubapi.WaveLabel]); err == nil {
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
		if n, err := strconv.Atoi(l[hubapi.WaveLabel]); err == nil {
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
	byName := map[string]*cmapi.ClusterIssuer{}
	active := map[string]bool{}
	for i := range issuers.Items {
		iss := &issuers.Items[i]
		byName[iss.Name] = iss
		if iss.Spec.CA == nil || iss.Annotations[hubapi.NextCAAnnotation] == "" {
			continue
		}
		active[iss.Name] = true
		if err := r.stepIssuer(ctx, iss, iss.Annotations[hubapi.NextCAAnnotation]); err != nil {
			r.log.Error(err, "CA rotation step failed", "issuer", iss.Name)
		}
	}
	// Rotations no longer asked for: withdrawn (an abort, stepped until
	// nothing is left on the next CA) or finished.
	cms := &corev1.ConfigMapList{}
	if err := r.opts.Hub.List(ctx, cms, client.InNamespace(r.opts.Namespace), client.MatchingLabels{StateLabel: "true"}); err == nil {
		for i := range cms.Items {
			issuer := cms.Items[i].Data["issuer"]
			if active[issuer] {
				continue
			}
			if iss := byName[issuer]; iss != nil && iss.Spec.CA != nil {
				active[issuer] = true
				if err := r.stepIssuer(ctx, iss, cms.Items[i].Data["next"]); err != nil {
					r.log.Error(err, "CA rotation step failed", "issuer", issuer)
				}
				continue
			}
			r.remove(ctx, issuer) // the ClusterIssuer is gone or no CA issuer: nothing to roll back to
		}
	}
	if r.opts.Fence != nil {
		r.forget(ctx, active)
	}
}

// remove drops the state of issuer's rotation.
func (r *Rotator) remove(ctx context.Context, issuer string) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Namespace, Name: StatePrefix + issuer}}
	if err := client.IgnoreNotFound(r.opts.Hub.Delete(ctx, cm)); err != nil {
		r.log.Error(err, "failed to delete CA rotation state", "issuer", issuer)
		return
	}
	r.set(issuer, nil)
	r.mu.Lock()
	delete(r.published, issuer)
	r.mu.Unlock()
	r.halted.DeleteLabelValues(issuer)
	r.wave.DeleteLabelValues(issuer)
	r.stuck.DeleteLabelValues(issuer)
}

// setPublished records which clusters' bundles hold issuer's next CA and
// tells the subscribers when a cluster holds it that did not at the last
// step: its Certificates may now move (bundle first). A cluster engaged only
// after its wave started — its owner restarted, or it was unreachable — is
// then decided again at once; the wave's own change had passed it by, and
// it waited for its next resync (found by loadbench: three clusters of a
// replica restarted as a rotation began kept the old CA for minutes).
func (r *Rotator) setPublished(issuer string, published map[multicluster.ClusterName]bool) {
	r.mu.Lock()
	old, seen := r.published[issuer]
	r.published[issuer] = published
	gained := false
	for name := range published {
		gained = gained || !old[name]
	}
	subs := slices.Clone(r.subs)
	r.mu.Unlock()
	if seen && gained {
		for _, fn := range subs {
			fn()
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

// stepIssuer steps the rotation of iss to the CA in Secret next (the
// annotation's, or the state's once it was withdrawn).
func (r *Rotator) stepIssuer(ctx context.Context, iss *cmapi.ClusterIssuer, next string) error {
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
	withdrawn := iss.Annotations[hubapi.NextCAAnnotation] == ""
	if !withdrawn && (s == nil || s.Next != next || s.Issuer != iss.Name || s.Phase == Aborting) {
		s = &State{Issuer: iss.Name, Next: next, Phase: Publishing, Since: now, Resume: iss.Annotations[hubapi.RotationResumeAnnotation], Force: iss.Annotations[hubapi.RotationForceAnnotation]}
		r.event(iss, corev1.EventTypeNormal, ReasonProgress, s.action(), "CA rotation to Secret %s started: publishing the new CA in every trust bundle", next)
	}
	if s == nil {
		return nil
	}
	before := s.Data()
	waveOf, waves := r.waves()
	_, nextCA, err := issuers.LoadCA(ctx, "next CA of ClusterIssuer "+iss.Name, r.opts.Hub, client.ObjectKey{Namespace: r.opts.Namespace, Name: next})
	if err != nil {
		if withdrawn {
			r.remove(ctx, iss.Name) // the next CA is gone too: nothing can be on it any more
			return nil
		}
		s.Reason = err.Error()
		return r.save(ctx, iss, cm, exists, s, before)
	}
	view := r.observe(ctx, iss, next, nextCA)
	if r.opts.Fence != nil {
		r.publish(ctx, iss.Name, view)
		view = r.merge(ctx, iss.Name, view)
	}
	published := map[multicluster.ClusterName]bool{}
	for name, p := range view {
		if p.Published {
			published[name] = true
		}
	}
	r.setPublished(iss.Name, published)
	in := stepInput{view: view, waveOf: waveOf, waves: waves, resume: iss.Annotations[hubapi.RotationResumeAnnotation], force: iss.Annotations[hubapi.RotationForceAnnotation],
		withdrawn: withdrawn, finished: withdrawn && iss.Spec.CA.SecretName == s.Next}
	notes, remove := advance(s, in, timings{Soak: r.opts.Soak, Pause: r.opts.Pause, Deadline: r.opts.Deadline, Grace: r.opts.Grace}, now)
	for _, n := range notes {
		r.event(iss, n.typ, n.reason, s.action(), "%s", n.message)
	}
	if remove {
		r.remove(ctx, iss.Name)
		return nil
	}
	halted := 0.0
	if s.Phase == Halted {
		halted = 1
	}
	r.halted.WithLabelValues(iss.Name).Set(halted)
	r.stuck.WithLabelValues(iss.Name).Set(float64(s.Stuck))
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

// event records an Event on iss. Its action names the step (the events
// API folds Events of one object, reason and action into a series that
// keeps the first note: each step needs its own to be read).
func (r *Rotator) event(iss *cmapi.ClusterIssuer, typ, reason, action, format string, args ...any) {
	r.opts.Recorder.Eventf(iss, nil, typ, reason, action, format, args...)
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
