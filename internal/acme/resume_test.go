package acme

import (
	"context"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/issuers"
)

// An ACMEOrder deleted while its CA order runs hands that order over: the
// issuance's next ACMEOrder continues it (spec.continues) with the same
// key, and the key Secret is the new order's again. A mark past its time,
// or one that cannot serve the issuance (a Certificate keeping another key
// of its own), is not continued; a request's CSR order leaves a bare mark.
func TestDeletedOrderIsContinued(t *testing.T) {
	ctx := context.Background()
	o, hub, clk := newOrderer(t)
	s, opts := o.s, o.s.opts
	crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-1", CreationTimestamp: metav1.NewTime(clk.Now())},
		Spec: cmapi.CertificateSpec{DNSNames: []string{"web.example.test"}, PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm}}}

	// order creates (or continues) the issuance's ACMEOrder and returns it.
	order := func(t *testing.T, req issuers.OrderRequest) *hubapi.ACMEOrder {
		t.Helper()
		if _, err := o.Order(ctx, req); !errors.As(err, new(*issuers.Pending)) {
			t.Fatalf("Order: %v; want pending", err)
		}
		list := &hubapi.ACMEOrderList{}
		if err := hub.List(ctx, list); err != nil || len(list.Items) != 1 {
			t.Fatalf("%d orders (%v); want one", len(list.Items), err)
		}
		return &list.Items[0]
	}
	// deleteRunning deletes ord as its CA order runs at url: the hand-over,
	// then the object goes.
	deleteRunning := func(t *testing.T, ord *hubapi.ACMEOrder, url string) {
		t.Helper()
		ord.Status.URL = url
		if err := s.handOver(ctx, ord); err != nil {
			t.Fatal(err)
		}
		ord.Finalizers = nil
		if err := hub.Update(ctx, ord); err != nil {
			t.Fatal(err)
		}
		if err := hub.Delete(ctx, ord); err != nil {
			t.Fatal(err)
		}
	}
	requestKey := func(ord *hubapi.ACMEOrder) any {
		csr, err := x509.ParseCertificateRequest(ord.Spec.Request)
		if err != nil {
			t.Fatal(err)
		}
		return csr.PublicKey
	}
	keySecret := func(name string) *corev1.Secret {
		sec := &corev1.Secret{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec); err != nil {
			t.Fatal(err)
		}
		return sec
	}

	req := issuers.OrderRequest{Cluster: "east", Certificate: crt}
	first := order(t, req)
	deleteRunning(t, first, "https://ca.example/order/1")
	if sec := keySecret(first.Name); len(sec.OwnerReferences) != 0 || sec.Annotations[hubapi.ResumeOrderAnnotation] != "https://ca.example/order/1" {
		t.Fatalf("the key Secret after the hand-over: owners %v, marks %v", sec.OwnerReferences, sec.Annotations)
	}
	next := order(t, req)
	if next.Spec.Continues != "https://ca.example/order/1" {
		t.Errorf("spec.continues %q; want the deleted order's CA order", next.Spec.Continues)
	}
	if same, _ := pki.PublicKeysEqual(requestKey(next), requestKey(first)); !same {
		t.Error("the continued order has another key: a certificate the CA issued already would not match it")
	}
	if sec := keySecret(next.Name); len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != next.UID || sec.Annotations[hubapi.ResumeOrderAnnotation] != "" {
		t.Errorf("the key Secret after the continuation: owners %v, marks %v; want the new order's, unmarked", sec.OwnerReferences, sec.Annotations)
	}

	t.Run("a mark past its time is not continued", func(t *testing.T) {
		deleteRunning(t, next, "https://ca.example/order/2")
		clk.Step(opts.OrderRetention + time.Second)
		again := order(t, req)
		if again.Spec.Continues != "" {
			t.Errorf("spec.continues %q; want a new CA order", again.Spec.Continues)
		}
		next = again
	})
	t.Run("a Certificate keeping another key is not continued", func(t *testing.T) {
		deleteRunning(t, next, "https://ca.example/order/3")
		own, err := pki.GenerateECPrivateKey(pki.ECCurve256)
		if err != nil {
			t.Fatal(err)
		}
		keeps := req
		keeps.Key = own
		again := order(t, keeps)
		if again.Spec.Continues != "" {
			t.Errorf("spec.continues %q with another key", again.Spec.Continues)
		}
		next = again
	})
	t.Run("a request's CSR: a bare mark, continued", func(t *testing.T) {
		if err := hub.Delete(ctx, keySecret(next.Name)); err != nil {
			t.Fatal(err)
		}
		next.Finalizers = nil
		if err := hub.Update(ctx, next); err != nil {
			t.Fatal(err)
		}
		if err := hub.Delete(ctx, next); err != nil {
			t.Fatal(err)
		}
		key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{DNSNames: []string{"web.example.test"}}, key)
		if err != nil {
			t.Fatal(err)
		}
		csrReq := issuers.OrderRequest{Cluster: "east", Certificate: crt, CSR: der}
		ord := order(t, csrReq)
		deleteRunning(t, ord, "https://ca.example/order/4")
		again := order(t, csrReq)
		if again.Spec.Continues != "https://ca.example/order/4" || !again.Spec.KeyInCluster {
			t.Errorf("spec.continues %q, keyInCluster %t; want the deleted order's, with the request's key", again.Spec.Continues, again.Spec.KeyInCluster)
		}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: again.Name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Secret beside a request's order after its continuation: %v", err)
		}
	})
}
