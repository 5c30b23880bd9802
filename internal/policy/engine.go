package policy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Options configure an Engine.
type Options struct {
	// Default decides Certificates no policy selects. Defaults to Allow.
	Default Mode
	// ClusterLabels returns the labels of a cluster's Argo CD Secret. Nil
	// means no cluster has labels.
	ClusterLabels func(cluster string) map[string]string
}

// Engine keeps the compiled policies of the hub current and answers
// Evaluate. It is safe for concurrent use.
type Engine struct {
	opts Options
	set  atomic.Pointer[Set] // nil until the first load

	mu     sync.Mutex // guards subs and errs; never held across an API call
	subs   []func()
	errs   map[string]string // last compile error per policy, to report news once
	reader client.Reader
	log    logr.Logger
}

// New returns an Engine; SetupWithManager starts it.
func New(opts Options) (*Engine, error) {
	if opts.Default == "" {
		opts.Default = Allow
	}
	if _, err := ParseMode(string(opts.Default)); err != nil {
		return nil, err
	}
	return &Engine{opts: opts, errs: map[string]string{}}, nil
}

// SetupWithManager watches IssuancePolicies through the hub manager's cache.
func (e *Engine) SetupWithManager(mgr manager.Manager) error {
	e.reader = mgr.GetCache()
	e.log = mgr.GetLogger().WithName("policy")
	// The controller below hears of every change, but of nothing when there
	// is no policy at all: the first load is a runnable of its own.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			if err := e.reload(ctx); err != nil {
				e.log.Error(err, "failed to load issuance policies; retrying")
				return false, nil
			}
			return true, nil
		})
		return nil
	})); err != nil {
		return fmt.Errorf("failed to add policy loader: %w", err)
	}
	return builder.ControllerManagedBy(mgr).
		Named("issuancepolicy").
		For(&hubapi.IssuancePolicy{}).
		Complete(reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, e.reload(ctx)
		}))
}

// reload lists every IssuancePolicy, compiles them and tells subscribers.
func (e *Engine) reload(ctx context.Context) error {
	list := &hubapi.IssuancePolicyList{}
	if err := e.reader.List(ctx, list); err != nil {
		return fmt.Errorf("failed to list IssuancePolicies: %w", err)
	}
	set := compileAll(list.Items, e.opts.Default)
	for i := range list.Items {
		if err := set.invalid(list.Items[i].Name); err != nil {
			e.report(list.Items[i].Name, err.Error())
		}
	}
	e.set.Store(set)
	e.log.V(1).Info("issuance policies loaded", "policies", set.Len())
	e.notify()
	return nil
}

// report logs a policy's compile error once per change. (No Event: an
// IssuancePolicy is cluster-scoped, and the hub may write Events only in
// its own namespace; every denial names the invalid policy and why.)
func (e *Engine) report(name, msg string) {
	e.mu.Lock()
	news := e.errs[name] != msg
	e.errs[name] = msg
	e.mu.Unlock()
	if news {
		e.log.Error(errors.New(msg), "invalid IssuancePolicy: it selects every Certificate and allows nothing", "policy", name)
	}
}

// Subscribe registers fn to be called (without locks held) after every
// change of the policies, and after Changed.
func (e *Engine) Subscribe(fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.subs = append(e.subs, fn)
}

// Changed tells subscribers that an input of the decisions other than the
// policies changed (a cluster Secret's labels).
func (e *Engine) Changed() { e.notify() }

func (e *Engine) notify() {
	e.mu.Lock()
	subs := append([]func(){}, e.subs...)
	e.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
}

// Loaded reports whether the policies have been read at least once.
func (e *Engine) Loaded() bool { return e.set.Load() != nil }

// Evaluate decides on crt in cluster with the current policies: on tmpl,
// the certificate that will be signed (nil: built from crt). Before the
// first load it denies with Pending set: callers retry shortly.
func (e *Engine) Evaluate(cluster string, crt *cmapi.Certificate, tmpl *x509.Certificate) (d Decision, pending bool) {
	set := e.set.Load()
	if set == nil {
		return Decision{Message: "issuance policies are not loaded yet"}, true
	}
	var l map[string]string
	if e.opts.ClusterLabels != nil {
		l = e.opts.ClusterLabels(cluster)
	}
	return set.Evaluate(Request{Cluster: cluster, ClusterLabels: l, Certificate: crt, Template: tmpl}), false
}
