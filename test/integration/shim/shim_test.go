package shim

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"reflect"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/certhub/certhub/internal/shim"
	"github.com/certhub/certhub/test/fixture"
)

var issuerAnnotation = map[string]string{cmapi.IngressClusterIssuerNameAnnotationKey: issuerName}

// matchesCertManager waits until every Certificate cert-manager's own shim
// makes for obj (as stored: UID, generation) exists in c with the same spec,
// labels, annotations and owner references, and returns them.
func matchesCertManager(t *testing.T, c client.Client, obj client.Object) []cmapi.Certificate {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	want := fixture.ShimCertificates(t, obj, shim.Options{}.CertManagerDefaults())
	if len(want) == 0 {
		t.Fatalf("cert-manager's shim makes no Certificate for %s", obj.GetName())
	}
	for _, w := range want {
		got := &cmapi.Certificate{}
		same := func() bool {
			return reflect.DeepEqual(got.Spec, w.Spec) && reflect.DeepEqual(got.Labels, w.Labels) &&
				reflect.DeepEqual(got.Annotations, w.Annotations) && reflect.DeepEqual(got.OwnerReferences, w.OwnerReferences)
		}
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Name}, got); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return same(), nil
		})
		if err != nil {
			t.Fatalf("Certificate %s/%s differs from cert-manager's shim:\n got  %+v %v %v %+v\n want %+v %v %v %+v", w.Namespace, w.Name,
				got.Spec, got.Labels, got.Annotations, got.OwnerReferences, w.Spec, w.Labels, w.Annotations, w.OwnerReferences)
		}
	}
	return want
}

func dnsNamesIssued(t *testing.T, c client.Client, crt *cmapi.Certificate) []string {
	t.Helper()
	s := fixture.GetSecret(t, c, crt)
	b, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if b == nil {
		t.Fatalf("Secret %s holds no certificate", s.Name)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.DNSNames
}

func waitGone(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cmapi.Certificate{})), nil
	})
	if err != nil {
		t.Fatalf("Certificate %s/%s was not deleted", ns, name)
	}
}

// An annotated Ingress in a cluster without the Gateway API: its TLS entries
// become cert-manager's Certificates, issued; a host added is a Certificate
// updated and re-issued; a TLS entry removed is its Certificate deleted, the
// Secret left (as cert-manager leaves it); the annotation removed deletes the
// rest.
func TestAnnotatedIngressBecomesCertificates(t *testing.T) {
	ctx := context.Background()
	c := env.Bed.Downstreams[0].Client
	if err := c.List(ctx, &gwapi.GatewayList{}); !meta.IsNoMatchError(err) {
		t.Fatalf("cluster-1 should not serve Gateways (err %v)", err)
	}
	fixture.EnsureNamespace(t, c, "storefront")
	ann := map[string]string{cmapi.IngressClusterIssuerNameAnnotationKey: issuerName,
		cmapi.PrivateKeyAlgorithmAnnotationKey: "ECDSA", cmapi.DurationAnnotationKey: "720h", cmapi.RenewBeforeAnnotationKey: "240h"}
	ing := fixture.Ingress("storefront", "web", ann,
		networkingv1.IngressTLS{Hosts: []string{"shop.example.com", "www.shop.example.com"}, SecretName: "shop-tls"},
		networkingv1.IngressTLS{Hosts: []string{"api.example.com"}, SecretName: "api-tls"})
	if err := c.Create(ctx, ing); err != nil {
		t.Fatal(err)
	}
	for _, w := range matchesCertManager(t, c, ing) {
		got := fixture.WaitReady(t, c, client.ObjectKeyFromObject(&w))
		if names := dnsNamesIssued(t, c, got); !reflect.DeepEqual(names, w.Spec.DNSNames) {
			t.Errorf("%s issued for %v, want %v", w.Name, names, w.Spec.DNSNames)
		}
	}

	// A host added: the Certificate follows and is issued again.
	ing.Spec.TLS[0].Hosts = append(ing.Spec.TLS[0].Hosts, "m.shop.example.com")
	if err := c.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	matchesCertManager(t, c, ing)
	key := client.ObjectKey{Namespace: "storefront", Name: "shop-tls"}
	got := fixture.WaitFor(t, c, key, "Ready with revision 2", func(crt *cmapi.Certificate) bool {
		return fixture.IsReady(crt) && crt.Status.Revision != nil && *crt.Status.Revision == 2
	})
	if names := dnsNamesIssued(t, c, got); !slices.Contains(names, "m.shop.example.com") {
		t.Errorf("re-issued for %v, want m.shop.example.com among them", names)
	}

	// A TLS entry removed: its Certificate is deleted, its Secret stays.
	ing.Spec.TLS = ing.Spec.TLS[:1]
	if err := c.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "storefront", "api-tls")
	if err := c.Get(ctx, client.ObjectKey{Namespace: "storefront", Name: "api-tls"}, &corev1.Secret{}); err != nil {
		t.Errorf("the Secret of the deleted Certificate: %v, want it left", err)
	}

	// The annotation removed: the Ingress no longer asks for Certificates.
	delete(ing.Annotations, cmapi.IngressClusterIssuerNameAnnotationKey)
	if err := c.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, "storefront", "shop-tls")
}

// An Ingress without the annotation gets nothing; one created after it,
// annotated, is issued (so the first was seen and passed over).
func TestIngressWithoutAnnotationGetsNothing(t *testing.T) {
	ctx := context.Background()
	c := env.Bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "plain")
	plain := fixture.Ingress("plain", "plain", nil, networkingv1.IngressTLS{Hosts: []string{"plain.example.com"}, SecretName: "plain-tls"})
	marker := fixture.Ingress("plain", "marker", issuerAnnotation, networkingv1.IngressTLS{Hosts: []string{"marker.example.com"}, SecretName: "marker-tls"})
	for _, o := range []client.Object{plain, marker} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	fixture.WaitReady(t, c, client.ObjectKey{Namespace: "plain", Name: "marker-tls"})
	if err := c.Get(ctx, client.ObjectKey{Namespace: "plain", Name: "plain-tls"}, &cmapi.Certificate{}); !apierrors.IsNotFound(err) {
		t.Errorf("an Ingress without the annotation got a Certificate (err %v)", err)
	}
}

// A Gateway with two TLS listeners, in the cluster serving Gateway API:
// two Certificates, as cert-manager's gateway-shim makes them, issued.
func TestGatewayWithTwoListenersGetsTwoCertificates(t *testing.T) {
	ctx := context.Background()
	c := env.Bed.Downstreams[1].Client
	fixture.EnsureNamespace(t, c, "edge")
	gw := fixture.Gateway("edge", "edge", issuerAnnotation, [2]string{"a.edge.example.com", "edge-a-tls"}, [2]string{"b.edge.example.com", "edge-b-tls"})
	if err := c.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	want := matchesCertManager(t, c, gw)
	if len(want) != 2 {
		t.Fatalf("cert-manager's shim makes %d Certificates for two listeners", len(want))
	}
	for _, w := range want {
		fixture.WaitReady(t, c, client.ObjectKeyFromObject(&w))
	}
}

// A registration scoped to namespace team-a: the shim sees that namespace's
// Ingresses, not team-b's.
func TestNamespaceScopedRegistrationSeesItsNamespaceOnly(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[2]
	for _, ns := range []string{"team-a", "team-b"} {
		fixture.EnsureNamespace(t, cp.Client, ns)
		ing := fixture.Ingress(ns, "web", issuerAnnotation, networkingv1.IngressTLS{Hosts: []string{ns + ".example.com"}, SecretName: "web-tls"})
		if err := cp.Client.Create(ctx, ing); err != nil {
			t.Fatal(err)
		}
	}
	s, err := env.Bed.RegisterNamespaced(ctx, cp, "team-a-only", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Bed.Hub.Client.Delete(context.Background(), s) })
	fixture.WaitReady(t, cp.Client, client.ObjectKey{Namespace: "team-a", Name: "web-tls"})
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "web-tls"}, &cmapi.Certificate{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Certificate appeared outside the registration's namespace (err %v)", err)
	}
}
