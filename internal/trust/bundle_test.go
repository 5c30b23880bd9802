package trust

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

func certPEM(t *testing.T, cn string, isCA bool) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func caIssuer(name, secret string, ann map[string]string) *cmapi.ClusterIssuer {
	return &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: secret}}}}
}

func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "certhub", Name: name}, Data: data}
}

// The bundle holds each CA issuer's root (ca.crt, else tls.crt), once,
// sorted; opted-out, non-CA and unreadable issuers are left out.
func TestCollect(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = cmapi.AddToScheme(s)
	root, intermediate, plain, leaf := certPEM(t, "root", true), certPEM(t, "intermediate", true), certPEM(t, "plain", true), certPEM(t, "leaf", false)
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		caIssuer("with-root", "with-root", nil),
		caIssuer("same-root", "same-root", nil),
		caIssuer("plain", "plain", nil),
		caIssuer("private", "plain", map[string]string{hubapi.TrustBundleAnnotation: "false"}),
		caIssuer("no-secret", "missing", nil),
		caIssuer("leaf-only", "leaf", nil),
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "selfsigned"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}}},
		secret("with-root", map[string][]byte{"tls.crt": intermediate, "ca.crt": root}),
		secret("same-root", map[string][]byte{"tls.crt": root, "ca.crt": root}),
		secret("plain", map[string][]byte{"tls.crt": plain}),
		secret("leaf", map[string][]byte{"tls.crt": leaf}),
	).Build()
	es, err := collect(context.Background(), c, "certhub", logr.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := es.pem(nil, "any")
	var issuers []string
	for _, e := range es {
		issuers = append(issuers, e.issuer)
	}
	want := [][]byte{root, plain}
	if bytes.Compare(want[1], want[0]) < 0 {
		want[0], want[1] = want[1], want[0]
	}
	if !bytes.Equal(got, bytes.Join(want, nil)) {
		t.Errorf("bundle:\n%s\nwant root and plain, once each, sorted", got)
	}
	if len(issuers) != 3 || issuers[0] != "plain" || issuers[1] != "same-root" || issuers[2] != "with-root" {
		t.Errorf("issuers %v", issuers)
	}
}

// Subscribers hear of changes only.
func TestBundleSetNotifiesOnChange(t *testing.T) {
	b := &bundle{}
	n := 0
	b.subscribe(func() { n++ })
	b.set(everywhere("a"))
	b.set(everywhere("a"))
	b.set(everywhere("b"))
	if n != 2 {
		t.Errorf("%d notifications, want 2", n)
	}
}

// everywhere is one CA (PEM text) trusted in every cluster and namespace.
func everywhere(pem string) entries {
	if pem == "" {
		return nil
	}
	return entries{{issuer: "ca", clusters: labels.Everything(), blocks: [][]byte{[]byte(pem)}}}
}

// A CA scoped by its issuer's annotations reaches only the clusters (by
// their Secret's labels) and namespaces it names; a selector that does not
// parse publishes it nowhere; an unscoped CA goes everywhere.
func TestScopedCAsReachOnlyTheirClusters(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = cmapi.AddToScheme(s)
	devCA, prodCA, shared, typo := certPEM(t, "dev", true), certPEM(t, "prod", true), certPEM(t, "shared", true), certPEM(t, "typo", true)
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		caIssuer("dev", "dev", map[string]string{hubapi.TrustClustersAnnotation: "env=dev"}),
		caIssuer("prod", "prod", map[string]string{hubapi.TrustClustersAnnotation: "env in (prod)", hubapi.TrustNamespacesAnnotation: "pay-*, shop"}),
		caIssuer("shared", "shared", nil),
		caIssuer("typo", "typo", map[string]string{hubapi.TrustClustersAnnotation: "env=="}),
		secret("dev", map[string][]byte{"tls.crt": devCA}), secret("prod", map[string][]byte{"tls.crt": prodCA}),
		secret("shared", map[string][]byte{"tls.crt": shared}), secret("typo", map[string][]byte{"tls.crt": typo}),
	).Build()
	es, err := collect(context.Background(), c, "certhub", logr.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		labels    labels.Set
		namespace string
		want      [][]byte
	}{
		{"dev cluster", labels.Set{"env": "dev"}, "pay-a", [][]byte{devCA, shared}},
		{"prod cluster, a named namespace", labels.Set{"env": "prod"}, "pay-a", [][]byte{prodCA, shared}},
		{"prod cluster, another namespace", labels.Set{"env": "prod"}, "dev-tools", [][]byte{shared}},
		{"unlabelled cluster", nil, "shop", [][]byte{shared}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := es.pem(tc.labels, tc.namespace)
			for _, w := range [][]byte{devCA, prodCA, shared, typo} {
				if bytes.Contains(got, w) != slices.ContainsFunc(tc.want, func(x []byte) bool { return bytes.Equal(x, w) }) {
					t.Errorf("bundle %s: presence of %.40q is wrong", tc.name, w)
				}
			}
		})
	}
}
