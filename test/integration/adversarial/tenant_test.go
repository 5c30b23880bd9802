package adversarial

import (
	"context"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
)

// Item 5 (rest): a tenant cannot take a Secret over by annotating its own
// Certificate, cannot take a typed Secret over even when granted, and cannot
// stamp reserved keys (an Argo CD cluster label) onto its Secret. Each gets
// its reason, nothing is written, and a neighbour issues meanwhile.
func TestTenantCannotTakeOrStampSecrets(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[1].Client
	const ns = "tenant-grab"
	fixture.EnsureNamespace(t, c, ns)
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "theirs-tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: []byte("x"), corev1.TLSPrivateKeyKey: []byte("y")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry", Annotations: map[string]string{hubapi.AdoptSecretAnnotation: "registry"}},
			Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte("{}")}},
	}
	for _, s := range secrets {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	selfServed := fixture.Certificate(ns, "self-served", issuerName, fixture.WithAnnotation(hubapi.AdoptSecretAnnotation, "true"),
		func(crt *cmapi.Certificate) { crt.Spec.SecretName = "theirs-tls" })
	typed := fixture.Certificate(ns, "registry", issuerName, func(crt *cmapi.Certificate) { crt.Spec.SecretName = "registry" })
	stamped := fixture.Certificate(ns, "stamped", issuerName, fixture.WithSpec(func(s *cmapi.CertificateSpec) {
		s.SecretTemplate = &cmapi.CertificateSecretTemplate{Labels: map[string]string{inventory.SecretTypeLabel: inventory.SecretTypeCluster}}
	}))
	for _, crt := range []*cmapi.Certificate{selfServed, typed, stamped} {
		if err := c.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	neighbourIssues(t, c, "grab-neighbour", "web", "three Certificates reaching for Secrets they may not have")

	for _, tc := range []struct {
		crt            *cmapi.Certificate
		reason, saying string
	}{
		{selfServed, reasons.SecretNotOwned, "annotate the Secret (whoever may write it)"},
		{typed, reasons.SecretNotOwned, "never takes over typed Secrets"},
		{stamped, reasons.InvalidSecretName, "argocd.argoproj.io/* keys belong to Argo CD"},
	} {
		got := fixture.WaitFor(t, c, client.ObjectKeyFromObject(tc.crt), "Ready=False/"+tc.reason, fixture.NotReadyWith(tc.reason))
		if msg := fixture.Condition(got, cmapi.CertificateConditionReady).Message; !strings.Contains(msg, tc.saying) {
			t.Errorf("%s: message %q does not say %q", tc.crt.Name, msg, tc.saying)
		}
	}
	for _, s := range secrets {
		got := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
			t.Fatal(err)
		}
		if got.Labels[hubapi.ManagedByLabel] == hubapi.ManagedByValue || got.ResourceVersion != s.ResourceVersion {
			t.Errorf("Secret %s was written", s.Name)
		}
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: stamped.Spec.SecretName}, &corev1.Secret{}); err == nil {
		t.Errorf("a Secret was written for the Certificate stamping reserved keys")
	}
}

// Item 3: a registration naming an exec plugin that is not on the hub's
// allow-list is refused before anything runs, naming the field; a
// neighbour issues meanwhile. (A hung allow-listed plugin: test/integration/
// inventory TestAuthForms.)
func TestExecPluginOffTheAllowListNeverRuns(t *testing.T) {
	ctx := context.Background()
	cc := inventory.ClusterConfig{ExecProviderConfig: &inventory.ExecProviderConfig{Command: "/bin/sh", Args: []string{"-c", "touch /tmp/certhub-exec-ran"},
		APIVersion: "client.authentication.k8s.io/v1"}, TLSClientConfig: inventory.TLSClientConfig{Insecure: true}}
	s, err := inventory.NewSecret(bed.ArgoNamespace(), "adv-exec", "adv-exec", bed.Downstreams[0].Server(), cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.Hub.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), s) })
	neighbourIssues(t, bed.Downstreams[0].Client, "exec-neighbour", "web", "a registration naming /bin/sh as its credential plugin")
	e := fixture.WaitEvent(t, bed.Hub.Client, bed.ArgoNamespace(), "adv-exec", inventory.ReasonInvalidClusterSecret,
		`field config.execProviderConfig.command: runs "/bin/sh", which is not on the hub's exec plugin allow-list`)
	t.Logf("adv-exec: %s", e.Note)
}
