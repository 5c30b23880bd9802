package shim

import (
	"context"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"
)

func TestAnnotated(t *testing.T) {
	auto := []string{DefaultAutoCertificateAnnotation}
	for _, tc := range []struct {
		name string
		kind string
		ann  map[string]string
		want bool
	}{
		{"cluster-issuer", "Ingress", map[string]string{cmapi.IngressClusterIssuerNameAnnotationKey: "ca"}, true},
		{"issuer", "Gateway", map[string]string{cmapi.IngressIssuerNameAnnotationKey: "ca"}, true},
		{"none", "Ingress", map[string]string{"other": "x"}, false},
		{"tls-acme on an Ingress", "Ingress", map[string]string{DefaultAutoCertificateAnnotation: "true"}, true},
		{"tls-acme false", "Ingress", map[string]string{DefaultAutoCertificateAnnotation: "false"}, false},
		{"tls-acme on a Gateway (cert-manager: Ingresses only)", "Gateway", map[string]string{DefaultAutoCertificateAnnotation: "true"}, false},
	} {
		obj := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}
		if got := annotated(obj, tc.kind, auto); got != tc.want {
			t.Errorf("%s: annotated = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOwnedByMapsToTheController(t *testing.T) {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1"}}
	crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-tls",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ing, networkingv1.SchemeGroupVersion.WithKind("Ingress"))}}}
	if got := ownedBy("Ingress")(context.Background(), crt); len(got) != 1 || got[0].Name != "web" || got[0].Namespace != "ns" {
		t.Errorf("Ingress-controlled Certificate mapped to %v", got)
	}
	if got := ownedBy("Gateway")(context.Background(), crt); len(got) != 0 {
		t.Errorf("the Gateway shim took an Ingress's Certificate: %v", got)
	}
	if got := ownedBy("Ingress")(context.Background(), &cmapi.Certificate{}); len(got) != 0 {
		t.Errorf("an uncontrolled Certificate mapped to %v", got)
	}
}

// The lister reads the unstructured cache, decodes, selects by label and
// answers NotFound as a lister does. (A fake client cannot hold an
// undecodable Certificate; the envtest tiers can, see certsync's decode tests.)
func TestCacheLister(t *testing.T) {
	s := runtime.NewScheme()
	_ = cmapi.AddToScheme(s)
	_ = gwapi.Install(s)
	good := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"namespace": "ns", "name": "good", "labels": map[string]any{"a": "b"}},
		"spec":     map[string]any{"secretName": "good-tls", "duration": "1h"}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(good).Build()
	l := (&cacheLister{c: c}).Certificates("ns")
	got, err := l.List(labels.Everything())
	if err != nil || len(got) != 1 || got[0].Name != "good" || got[0].Spec.Duration.Duration.String() != "1h0m0s" {
		t.Fatalf("List = %v, %v; want the one Certificate, decoded", got, err)
	}
	if got, err := l.List(labels.SelectorFromSet(labels.Set{"a": "c"})); err != nil || len(got) != 0 {
		t.Errorf("selector ignored: %v, %v", got, err)
	}
	if _, err := l.Get("missing"); !apierrors.IsNotFound(err) {
		t.Errorf("Get(missing) = %v, want NotFound", err)
	}
}
