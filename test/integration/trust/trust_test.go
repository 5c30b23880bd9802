package trust

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/trust"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// waitBundle waits until cp's namespace ns holds the bundle ConfigMap with
// exactly want (nil: no such ConfigMap) and returns it.
func waitBundle(t *testing.T, cp *testbed.ControlPlane, ns string, want []byte) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: trust.DefaultConfigMapName}, cm)
		if want == nil {
			return client.IgnoreNotFound(err) == nil && err != nil, nil
		}
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = cm.Data[trust.DefaultKey]
		return last == string(want) && len(cm.Data) == 1 && cm.Labels[hubapi.TrustBundleLabel] == "true", nil
	})
	if err != nil {
		t.Fatalf("%s/%s: trust bundle never became %q; last: %q", cp.Name, ns, want, last)
	}
	return cm
}

// handshake serves crt's Secret and connects trusting only bundle.
func handshake(t *testing.T, c client.Client, crt *cmapi.Certificate, bundle []byte) error {
	t.Helper()
	s := fixture.GetSecret(t, c, crt)
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	return fixture.TLSHandshake(pair, bundle, crt.Spec.DNSNames[0])
}

// Every namespace of every served cluster gets the CA, a namespace created
// later too, and a certificate issued there verifies against the bundle of
// its own cluster.
func TestBundleInEveryNamespaceAndTLSVerifies(t *testing.T) {
	for _, cp := range env.Bed.Downstreams {
		waitBundle(t, cp, "default", env.CAPEM)
	}
	cp := env.Bed.Downstreams[0]
	fixture.EnsureNamespace(t, cp.Client, "web")
	cm := waitBundle(t, cp, "web", env.CAPEM)
	crt := fixture.Certificate("web", "site", issuerName, fixture.WithNames("", "site.example.com"))
	if err := cp.Client.Create(context.Background(), crt); err != nil {
		t.Fatal(err)
	}
	crt = fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	if err := handshake(t, cp.Client, crt, []byte(cm.Data[trust.DefaultKey])); err != nil {
		t.Errorf("TLS handshake against the cluster's own bundle: %v", err)
	}
}

// An edited copy is restored, a deleted one recreated.
func TestBundleDriftIsRepaired(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[1]
	fixture.EnsureNamespace(t, cp.Client, "drift")
	cm := waitBundle(t, cp, "drift", env.CAPEM)
	cm.Data[trust.DefaultKey] = "tampered"
	cm.Data["extra"] = "x"
	if err := cp.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	cm = waitBundle(t, cp, "drift", env.CAPEM)
	if err := cp.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if got := waitBundle(t, cp, "drift", env.CAPEM); got.UID == cm.UID {
		t.Error("the deleted ConfigMap was not recreated")
	}
}

// A second CA ClusterIssuer joins every bundle and leaves it when deleted;
// one annotated certhub.io/trust-bundle: "false" never joins.
func TestSecondCAJoinsAndLeaves(t *testing.T) {
	ctx := context.Background()
	second, err := env.Bed.CreateCAIssuer(ctx, "trust-ca-2")
	if err != nil {
		t.Fatal(err)
	}
	both := bundleOf(env.CAPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: second.Raw}))
	for _, cp := range env.Bed.Downstreams {
		waitBundle(t, cp, "default", both)
	}
	if _, err := env.Bed.CreateCAIssuer(ctx, "trust-ca-private"); err != nil {
		t.Fatal(err)
	}
	private := &cmapi.ClusterIssuer{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Name: "trust-ca-private"}, private); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(private.DeepCopy())
	metav1.SetMetaDataAnnotation(&private.ObjectMeta, hubapi.TrustBundleAnnotation, "false")
	if err := env.Bed.Hub.Client.Patch(ctx, private, patch); err != nil {
		t.Fatal(err)
	}
	if err := env.Bed.Hub.Client.Delete(ctx, &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "trust-ca-2"}}); err != nil {
		t.Fatal(err)
	}
	// Back to the first CA alone: the opted-out one never joined, the deleted one left.
	for _, cp := range env.Bed.Downstreams {
		waitBundle(t, cp, "default", env.CAPEM)
	}
}

// bundleOf is the bundle of these PEM certificates: sorted, as the hub writes it.
func bundleOf(pems ...[]byte) []byte {
	for i := range pems {
		for j := i + 1; j < len(pems); j++ {
			if bytes.Compare(pems[j], pems[i]) < 0 {
				pems[i], pems[j] = pems[j], pems[i]
			}
		}
	}
	return bytes.Join(pems, nil)
}

// labelCluster sets key=value on the Argo CD Secret of cp's registration.
func labelCluster(t *testing.T, cp *testbed.ControlPlane, key, value string) {
	t.Helper()
	ctx := context.Background()
	list := &corev1.SecretList{}
	if err := env.Bed.Hub.Client.List(ctx, list, client.InNamespace(env.Bed.ArgoNamespace()), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if string(s.Data["name"]) != cp.Name {
			continue
		}
		patch := client.MergeFrom(s.DeepCopy())
		s.Labels[key] = value
		if err := env.Bed.Hub.Client.Patch(ctx, s, patch); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no cluster Secret for %s", cp.Name)
}

// A development CA scoped to env=dev (certhub.io/trust-clusters) is
// trusted in the dev cluster and absent from the prod cluster's bundles,
// where a certificate of the shared CA keeps verifying; scoped away, it
// leaves the dev cluster too.
func TestScopedCAStaysInItsClusters(t *testing.T) {
	ctx := context.Background()
	dev, prod := env.Bed.Downstreams[0], env.Bed.Downstreams[1]
	labelCluster(t, dev, "env", "dev")
	labelCluster(t, prod, "env", "prod")
	devCA, err := env.Bed.CreateCAIssuer(ctx, "trust-dev-ca")
	if err != nil {
		t.Fatal(err)
	}
	iss := &cmapi.ClusterIssuer{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Name: "trust-dev-ca"}, iss); err != nil {
		t.Fatal(err)
	}
	scopeTo := func(selector string) {
		t.Helper()
		patch := client.MergeFrom(iss.DeepCopy())
		metav1.SetMetaDataAnnotation(&iss.ObjectMeta, hubapi.TrustClustersAnnotation, selector)
		if err := env.Bed.Hub.Client.Patch(ctx, iss, patch); err != nil {
			t.Fatal(err)
		}
	}
	scopeTo("env=dev")
	t.Cleanup(func() {
		_ = env.Bed.Hub.Client.Delete(context.Background(), iss)
		for _, cp := range env.Bed.Downstreams {
			waitBundle(t, cp, "default", env.CAPEM)
		}
	})
	both := bundleOf(env.CAPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: devCA.Raw}))
	waitBundle(t, dev, "default", both)
	// The prod cluster issues meanwhile and verifies against its bundle,
	// which never gains the dev CA.
	const ns = "scoped-trust"
	fixture.EnsureNamespace(t, prod.Client, ns)
	crt := fixture.Certificate(ns, "shop", issuerName, fixture.WithNames("", "shop.prod.example.com"))
	if err := prod.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	crt = fixture.WaitReady(t, prod.Client, client.ObjectKeyFromObject(crt))
	prodBundle := waitBundle(t, prod, ns, env.CAPEM)
	if err := handshake(t, prod.Client, crt, []byte(prodBundle.Data[trust.DefaultKey])); err != nil {
		t.Errorf("prod handshake against its bundle: %v", err)
	}
	waitBundle(t, prod, "default", env.CAPEM)
	scopeTo("env=staging")
	waitBundle(t, dev, "default", env.CAPEM)
}
