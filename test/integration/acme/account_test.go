package acme

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/certhub/certhub/internal/acme"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
	"github.com/certhub/certhub/test/fixture/testbed/acmebed"
)

// Two hub replicas keep the accounts of ACME ClusterIssuers against real
// Pebble: the account key Secret is created once (in the hub namespace
// only) and both replicas end on the same account; an EAB-requiring CA
// accepts the account only with the binding; bad input (generation
// disabled and no key Secret, CA unreachable) ends in Ready=False with
// cert-manager's reason and an Event, while the good issuers stay Ready.
func TestAccountsAreRegisteredOnceAndReported(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bed.Stop() }()
	ca, err := acmebed.Start(ctx, acmebed.Options{Env: []string{"PEBBLE_VA_NOSLEEP=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ca.Stop() }()
	hmac := make([]byte, 32)
	_, _ = rand.Read(hmac)
	eabKey := base64.RawURLEncoding.EncodeToString(hmac)
	eabCA, err := acmebed.Start(ctx, acmebed.Options{EABKeys: map[string]string{"kid-1": eabKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = eabCA.Stop() }()

	for i := range 2 {
		mgr, err := manager.New(bed.Hub.Config, manager.Options{
			Scheme: testbed.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Controller: config.Controller{SkipNameValidation: ptr.To(true)}, // two replicas in one process
		})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := acme.New(acme.Options{Namespace: testbed.DefaultHubNamespace, Identity: fmt.Sprintf("replica-%d", i), UserAgent: "certhub-test"})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		go func() {
			if err := mgr.Start(ctx); err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
		}()
	}
	hub := bed.Hub.Client
	create := func(ci *cmapi.ClusterIssuer) {
		t.Helper()
		if err := hub.Create(ctx, ci); err != nil {
			t.Fatal(err)
		}
	}

	create(fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account"))
	create(fixture.ACMEClusterIssuer("pebble-again", ca.DirectoryURL, ca.ServerCAs, "pebble-account"))
	create(fixture.ACMEClusterIssuer("no-key", ca.DirectoryURL, ca.ServerCAs, "absent", func(ci *cmapi.ClusterIssuer) {
		ci.Spec.ACME.DisableAccountKeyGeneration = true
	}))
	create(fixture.ACMEClusterIssuer("unreachable", "https://127.0.0.1:1/dir", ca.ServerCAs, "unreachable-account"))
	create(fixture.ACMEClusterIssuer("eab-missing", eabCA.DirectoryURL, eabCA.ServerCAs, "eab-missing-account"))
	if err := hub.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.DefaultHubNamespace, Name: "eab"}, Data: map[string][]byte{"secret": []byte(eabKey)}}); err != nil {
		t.Fatal(err)
	}
	create(fixture.ACMEClusterIssuer("eab", eabCA.DirectoryURL, eabCA.ServerCAs, "eab-account", func(ci *cmapi.ClusterIssuer) {
		ci.Spec.ACME.ExternalAccountBinding = &cmacme.ACMEExternalAccountBinding{KeyID: "kid-1",
			Key: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: "eab"}, Key: "secret"}}
	}))

	registered := fixture.IssuerReadyWith(cmmeta.ConditionTrue, acme.ReasonAccountRegistered)
	a := fixture.WaitClusterIssuer(t, hub, "pebble", "registered", registered)
	b := fixture.WaitClusterIssuer(t, hub, "pebble-again", "registered", registered)
	if a.Status.ACME == nil || a.Status.ACME.URI == "" || b.Status.ACME == nil || a.Status.ACME.URI != b.Status.ACME.URI {
		t.Errorf("two ClusterIssuers on one key, two replicas: account URIs %+v and %+v, want one account", a.Status.ACME, b.Status.ACME)
	}
	key := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: testbed.DefaultHubNamespace, Name: "pebble-account"}, key); err != nil {
		t.Fatalf("account key Secret: %v", err)
	}
	if len(key.Data[corev1.TLSPrivateKeyKey]) == 0 || key.Data[corev1.TLSPrivateKeyKey][0] != '-' {
		t.Errorf("account key Secret holds %v, want a PEM key in tls.key", key.Data)
	}
	fixture.WaitClusterIssuer(t, hub, "eab", "registered with the binding", registered)

	fixture.WaitClusterIssuer(t, hub, "no-key", "InvalidConfig", fixture.IssuerReadyWith(cmmeta.ConditionFalse, acme.ReasonInvalidConfig))
	fixture.WaitEvent(t, hub, metav1.NamespaceDefault, "no-key", acme.ReasonInvalidConfig, "disableAccountKeyGeneration")
	fixture.WaitClusterIssuer(t, hub, "unreachable", "ErrRegisterACMEAccount", fixture.IssuerReadyWith(cmmeta.ConditionFalse, acme.ReasonRegisterFailed))
	fixture.WaitEvent(t, hub, metav1.NamespaceDefault, "unreachable", acme.ReasonRegisterFailed, "127.0.0.1:1")
	e := fixture.WaitClusterIssuer(t, hub, "eab-missing", "refused without a binding", fixture.IssuerReadyWith(cmmeta.ConditionFalse, acme.ReasonRegisterFailed))
	t.Logf("without EAB: %s", fixture.IssuerReady(e).Message)
	if c := fixture.IssuerReady(fixture.WaitClusterIssuer(t, hub, "pebble", "still registered", registered)); c == nil {
		t.Fatal("pebble lost its Ready condition")
	}
}
