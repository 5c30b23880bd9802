package dns01

import (
	"context"
	"errors"
	"strings"
	"testing"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// leaky is a provider whose errors quote what it was given.
type leaky struct{ secret string }

func (l leaky) Present(context.Context, string, string, string, string) error {
	return errors.New("refused token " + l.secret + " for the zone")
}

func (l leaky) CleanUp(context.Context, string, string, string, string) error { return nil }

// Configuration problems are a *ConfigError naming the field; a provider
// error quoting a credential it was given reaches callers redacted; a
// webhook without groupName or solverName, or without an API server to
// call it through, is refused.
func TestConfigErrorsAndRedaction(t *testing.T) {
	hub := fake.NewClientBuilder().WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "certhub", Name: "do"},
		Data: map[string][]byte{"token": []byte("do-token-1")}}).Build()
	env := Env{Hub: hub, Namespace: "certhub"}
	ctx := context.Background()
	ref := func(name, key string) cmmeta.SecretKeySelector {
		return cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: name}, Key: key}
	}
	for name, tc := range map[string]struct {
		d    *cmacme.ACMEChallengeSolverDNS01
		want string
	}{
		"missing Secret":  {&cmacme.ACMEChallengeSolverDNS01{DigitalOcean: &cmacme.ACMEIssuerDNS01ProviderDigitalOcean{Token: ref("gone", "token")}}, "digitalocean tokenSecretRef: secret certhub/gone not found"},
		"missing key":     {&cmacme.ACMEChallengeSolverDNS01{DigitalOcean: &cmacme.ACMEIssuerDNS01ProviderDigitalOcean{Token: ref("do", "other")}}, `has no key "other"`},
		"two cloudflare":  {&cmacme.ACMEChallengeSolverDNS01{Cloudflare: &cmacme.ACMEIssuerDNS01ProviderCloudflare{APIKey: new(ref("do", "token")), APIToken: new(ref("do", "token"))}}, "cannot both be specified"},
		"webhook unnamed": {&cmacme.ACMEChallengeSolverDNS01{Webhook: &cmacme.ACMEIssuerDNS01ProviderWebhook{GroupName: "acme.example.com"}}, "groupName and solverName"},
		"no API server":   {&cmacme.ACMEChallengeSolverDNS01{Webhook: &cmacme.ACMEIssuerDNS01ProviderWebhook{GroupName: "acme.example.com", SolverName: "x"}}, "not available"},
		"no dns01":        {nil, "no dns01 configuration"},
	} {
		_, err := New(ctx, env, tc.d)
		ce := (*ConfigError)(nil)
		if !errors.As(err, &ce) || !strings.Contains(ce.Message, tc.want) {
			t.Errorf("%s: %v, want a ConfigError with %q", name, err, tc.want)
		}
	}

	p := redacting{leaky{"do-token-1"}, []string{"do-token-1"}}
	err := p.Present(ctx, "web.example.test", "_acme-challenge.web.example.test.", "example.test.", "v")
	if err == nil || strings.Contains(err.Error(), "do-token-1") || !strings.Contains(err.Error(), "refused token [redacted] for the zone") {
		t.Errorf("provider error %v, want the token redacted and the rest kept", err)
	}
}
