package trust

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
)

func namespace(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func managed(ns, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultConfigMapName, Labels: map[string]string{hubapi.TrustBundleLabel: "true"}},
		Data: map[string]string{DefaultKey: data}}
}

// One reconcile makes the cluster exact: selected namespaces get the
// bundle (created or repaired), others lose certhub's copy, a ConfigMap
// certhub did not create is left alone and reported; an empty bundle
// removes every copy.
func TestReconcileMakesTheClusterExact(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "theirs", Name: DefaultConfigMapName}, Data: map[string]string{DefaultKey: "theirs"}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		namespace("team-a", map[string]string{"trust": "yes"}),
		namespace("team-a2", map[string]string{"trust": "yes"}),
		namespace("team-b", nil),
		namespace("theirs", map[string]string{"trust": "yes"}),
		managed("team-a2", "stale"),
		managed("team-b", "old"),
		foreign,
	).Build()
	fc := fixture.NewFakeCluster(c)
	b := &bundle{}
	b.set(everywhere("PEM"))
	opts := Options{Namespace: "certhub", NamespaceSelector: labels.SelectorFromSet(labels.Set{"trust": "yes"})}
	opts.defaults()
	r := &reconciler{opts: opts, bundle: b, getCluster: func(context.Context, multicluster.ClusterName) (cluster.Cluster, error) { return fc, nil }}
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, mcreconcile.Request{ClusterName: "east"}); err != nil {
		t.Fatal(err)
	}
	get := func(ns string) (*corev1.ConfigMap, error) {
		cm := &corev1.ConfigMap{}
		return cm, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: DefaultConfigMapName}, cm)
	}
	for _, ns := range []string{"team-a", "team-a2"} {
		if cm, err := get(ns); err != nil || cm.Data[DefaultKey] != "PEM" || len(cm.Data) != 1 {
			t.Errorf("%s: %+v, %v; want the bundle", ns, cm.Data, err)
		}
	}
	if _, err := get("team-b"); !apierrors.IsNotFound(err) {
		t.Errorf("team-b (not selected) kept certhub's copy: %v", err)
	}
	if cm, _ := get("theirs"); cm.Data[DefaultKey] != "theirs" || cm.Labels[hubapi.TrustBundleLabel] != "" {
		t.Errorf("the foreign ConfigMap was changed: %+v", cm)
	}
	select {
	case e := <-fc.Recorder.Events:
		if !strings.Contains(e, ReasonNotManaged) || !strings.Contains(e, "theirs") {
			t.Errorf("event %q, want %s naming the namespace", e, ReasonNotManaged)
		}
	default:
		t.Error("no Event for the foreign ConfigMap")
	}

	b.set(nil) // the last CA issuer went
	if _, err := r.Reconcile(ctx, mcreconcile.Request{ClusterName: "east"}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"team-a", "team-a2"} {
		if _, err := get(ns); !apierrors.IsNotFound(err) {
			t.Errorf("%s kept a copy of an empty bundle: %v", ns, err)
		}
	}
	if _, err := get("theirs"); err != nil {
		t.Errorf("the foreign ConfigMap was deleted: %v", err)
	}
}

// Not computed yet: nothing is written, the cluster is tried again.
func TestReconcileWaitsForTheBundle(t *testing.T) {
	r := &reconciler{bundle: &bundle{}, getCluster: func(context.Context, multicluster.ClusterName) (cluster.Cluster, error) {
		t.Fatal("the cluster was read before the bundle was computed")
		return nil, nil
	}}
	res, err := r.Reconcile(context.Background(), mcreconcile.Request{ClusterName: "east"})
	if err != nil || res.RequeueAfter == 0 {
		t.Errorf("got %+v, %v; want a requeue", res, err)
	}
}
