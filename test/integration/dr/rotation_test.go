package dr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/internal/trust"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// served is a certificate as its cluster serves it.
type served struct {
	cp   *testbed.ControlPlane
	name string
}

// handshakes serves every certificate and connects trusting only its own
// cluster's bundle, as a workload there would; it returns each leaf, and
// fails the test on a handshake that does not verify.
func handshakes(t *testing.T, certs []served) map[served]*x509.Certificate {
	t.Helper()
	out := map[served]*x509.Certificate{}
	for _, s := range certs {
		sec, bundle := &corev1.Secret{}, &corev1.ConfigMap{}
		if s.cp.Client.Get(context.Background(), client.ObjectKey{Namespace: "apps", Name: s.name + "-tls"}, sec) != nil ||
			s.cp.Client.Get(context.Background(), client.ObjectKey{Namespace: "apps", Name: trust.DefaultConfigMapName}, bundle) != nil {
			continue
		}
		pair, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			continue
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			continue
		}
		if err := fixture.TLSHandshake(pair, []byte(bundle.Data[trust.DefaultKey]), s.name+".apps.example.com"); err != nil {
			t.Errorf("%s/%s does not verify against its own cluster's bundle: %v", s.cp.Name, s.name, err)
		}
		out[s] = leaf
	}
	return out
}

func rotationPhase(c client.Client, ns, issuer string) string {
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rotation.StatePrefix + issuer}, cm); err != nil {
		return "none"
	}
	return fmt.Sprintf("%s wave=%s/%s", cm.Data["phase"], cm.Data["wave"], cm.Data["waves"])
}

// A CA rotation in two waves is interrupted after its first wave by the
// loss of the hub. The rebuilt hub (Git: the ClusterIssuer still annotated
// with the next CA, the registrations with their waves; the secret
// manager: both CA key pairs) takes the rotation up from what the
// downstream bundles and certificates hold — never from the old CA alone —
// and completes it; every served certificate verifies against its own
// cluster's bundle at every poll, before, during and after the loss.
func TestRotationInterruptedByTheLossOfTheHub(t *testing.T) {
	ctx := context.Background()
	const issuer = "rot-ca"
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Stop() })
	if _, err := bed.CreateCAIssuer(ctx, issuer); err != nil {
		t.Fatal(err)
	}
	var kept []client.Object
	for w, cp := range bed.Downstreams {
		s, err := bed.RegisterLabelled(ctx, cp, map[string]string{hubapi.WaveLabel: strconv.Itoa(w)})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, s.DeepCopy())
	}
	kubeconfig, err := bed.Hub.WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := fleet.Config{Binary: certhubBinary, Kubeconfig: kubeconfig, HubNamespace: bed.HubNamespace(), ArgoNamespace: bed.ArgoNamespace(),
		Args: []string{"--rotation-soak=3s", "--rotation-pause=4s", "--rotation-deadline=20s", "--rotation-grace=2s", "--issuer-retry-interval=1s"}}
	first := cfg.Start(t, "replica-0")

	var certs []served
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, "apps")
		for _, name := range []string{"a", "b"} {
			crt := fixture.Certificate("apps", name, issuer, fixture.WithNames("", name+".apps.example.com"))
			if err := cp.Client.Create(ctx, crt); err != nil {
				t.Fatal(err)
			}
			certs = append(certs, served{cp, name})
		}
	}
	until := func(what string, timeout time.Duration, cond func(map[served]*x509.Certificate) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			return cond(handshakes(t, certs)), nil
		})
		if err != nil {
			t.Fatalf("never: %s (rotation %s)", what, rotationPhase(bed.Hub.Client, bed.HubNamespace(), issuer))
		}
		t.Logf("%s (rotation %s)", what, rotationPhase(bed.Hub.Client, bed.HubNamespace(), issuer))
	}
	signedBy := func(ca *x509.Certificate, leaves map[served]*x509.Certificate, cp *testbed.ControlPlane) bool {
		n := 0
		for s, leaf := range leaves {
			if s.cp == cp {
				if leaf.CheckSignatureFrom(ca) != nil {
					return false
				}
				n++
			}
		}
		return n == 2
	}
	until("every certificate served and trusted", time.Minute, func(l map[served]*x509.Certificate) bool { return len(l) == len(certs) })

	newCA, err := bed.CreateCASecret(ctx, issuer+"-next", issuer+" next CA")
	if err != nil {
		t.Fatal(err)
	}
	ci := &cmapi.ClusterIssuer{}
	if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Name: issuer}, ci); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ci.DeepCopy())
	metav1.SetMetaDataAnnotation(&ci.ObjectMeta, hubapi.NextCAAnnotation, issuer+"-next")
	if err := bed.Hub.Client.Patch(ctx, ci, patch); err != nil {
		t.Fatal(err)
	}
	c1, c2 := bed.Downstreams[0], bed.Downstreams[1]
	until("wave 1 (cluster-1) on the new CA", 2*time.Minute, func(l map[served]*x509.Certificate) bool { return signedBy(newCA, l, c1) })

	// What survives: Git (the annotated ClusterIssuer, the registrations)
	// and the secret manager (both CA key pairs).
	if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Name: issuer}, ci); err != nil {
		t.Fatal(err)
	}
	ci.Status = cmapi.IssuerStatus{}
	kept = append(kept, fixture.Restorable(ci))
	for _, name := range []string{ci.Spec.CA.SecretName, issuer + "-next"} {
		s := &corev1.Secret{}
		if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: bed.HubNamespace(), Name: name}, s); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, fixture.Restorable(s))
	}
	if err := first.Stop(syscall.SIGKILL); err != nil {
		t.Logf("stopping %s: %v", first, err)
	}
	if err := bed.RebuildHub(ctx); err != nil {
		t.Fatal(err)
	}
	handshakes(t, certs) // the hub is gone: what is served still verifies
	for _, obj := range kept {
		if err := bed.Hub.Client.Create(ctx, fixture.Restorable(obj)); err != nil {
			t.Fatalf("restoring %s: %v", obj.GetName(), err)
		}
	}
	if cfg.Kubeconfig, err = bed.Hub.WriteKubeconfig(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	cfg.Start(t, "replica-1")
	until("the rotation completed by the rebuilt hub: both clusters on the new CA, the old CA retired", 3*time.Minute, func(l map[served]*x509.Certificate) bool {
		return signedBy(newCA, l, c1) && signedBy(newCA, l, c2) && strings.HasPrefix(rotationPhase(bed.Hub.Client, bed.HubNamespace(), issuer), string(rotation.Complete))
	})
	handshakes(t, certs)
}
