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

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/internal/trust"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
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
	changeIssuer(t, func(ci *cmapi.ClusterIssuer) { metav1.SetMetaDataAnnotation(&ci.ObjectMeta, key, value) })
}

func changeIssuer(t *testing.T, change func(*cmapi.ClusterIssuer)) {
	t.Helper()
	ci := &cmapi.ClusterIssuer{}
	if err := bed.Hub.Client.Get(context.Background(), client.ObjectKey{Name: issuerName}, ci); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ci.DeepCopy())
	change(ci)
	if err := bed.Hub.Client.Patch(context.Background(), ci, patch); err != nil {
		t.Fatal(err)
	}
}

// bundlesHoldOnly waits until every cluster's bundle is exactly ca.
func bundlesHoldOnly(t *testing.T, ca *x509.Certificate) {
	t.Helper()
	want := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}))
	for _, cp := range bed.Downstreams {
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cm := &corev1.ConfigMap{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: trust.DefaultConfigMapName}, cm); err != nil {
				return false, nil
			}
			return cm.Data[trust.DefaultKey] == want, nil
		})
		if err != nil {
			t.Errorf("%s's bundle does not hold exactly %s", cp.Name, ca.Subject.CommonName)
		}
	}
}

// The issuer's CA rotates in three waves (cluster-1, -2, -3), every
// served certificate handshaking against its own cluster's bundle at every
// poll. A tenant's Certificate in cluster-1 that cannot move (its Secret is
// not certhub's: SecretNotOwned) holds no wave and is listed. cluster-2 is
// down before its wave: it holds no wave either (wave 3 rolls), retiring
// the old CA waits for it, and once back it is rotated bundle first. Then
// the rotation is finished in Git (spec.ca.secretName, annotation removed).
func TestRotationInWaves(t *testing.T) {
	ctx := context.Background()
	r := &rotationTest{t: t, down: map[*testbed.ControlPlane]bool{}, certs: servedCertificates(t)}
	c1, c2, c3 := bed.Downstreams[0], bed.Downstreams[1], bed.Downstreams[2]
	stuck := tenantStuck(t, c1)
	oldCA := caOf(t, env.CAPEM)
	r.until("every certificate served and trusted on its own cluster", time.Minute, func(l map[served]*x509.Certificate) bool {
		return len(l) == len(r.certs)
	})

	newCA, err := bed.CreateCASecret(ctx, issuerName+"-next", issuerName+" next CA")
	if err != nil {
		t.Fatal(err)
	}
	annotate(t, hubapi.NextCAAnnotation, issuerName+"-next")
	r.until("the new CA published in every bundle, soaking", time.Minute, func(map[served]*x509.Certificate) bool {
		return phase() == string(rotation.Soaking)
	})
	// The wave-2 cluster fails before its wave starts.
	if err := c2.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	r.down[c2] = true
	r.until("wave 1 (cluster-1) on the new CA, its stuck Certificate aside", time.Minute, func(l map[served]*x509.Certificate) bool {
		return signedBy(newCA, l, c1)
	})
	r.until("waves 2 and 3 rolled without cluster-2; retiring the old CA waits for it", 2*time.Minute, func(l map[served]*x509.Certificate) bool {
		return phase() == string(rotation.Grace) && signedBy(newCA, l, c3) && strings.Contains(state(), "waits for "+c2.Name)
	})
	e := fixture.WaitEvent(t, bed.Hub.Client, "default", issuerName, rotation.ReasonProgress, stuck)
	t.Logf("Event: %s", e.Note)

	if err := c2.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	delete(r.down, c2)
	r.until("cluster-2 back and rotated (bundle first), the old CA retired", 2*time.Minute, func(l map[served]*x509.Certificate) bool {
		return phase() == string(rotation.Complete) && signedBy(newCA, l, c1) && signedBy(newCA, l, c2) && signedBy(newCA, l, c3)
	})
	bundlesHoldOnly(t, newCA)
	r.check()

	// Finished in Git: the issuer's CA is the new one, the annotation goes.
	changeIssuer(t, func(ci *cmapi.ClusterIssuer) {
		ci.Spec.CA.SecretName = issuerName + "-next"
		delete(ci.Annotations, hubapi.NextCAAnnotation)
	})
	r.until("the rotation's state gone, nothing re-issued", time.Minute, func(l map[served]*x509.Certificate) bool {
		return state() == "none" && signedBy(newCA, l, c1) && signedBy(newCA, l, c2) && signedBy(newCA, l, c3)
	})
	bundlesHoldOnly(t, newCA)
	_ = oldCA
}

// Withdrawn after its first wave, a rotation rolls back: every handshake
// in every cluster verifies at every poll, cluster-1 goes back to the
// issuer's CA, and the withdrawn CA leaves the bundles only then.
func TestRotationAbortedAfterItsFirstWave(t *testing.T) {
	ctx := context.Background()
	r := &rotationTest{t: t, down: map[*testbed.ControlPlane]bool{}, certs: servedCertificates(t)}
	c1, c2, c3 := bed.Downstreams[0], bed.Downstreams[1], bed.Downstreams[2]
	current := &corev1.Secret{}
	ci := &cmapi.ClusterIssuer{}
	if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Name: issuerName}, ci); err != nil {
		t.Fatal(err)
	}
	if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: bed.HubNamespace(), Name: ci.Spec.CA.SecretName}, current); err != nil {
		t.Fatal(err)
	}
	currentCA := caOf(t, current.Data[corev1.TLSCertKey])
	r.until("every certificate served on the issuer's CA", time.Minute, func(l map[served]*x509.Certificate) bool {
		return len(l) == len(r.certs) && signedBy(currentCA, l, c1) && signedBy(currentCA, l, c2) && signedBy(currentCA, l, c3)
	})
	withdrawn, err := bed.CreateCASecret(ctx, issuerName+"-withdrawn", issuerName+" withdrawn CA")
	if err != nil {
		t.Fatal(err)
	}
	annotate(t, hubapi.NextCAAnnotation, issuerName+"-withdrawn")
	r.until("wave 1 (cluster-1) on the new CA", 2*time.Minute, func(l map[served]*x509.Certificate) bool {
		return signedBy(withdrawn, l, c1) && signedBy(currentCA, l, c3)
	})
	changeIssuer(t, func(ci *cmapi.ClusterIssuer) { delete(ci.Annotations, hubapi.NextCAAnnotation) })
	e := fixture.WaitEvent(t, bed.Hub.Client, "default", issuerName, rotation.ReasonHalted, "withdrawn")
	t.Logf("Event: %s", e.Note)
	r.until("rolled back: every cluster on the issuer's CA, the rotation's state gone", 2*time.Minute, func(l map[served]*x509.Certificate) bool {
		return state() == "none" && signedBy(currentCA, l, c1) && signedBy(currentCA, l, c2) && signedBy(currentCA, l, c3)
	})
	bundlesHoldOnly(t, currentCA)
	r.check()
}

// servedCertificates are Certificates a and b in every cluster, created
// when missing (each test may run alone).
func servedCertificates(t *testing.T) []served {
	t.Helper()
	var out []served
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, ns)
		for _, name := range []string{"a", "b"} {
			crt := fixture.Certificate(ns, name, issuerName, fixture.WithNames("", name+"."+cp.Name+".example.com"))
			crt.Spec.SecretName = name + "-tls"
			if err := cp.Client.Create(context.Background(), crt); client.IgnoreAlreadyExists(err) != nil {
				t.Fatal(err)
			}
			out = append(out, served{cp, name})
		}
	}
	return out
}

// tenantStuck creates, in cluster cp, a Certificate that cannot move for
// a reason of its own (its Secret exists and is not certhub's) and returns
// its namespace/name as the rotation lists it.
func tenantStuck(t *testing.T, cp *testbed.ControlPlane) string {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "theirs-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: []byte("x"), corev1.TLSPrivateKeyKey: []byte("y")}}
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	crt := fixture.Certificate(ns, "theirs", issuerName, func(c *cmapi.Certificate) { c.Spec.SecretName = "theirs-tls" })
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitFor(t, cp.Client, client.ObjectKeyFromObject(crt), "Ready=False/SecretNotOwned", fixture.NotReadyWith(reasons.SecretNotOwned))
	return ns + "/theirs"
}

func caOf(t *testing.T, raw []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(raw)
	if b == nil {
		t.Fatal("no PEM")
	}
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
