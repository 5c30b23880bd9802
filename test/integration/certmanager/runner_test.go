// Package certmanager tests the test bed's runner of cert-manager's own
// controllers (test/fixture/cmrunner): the peer that migration, external
// issuance and the benchmarks' peer rows run beside the hub.
package certmanager

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/cmrunner"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// cert-manager's own controllers, run by cmrunner against one API server,
// issue a Certificate from a CA ClusterIssuer as a cert-manager installation
// does: the issuer Ready, a CertificateRequest approved and signed, the TLS
// Secret with cert-manager's annotations written by its issuing controller,
// the Certificate Ready. Stopped, every controller returns.
func TestCertManagersOwnControllersIssue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Stop(); err != nil {
			t.Error(err)
		}
	})
	cp := bed.Hub
	ca, err := bed.CreateCAIssuer(ctx, "cm-ca")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cp.WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cmrunner.Start(ctx, cmrunner.Options{Kubeconfig: kubeconfig, ClusterResourceNamespace: bed.HubNamespace()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cm.Stop()
		}
	})

	fixture.EnsureNamespace(t, cp.Client, "shop")
	crt := fixture.Certificate("shop", "web", "cm-ca", fixture.WithNames("", "web.shop.example.com"),
		fixture.WithIssuer(cmmeta.IssuerReference{Name: "cm-ca", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}))
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))

	s := &corev1.Secret{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: crt.Spec.SecretName}, s); err != nil {
		t.Fatal(err)
	}
	if s.Annotations[cmapi.CertificateNameKey] != "web" || s.Annotations[cmapi.IssuerNameAnnotationKey] != "cm-ca" {
		t.Errorf("Secret annotations %v: want cert-manager's, naming Certificate web and issuer cm-ca", s.Annotations)
	}
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if block == nil {
		t.Fatal("tls.crt holds no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "web.shop.example.com"}); err != nil {
		t.Errorf("the issued certificate does not verify against the CA: %v", err)
	}
	var managers []string
	for _, mf := range s.ManagedFields {
		managers = append(managers, mf.Manager)
	}
	if !strings.Contains(strings.Join(managers, " "), "cert-manager-certificates-issuing") {
		t.Errorf("Secret field managers %v: want cert-manager's issuing controller", managers)
	}
	reqs := &cmapi.CertificateRequestList{}
	if err := cp.Client.List(ctx, reqs, client.InNamespace("shop")); err != nil {
		t.Fatal(err)
	}
	if len(reqs.Items) != 1 {
		t.Errorf("%d CertificateRequests, want 1", len(reqs.Items))
	}

	stopped = true
	if err := cm.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
}
