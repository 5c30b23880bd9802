package certsync

import (
	"context"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/certmetrics"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issuers"
)

// fakeCluster serves a fake client and a fake event recorder as a downstream cluster.
type fakeCluster struct {
	cluster.Cluster
	c   client.Client
	rec *events.FakeRecorder
}

func (f *fakeCluster) GetClient() client.Client                       { return f.c }
func (f *fakeCluster) GetAPIReader() client.Reader                    { return f.c }
func (f *fakeCluster) GetEventRecorder(string) recorder.EventRecorder { return f.rec }

// caIssuer signs with the shared test CA, as the CA issuer does.
type caIssuer struct{}

func (caIssuer) Sign(_ context.Context, req issuers.Request) (issuers.Result, error) {
	certs, key := testCA()
	req.Template.PublicKey = req.PublicKey
	b, err := pki.SignCSRTemplate(certs, key, req.Template)
	if err != nil {
		return issuers.Result{}, err
	}
	return issuers.Result{ChainPEM: b.ChainPEM, CAPEM: b.CAPEM}, nil
}

// fakeResolver resolves every issuerRef to caIssuer (voucher when set),
// or fails with err.
type fakeResolver struct {
	err     error
	voucher issuers.Issuer
}

func (f *fakeResolver) Resolve(context.Context, cmmeta.IssuerReference, string, client.Reader) (issuers.Issuer, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.voucher != nil {
		return f.voucher, nil
	}
	return caIssuer{}, nil
}

// ownership is a settable fence.
type ownership struct{ owned bool }

func (o *ownership) Owns(multicluster.ClusterName) (string, bool) { return "replica-0/3", o.owned }
func (o *ownership) BeginWrite(multicluster.ClusterName) (string, time.Time, func(), bool) {
	return "replica-0/3", time.Time{}, func() {}, o.owned
}

type reconcilerHarness struct {
	t     *testing.T
	r     *reconciler
	c     client.Client
	rec   *events.FakeRecorder
	clk   *clocktesting.FakeClock
	own   *ownership
	issue *fakeResolver
}

func newReconcilerHarness(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) *reconcilerHarness {
	t.Helper()
	return newHarness(t, funcs, false, objs...)
}

// noIndexer stands for the hub's indexer: the fake client holds the index.
type noIndexer struct{}

func (noIndexer) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	return nil
}

// newHarness is newReconcilerHarness; indexed, the fake client indexes
// Certificates by spec.secretName and the reconciler looks them up by it
// (Options.Indexer), as the hub's does.
func newHarness(t *testing.T, funcs *interceptor.Funcs, indexed bool, objs ...client.Object) *reconcilerHarness {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := cmapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&cmapi.Certificate{}).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	if indexed {
		b = b.WithIndex(certspec.NewObject(), certspec.SecretNameField, certspec.SecretNameOf)
	}
	h := &reconcilerHarness{t: t, c: b.Build(), rec: events.NewFakeRecorder(100), clk: clocktesting.NewFakeClock(time.Now()),
		own: &ownership{owned: true}, issue: &fakeResolver{}}
	opts := Options{Issuers: h.issue, Fence: h.own, Registerer: prometheus.NewRegistry(), clock: h.clk}
	if indexed {
		opts.Indexer = noIndexer{}
	}
	opts.defaults()
	m, err := certmetrics.New(certmetrics.Options{Registerer: opts.Registerer, Mode: opts.CertificateMetrics, Clock: opts.clock})
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeCluster{c: h.c, rec: h.rec}
	h.r = newReconciler(opts, m, func(context.Context, multicluster.ClusterName) (cluster.Cluster, error) { return fc, nil })
	return h
}

func (h *reconcilerHarness) reconcile(name string) reconcile.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(context.Background(), mcreconcile.Request{ClusterName: "east",
		Request: reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: name}}})
	if err != nil {
		h.t.Fatalf("reconcile %s: %v", name, err)
	}
	return res
}

func (h *reconcilerHarness) certificate(name string) *cmapi.Certificate {
	h.t.Helper()
	c := &cmapi.Certificate{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, c); err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *reconcilerHarness) secret(name string) *corev1.Secret {
	h.t.Helper()
	s := &corev1.Secret{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		h.t.Fatal(err)
	}
	return s
}

func (h *reconcilerHarness) events() string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

func ready(c *cmapi.Certificate) *cmapi.CertificateCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == cmapi.CertificateConditionReady {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

func rev(c *cmapi.Certificate) int { return ptr.Deref(c.Status.Revision, 0) }

// fakeBudget admits when open, else asks for wait; it records the due times asked with.
type fakeBudget struct {
	open   bool
	wait   time.Duration
	asked  []time.Time
	lanes  []budget.Lane
	forgot []string
}

func (b *fakeBudget) Admit(_ string, _ budget.Tenant, due time.Time, lane budget.Lane) time.Duration {
	b.asked = append(b.asked, due)
	b.lanes = append(b.lanes, lane)
	if b.open {
		return 0
	}
	return b.wait
}

func (b *fakeBudget) Forget(key string) { b.forgot = append(b.forgot, key) }
