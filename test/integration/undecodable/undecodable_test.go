package undecodable

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/drpair"
	"github.com/certhub/certhub/internal/revocation"
	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/test/fixture"
)

const ns = "mixed"

// One Certificate no Go type can decode, in the namespace of a healthy
// one, in the primary of a DR pair: the standby still mirrors the healthy
// one, discovery still reports its Secret, `certhub status` still lists
// it, a revocation of its serial completes (renewed, then listed on the
// CRL), and a CA rotation moves it to the next CA and completes.
func TestUndecodableCertificateStopsNoReader(t *testing.T) {
	ctx := context.Background()
	primary, standbyCP := env.Bed.Downstreams[0], env.Bed.Downstreams[1]
	for _, cp := range env.Bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, ns)
	}
	dr := map[string]string{"dr": "true"}
	fixture.UndecodableCertificate(t, primary.Client, ns, "one-day", issuerName, dr)
	crt := fixture.Certificate(ns, "web", issuerName, fixture.WithNames("", "web.mixed.example.com"))
	crt.Labels = dr
	if err := primary.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	crt = fixture.WaitReady(t, primary.Client, client.ObjectKeyFromObject(crt))
	first := leafOf(t, primary.Client, crt)

	// The DR pair's mirror: the standby holds web, Ready.
	fixture.WaitReady(t, standbyCP.Client, client.ObjectKeyFromObject(crt))
	waitFor(t, "the standby's status to count web ready", func(ctx context.Context) bool {
		sts, err := drpair.ReadStatuses(ctx, env.Bed.Hub.Client, env.Bed.HubNamespace())
		return err == nil && sts[standbyCP.Name] != nil && sts[standbyCP.Name].ReadyCertificates >= 1
	})

	// Discovery reports web's Secret.
	waitFor(t, "discovery to report mixed/web-tls", func(context.Context) bool {
		var d app.DiscoveredStatus
		if !runJSON(t, &d, "status", "--discovered", "--cluster", primary.Name) {
			return false
		}
		return slices.ContainsFunc(d.Certificates, func(r app.DiscoveredRow) bool { return r.Namespace == ns && r.Secret == crt.Spec.SecretName })
	})

	// certhub status lists web, Ready.
	var rows []app.ClusterStatus
	if !runJSON(t, &rows, "status", "--cluster", primary.Name) || len(rows) != 1 ||
		!slices.ContainsFunc(rows[0].Certificates, func(r app.CertificateRow) bool { return r.Namespace == ns && r.Name == "web" && r.Ready == "True" }) {
		t.Fatalf("certhub status --cluster %s: %+v", primary.Name, rows)
	}

	// A revocation of web's serial completes.
	rev := &hubapi.CertificateRevocation{ObjectMeta: metav1.ObjectMeta{Name: "beside-undecodable"}, Spec: hubapi.CertificateRevocationSpec{
		Serials: []string{fmt.Sprintf("%X", first.SerialNumber)}, Reason: hubapi.RevocationKeyCompromise}}
	if err := env.Bed.Hub.Client.Create(ctx, rev); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the revocation to complete and the CRL to list the serial", func(ctx context.Context) bool {
		if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKeyFromObject(rev), rev); err != nil {
			return false
		}
		return rev.Status.Phase == hubapi.RevocationComplete && listed(t, first.SerialNumber)
	})
	renewed := leafOf(t, primary.Client, crt)
	if renewed.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("the revoked certificate was not renewed first")
	}

	// A CA rotation moves web to the next CA and completes.
	next, err := env.Bed.CreateCASecret(ctx, issuerName+"-next", issuerName+" next CA")
	if err != nil {
		t.Fatal(err)
	}
	ci := &cmapi.ClusterIssuer{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Name: issuerName}, ci); err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataAnnotation(&ci.ObjectMeta, hubapi.NextCAAnnotation, issuerName+"-next")
	if err := env.Bed.Hub.Client.Update(ctx, ci); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rotation to complete with web on the next CA", func(ctx context.Context) bool {
		leaf := leafOf(t, primary.Client, crt)
		return leaf.CheckSignatureFrom(next) == nil && rotationPhase(ctx) == string(rotation.Complete)
	})
}

func leafOf(t *testing.T, c client.Client, crt *cmapi.Certificate) *x509.Certificate {
	t.Helper()
	s := fixture.GetSecret(t, c, crt)
	b, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if b == nil {
		t.Fatalf("%s/%s: no certificate in its Secret", crt.Namespace, crt.Name)
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// rotationPhase is the phase of the issuer's rotation ("" when none).
func rotationPhase(ctx context.Context) string {
	cm := &corev1.ConfigMap{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: env.Bed.HubNamespace(), Name: rotation.StatePrefix + issuerName}, cm); err != nil {
		return ""
	}
	return cm.Data["phase"]
}

// listed reports whether the issuer's CRL, served by the hub, lists serial.
func listed(t *testing.T, serial *big.Int) bool {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s%s%s", crlAddr, revocation.CRLPath, issuerName))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	der, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return false
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(crl.RevokedCertificateEntries, func(e x509.RevocationListEntry) bool { return e.SerialNumber.Cmp(serial) == 0 })
}

// runJSON runs a certhub command with -o json against the hub into v.
func runJSON(t *testing.T, v any, args ...string) bool {
	t.Helper()
	var out bytes.Buffer
	cmd := app.NewCommand()
	cmd.SetArgs(append(args, "-o", "json", "--kubeconfig", env.Kubeconfig, "--namespace", env.Bed.HubNamespace(),
		"--cluster-secret-namespace", env.Bed.ArgoNamespace()))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.Execute(); err != nil {
		t.Logf("certhub %v: %v\n%s", args, err, out.String())
		return false
	}
	return json.Unmarshal(out.Bytes(), v) == nil
}

func waitFor(t *testing.T, what string, ok func(context.Context) bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		return ok(ctx), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
