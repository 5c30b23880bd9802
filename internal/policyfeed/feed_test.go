package policyfeed

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/test/fixture"
)

func testCertificate() *cmapi.Certificate {
	return fixture.Certificate("shop", "web", "ca", fixture.WithNames("web.example.com", "web.example.com"))
}

// fakePolicy decides d for everything.
type fakePolicy struct{ d policy.Decision }

func (f *fakePolicy) Evaluate(string, *cmapi.Certificate, *x509.Certificate) (policy.Decision, bool) {
	return f.d, false
}

// The feed queues only Certificates whose outcome may have changed: denied
// now, or carrying a policy mark.
func TestPolicyFeedQueuesOnlyWhatMayChange(t *testing.T) {
	mk := func(name, dns, readyReason string, violation bool) unstructured.Unstructured {
		crt := testCertificate()
		crt.Name, crt.Spec.CommonName, crt.Spec.DNSNames = name, "", []string{dns}
		if readyReason != "" {
			crt.Status.Conditions = append(crt.Status.Conditions, cmapi.CertificateCondition{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionFalse, Reason: readyReason})
		}
		if violation {
			crt.Status.Conditions = append(crt.Status.Conditions, cmapi.CertificateCondition{Type: cmapi.CertificateConditionType(reasons.PolicyViolationCondition), Status: cmmeta.ConditionTrue, Reason: reasons.PolicyDenied})
		}
		crt.APIVersion, crt.Kind = cmapi.SchemeGroupVersion.String(), cmapi.CertificateKind
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crt)
		if err != nil {
			t.Fatal(err)
		}
		return unstructured.Unstructured{Object: m}
	}
	set, err := policy.Compile([]hubapi.IssuancePolicy{{Spec: hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{DNSNames: &hubapi.StringValues{Values: []string{"*.ok.example.com"}}}}}}, policy.Deny)
	if err != nil {
		t.Fatal(err)
	}
	items := []unstructured.Unstructured{
		mk("allowed-quiet", "a.ok.example.com", "", false),
		mk("allowed-was-denied", "b.ok.example.com", reasons.PolicyDenied, false),
		mk("allowed-was-violating", "c.ok.example.com", "", true),
		mk("denied", "d.bad.example.com", "", false),
		mk("allowed-other-failure", "e.ok.example.com", "IssuerNotFound", false),
		mk("ca", "f.ok.example.com", "", false), // a CA: its powers may have changed (below)
	}
	if err := unstructured.SetNestedField(items[len(items)-1].Object, true, "spec", "isCA"); err != nil {
		t.Fatal(err)
	}
	f, _ := New(Options{Policy: evaluator{set}})
	q := workqueue.NewTyped[mcreconcile.Request]()
	defer q.ShutDown()
	if n, queued := f.enqueue(q, "east", items, false); n != len(items) || queued != 4 {
		t.Errorf("saw %d, queued %d; want %d and 4", n, queued, len(items))
	}
	var got []string
	for q.Len() > 0 {
		r, _ := q.Get()
		got = append(got, r.Name)
		q.Done(r)
	}
	if want := "allowed-was-denied,allowed-was-violating,ca,denied"; strings.Join(slices.Sorted(slices.Values(got)), ",") != want {
		t.Errorf("queued %v, want %s", got, want)
	}
}

// evaluator adapts a policy.Set to Evaluator.
type evaluator struct{ set *policy.Set }

func (e evaluator) Evaluate(cluster string, crt *cmapi.Certificate, tmpl *x509.Certificate) (policy.Decision, bool) {
	return e.set.Evaluate(policy.Request{Cluster: cluster, Certificate: crt, Template: tmpl}), false
}

// listCache serves a fixed list of Certificates.
type listCache struct {
	cache.Cache
	items []unstructured.Unstructured
}

func (c listCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if ul, ok := list.(*unstructured.UnstructuredList); ok {
		ul.Items = append(ul.Items, c.items...)
	}
	return nil
}

type cacheCluster struct {
	cluster.Cluster
	c listCache
}

func (c cacheCluster) GetCache() cache.Cache { return c.c }

// The feed runs a pass per burst of kicks over the clusters engaged with it,
// and forgets a cluster when its engagement ends.
func TestPolicyFeedPassAfterKicks(t *testing.T) {
	denied := testCertificate()
	denied.APIVersion, denied.Kind = cmapi.SchemeGroupVersion.String(), cmapi.CertificateKind
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(denied)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := New(Options{Policy: &fakePolicy{d: policy.Decision{Message: "denied"}}})
	f.settle = time.Millisecond
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
	defer q.ShutDown()
	if err := f.Source().Start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clusterCtx, disengage := context.WithCancel(ctx)
	if err := f.Engage(clusterCtx, "east", cacheCluster{c: listCache{items: []unstructured.Unstructured{{Object: m}}}}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = f.Start(ctx) }()
	f.Kick()
	f.Kick() // coalesces
	r, _ := q.Get()
	if r.ClusterName != "east" || r.Name != "web" {
		t.Fatalf("queued %+v, want east shop/web", r)
	}
	q.Done(r)
	disengage()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return len(f.clusters.All()) == 0, nil
	}); err != nil {
		t.Fatal("the cluster was not forgotten after its engagement ended")
	}
}
