package acme

import (
	"context"
	"testing"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/internal/acme"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
	"github.com/certhub/certhub/test/fixture/testbed/acmebed"
)

// issuanceBed is what the issuing tests start: a hub with downstreams
// registered clusters, Pebble (PEBBLE_VA_NOSLEEP=1, default nonce
// rejection) + BIND, BIND's TSIG secret in the hub Secret "tsig", and an
// admin kubeconfig of the hub for replica processes. caOpts change the
// CA's options. The test's cleanup stops them all.
type issuanceBed struct {
	*testbed.Bed
	CA         *acmebed.Bed
	Kubeconfig string
}

func startIssuanceBed(ctx context.Context, t *testing.T, downstreams int, caOpts ...func(*acmebed.Options)) *issuanceBed {
	t.Helper()
	return startIssuanceBedWith(ctx, t, testbed.Options{Downstreams: downstreams}, caOpts...)
}

// startIssuanceBedWith is startIssuanceBed with the test bed's options.
func startIssuanceBedWith(ctx context.Context, t *testing.T, bedOpts testbed.Options, caOpts ...func(*acmebed.Options)) *issuanceBed {
	t.Helper()
	bed, err := testbed.Start(ctx, bedOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Stop() })
	for _, cp := range bed.Downstreams {
		if _, err := bed.Register(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := bed.Hub.WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts := acmebed.Options{Env: []string{"PEBBLE_VA_NOSLEEP=1"}}
	for _, o := range caOpts {
		o(&opts)
	}
	ca, err := acmebed.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ca.Stop() })
	b := &issuanceBed{Bed: bed, CA: ca, Kubeconfig: kubeconfig}
	b.createTSIGSecret(ctx, t, "tsig", ca.TSIGSecret)
	return b
}

// runHub runs a hub replica process (certhub run) against the bed, BIND
// its only nameserver for DNS-01, with args added, until the test ends,
// and waits until ClusterIssuer issuer has its ACME account registered. A
// process, not hub.Run in the test: each package's metrics register once
// per process, so a second in-process hub in one test binary would fail.
func (b *issuanceBed) runHub(t *testing.T, issuer string, args ...string) *fleet.Replica {
	t.Helper()
	cfg := fleet.Config{Binary: certhubBinary, Kubeconfig: b.Kubeconfig, HubNamespace: b.HubNamespace(), ArgoNamespace: b.ArgoNamespace(),
		Args: append([]string{"--acme-dns01-recursive-nameservers", b.CA.Nameserver, "--acme-dns01-recursive-nameservers-only"}, args...)}
	r := cfg.Start(t, "replica-0")
	fixture.WaitClusterIssuer(t, b.Hub.Client, issuer, "registered", fixture.IssuerReadyWith(cmmeta.ConditionTrue, acme.ReasonAccountRegistered))
	return r
}

// createTSIGSecret writes a TSIG secret (key fixture.TSIGSecretKey) in the hub namespace.
func (b *issuanceBed) createTSIGSecret(ctx context.Context, t *testing.T, name, secret string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.HubNamespace(), Name: name}, Data: map[string][]byte{fixture.TSIGSecretKey: []byte(secret)}}
	if err := b.Hub.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
}
