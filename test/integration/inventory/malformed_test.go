package inventory

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
)

// Every malformed or unusable registration gets a Warning Event on its Secret
// naming the field or the failure, while a healthy cluster keeps issuing.
func TestMalformedRegistrations(t *testing.T) {
	ctx := context.Background()
	healthy := env.Bed.Downstreams[0]
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return "https://" + l.Addr().String()
	}()
	ca := b64(healthy.Config.CAData)
	good := `{"bearerToken":"x","tlsClientConfig":{"caData":"` + ca + `"}}`
	cases := []struct {
		name, server, config, reason, fragment string
	}{
		{"bad-json", "https://a.example.com", `{"bearerToken": `, inventory.ReasonInvalidClusterSecret, "field config: is not valid JSON"},
		{"no-server", "", good, inventory.ReasonInvalidClusterSecret, "field server: is required"},
		{"server-not-url", "a.example.com:6443", good, inventory.ReasonInvalidClusterSecret, "field server: must be an http(s) URL"},
		{"ca-not-pem", "https://a.example.com", `{"tlsClientConfig":{"caData":"` + b64([]byte("nope")) + `"}}`, inventory.ReasonInvalidClusterSecret, "field config.tlsClientConfig.caData"},
		{"ca-not-base64", "https://a.example.com", `{"tlsClientConfig":{"caData":"!!!"}}`, inventory.ReasonInvalidClusterSecret, "field config: is not valid JSON"},
		{"cert-without-key", "https://a.example.com", `{"tlsClientConfig":{"certData":"` + ca + `"}}`, inventory.ReasonInvalidClusterSecret, "certData and keyData must be set together"},
		{"cert-not-pem", "https://a.example.com", `{"tlsClientConfig":{"certData":"` + b64([]byte("x")) + `","keyData":"` + b64([]byte("y")) + `"}}`, inventory.ReasonInvalidClusterSecret, "field config.tlsClientConfig.certData"},
		{"exec-no-command", "https://a.example.com", `{"execProviderConfig":{"apiVersion":"client.authentication.k8s.io/v1"}}`, inventory.ReasonInvalidClusterSecret, "field config.execProviderConfig.command: is required"},
		{"proxy-scheme", "https://a.example.com", `{"bearerToken":"x","proxyUrl":"ftp://p:21"}`, inventory.ReasonInvalidClusterSecret, "field config.proxyUrl"},
		{"in-cluster-bad-token", inventory.InClusterServer, `{"bearerToken":"x"}`, inventory.ReasonClusterUnreachable, "Unauthorized"},
		{"unreachable", closed, `{"bearerToken":"x","tlsClientConfig":{"insecure":true}}`, inventory.ReasonClusterUnreachable, "connection refused"},
		{"bad-token", healthy.Server(), `{"bearerToken":"not-a-token","tlsClientConfig":{"caData":"` + ca + `"}}`, inventory.ReasonClusterUnreachable, "Unauthorized"},
		{"duplicate-name", healthy.Server(), good, inventory.ReasonDuplicateClusterName, "is already registered by Secret"},
	}
	setOptIn(t, healthy.Name, true)
	for _, c := range cases {
		data := map[string][]byte{"name": []byte(c.name), "config": []byte(c.config)}
		if c.server != "" {
			data["server"] = []byte(c.server)
		}
		if c.name == "duplicate-name" {
			data["name"] = []byte(healthy.Name)
		}
		if c.config == "" {
			delete(data, "config")
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: env.Bed.ArgoNamespace(), Name: "bad-" + c.name,
				Labels: map[string]string{inventory.SecretTypeLabel: inventory.SecretTypeCluster, optIn: "true"}},
			Data: data,
		}
		if err := env.Bed.Hub.Client.Create(ctx, s); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		t.Cleanup(func() { _ = env.Bed.Hub.Client.Delete(context.Background(), s) })
	}
	// The healthy cluster is unaffected and keeps issuing.
	fixture.EnsureNamespace(t, healthy.Client, "malformed")
	crt := fixture.Certificate("malformed", fmt.Sprintf("still-%d", len(cases)), issuerName)
	if err := healthy.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, healthy.Client, client.ObjectKeyFromObject(crt))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { waitSecretEvent(t, "bad-"+c.name, c.reason, c.fragment) })
	}

	// Fixing a broken Secret in place heals it, without a restart.
	t.Run("fixed later", func(t *testing.T) {
		target := env.Bed.Downstreams[1]
		token, err := env.Bed.ServiceAccountToken(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{}
		if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: env.Bed.ArgoNamespace(), Name: "bad-bad-json"}, s); err != nil {
			t.Fatal(err)
		}
		s.Data["name"], s.Data["server"] = []byte("healed"), []byte(target.Server())
		s.Data["config"] = []byte(`{"bearerToken":"` + token + `","tlsClientConfig":{"caData":"` + b64(target.Config.CAData) + `"}}`)
		if err := env.Bed.Hub.Client.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		fixture.EnsureNamespace(t, target.Client, "healed")
		crt := fixture.Certificate("healed", "web", issuerName)
		if err := target.Client.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
		fixture.WaitReady(t, target.Client, client.ObjectKeyFromObject(crt))
		waitSecretEvent(t, "bad-bad-json", inventory.ReasonClusterConnected, "healed")
	})
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
