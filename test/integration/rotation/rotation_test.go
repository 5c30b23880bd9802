package rotation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/internal/testbed"
	"github.com/certhub/certhub/internal/trust"
	"github.com/certhub/certhub/test/fixture"
)

const ns = "apps"

// served is one certificate as its cluster serves it.
type served struct {
	cp   *testbed.ControlPlane
	name string
}

// handshake serves the certificate of s on loopback and connects trusting
// only its cluster's bundle, as a workload there would. It returns the
// certificate served.
func handshake(ctx context.Context, s served) (*x509.Certificate, error) {
	sec := &corev1.Secret{}
	if err := s.cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.name + "-tls"}, sec); err != nil {
		return nil, err
	}
	bundle := &corev1.ConfigMap{}
	if err := s.cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: trust.DefaultConfigMapName}, bundle); err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if err := fixture.TLSHandshake(pair, []byte(bundle.Data[trust.DefaultKey]), s.name+"."+s.cp.Name+".example.com"); err != nil {
		return leaf, fmt.Errorf("%s/%s does not verify against %s's own bundle: %w", s.cp.Name, s.name, s.cp.Name, err)
	}
	return leaf, nil
}

// rotationTest watches the trust invariant at every poll.
type rotationTest struct {
	t     *testing.T
	certs []served
	down  map[*testbed.ControlPlane]bool
}

// check handshakes every served certificate of the reachable clusters; a
// failure fails the test.
func (r *rotationTest) check() map[served]*x509.Certificate {
	out := map[served]*x509.Certificate{}
	for _, s := range r.certs {
		if r.down[s.cp] {
			continue
		}
		leaf, err := handshake(context.Background(), s)
		if err != nil && leaf != nil {
			r.t.Error(err)
		}
		if leaf != nil {
			out[s] = leaf
		}
	}
	return out
}

// until polls cond, checking the trust invariant each time.
func (r *rotationTest) until(what string, timeout time.Duration, cond func(map[served]*x509.Certificate) bool) {
	r.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(r.check()), nil
	})
	if err != nil {
		r.t.Fatalf("never: %s (rotation: %s)", what, state())
	}
	r.t.Logf("%s (rotation: %s)", what, state())
}

func state() string {
	cm := &corev1.ConfigMap{}
	if err := bed.Hub.Client.Get(context.Background(), client.ObjectKey{Namespace: bed.HubNamespace(), Name: rotation.StatePrefix + issuerName}, cm); err != nil {
		return "none"
	}
	return fmt.Sprintf("%s wave=%s/%s moved=%s/%s %s", cm.Data["phase"], cm.Data["wave"], cm.Data["waves"], cm.Data["moved"], cm.Data["total"], cm.Data["reason"])
}

func phase() string {
	cm := &corev1.ConfigMap{}
	_ = bed.Hub.Client.Get(context.Background(), client.ObjectKey{Namespace: bed.HubNamespace(), Name: rotation.StatePrefix + issuerName}, cm)
	return cm.Data["phase"]
}

func signedBy(ca *x509.Certificate, leaves map[served]*x509.Certificate, cp *testbed.ControlPlane) bool {
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

func annotate(t *testing.T, key, value string) {
	t.Helper()
	ci := &cmapi.ClusterIssuer{}
	if err := bed.Hub.Client.Get(context.Background(), client.ObjectKey{Name: issuerName}, ci); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ci.DeepCopy())
	metav1.SetMetaDataAnnotation(&ci.ObjectMeta, key, value)
	if err := bed.Hub.Client.Patch(context.Background(), ci, patch); err != nil {
		t.Fatal(err)
	}
}

func TestRotationInWaves(t *testing.T) {
	ctx := context.Background()
	r := &rotationTest{t: t, down: map[*testbed.ControlPlane]bool{}}
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, ns)
		for _, name := range []string{"a", "b"} {
			crt := fixture.Certificate(ns, name, issuerName, fixture.WithNames("", name+"."+cp.Name+".example.com"))
			crt.Spec.SecretName = name + "-tls"
			if err := cp.Client.Create(ctx, crt); err != nil {
				t.Fatal(err)
			}
			r.certs = append(r.certs, served{cp, name})
		}
	}
	b, _ := pem.Decode(env.CAPEM)
	oldCA, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	c1, c2, c3 := bed.Downstreams[0], bed.Downstreams[1], bed.Downstreams[2]
	r.until("every certificate served and trusted on its own cluster", time.Minute, func(l map[served]*x509.Certificate) bool {
		return len(l) == len(r.certs)
	})

	newCA, err := bed.CreateCASecret(ctx, issuerName+"-next", issuerName+" next CA")
	if err != nil {
		t.Fatal(err)
	}
	annotate(t, rotation.NextCAAnnotation, issuerName+"-next")
	r.until("the new CA published in every bundle, soaking", time.Minute, func(map[served]*x509.Certificate) bool {
		return phase() == string(rotation.Soaking)
	})
	// The wave-1 cluster fails before its wave starts.
	if err := c2.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	r.down[c2] = true
	r.until("wave 1 (cluster-1) on the new CA", time.Minute, func(l map[served]*x509.Certificate) bool {
		return signedBy(newCA, l, c1) && signedBy(oldCA, l, c3)
	})
	r.until("wave 2 halted: cluster-2 cannot be re-issued", time.Minute, func(l map[served]*x509.Certificate) bool {
		return phase() == string(rotation.Halted) && signedBy(oldCA, l, c3)
	})
	e := fixture.WaitEvent(t, bed.Hub.Client, "default", issuerName, rotation.ReasonHalted, c2.Name)
	t.Logf("Event: %s", e.Note)

	// cluster-2 recovers: its wave's certificates move; the rotation stays
	// halted (and wave 3 unstarted) until resumed.
	if err := c2.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	delete(r.down, c2)
	r.until("cluster-2 back, still halted, cluster-3 still on the old CA", 2*time.Minute, func(l map[served]*x509.Certificate) bool {
		return phase() == string(rotation.Halted) && signedBy(oldCA, l, c3) && len(l) == len(r.certs)
	})
	annotate(t, rotation.ResumeAnnotation, "after-cluster-2-recovered")
	r.until("every wave done, the old CA gone from the bundles", 2*time.Minute, func(l map[served]*x509.Certificate) bool {
		return phase() == string(rotation.Complete) && signedBy(newCA, l, c1) && signedBy(newCA, l, c2) && signedBy(newCA, l, c3)
	})
	want := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: newCA.Raw}))
	for _, cp := range bed.Downstreams {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cm := &corev1.ConfigMap{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: trust.DefaultConfigMapName}, cm); err != nil {
				return false, nil
			}
			return cm.Data[trust.DefaultKey] == want, nil
		})
		if err != nil {
			t.Errorf("%s's bundle still holds more than the new CA", cp.Name)
		}
	}
	r.check()
	if strings.Contains(state(), "Halted") {
		t.Error("still halted")
	}
}
