package inventory

import (
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

var testCA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not-parsed-here")})

func clusterSecret(data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "argocd", Labels: map[string]string{SecretTypeLabel: SecretTypeCluster}},
		Data:       map[string][]byte{},
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestParseSecret(t *testing.T) {
	good := `{"bearerToken":"tok","tlsClientConfig":{"caData":"` + b64(testCA) + `"}}`
	tests := []struct {
		name      string
		secret    *corev1.Secret
		wantField string // "" means success
		wantName  string
		wantHost  string
		// wantWarning is in the Cluster's warnings ("" means none).
		wantWarning string
	}{
		{name: "bearer token and CA", secret: clusterSecret(map[string]string{"name": "east", "server": "https://east.example.com:6443/", "config": good}),
			wantName: "east", wantHost: "https://east.example.com:6443"},
		{name: "name falls back to server", secret: clusterSecret(map[string]string{"server": "https://x.example.com", "config": good}),
			wantName: "https://x.example.com", wantHost: "https://x.example.com"},
		{name: "basic auth", secret: clusterSecret(map[string]string{"name": "b", "server": "https://b", "config": `{"username":"u","password":"p","tlsClientConfig":{"insecure":true}}`}),
			wantName: "b", wantHost: "https://b"},
		{name: "missing label", secret: func() *corev1.Secret {
			s := clusterSecret(map[string]string{"name": "a", "server": "https://a", "config": good})
			s.Labels = nil
			return s
		}(), wantField: "metadata.labels[" + SecretTypeLabel + "]"},
		// Argo CD accepts any name (its own examples use
		// "mycluster.example.com"): served, with a warning that no
		// {{cluster}} pattern matches it.
		{name: "a dotted name, as in Argo CD's examples", secret: clusterSecret(map[string]string{"name": "mycluster.example.com", "server": "https://a", "config": good}),
			wantName: "mycluster.example.com", wantHost: "https://a", wantWarning: `name "mycluster.example.com" is not a DNS label`},
		{name: "an upper-case name", secret: clusterSecret(map[string]string{"name": "Prod-EU", "server": "https://a", "config": good}),
			wantName: "Prod-EU", wantHost: "https://a", wantWarning: "no IssuancePolicy pattern with {{cluster}} matches it"},
		{name: "a name with a control character", secret: clusterSecret(map[string]string{"name": "\x00wake", "server": "https://a", "config": good}), wantField: "name"},
		{name: "a wildcard name", secret: clusterSecret(map[string]string{"name": "*", "server": "https://a", "config": good}),
			wantName: "*", wantHost: "https://a", wantWarning: `name "*" is not a DNS label`},
		{name: "context-style names are fine", secret: clusterSecret(map[string]string{"name": "arn:aws:eks:eu-west-1:1:cluster/prod_1", "server": "https://a", "config": good}),
			wantName: "arn:aws:eks:eu-west-1:1:cluster/prod_1", wantHost: "https://a", wantWarning: "no IssuancePolicy pattern with {{cluster}} matches it"},
		{name: "missing server", secret: clusterSecret(map[string]string{"name": "a", "config": good}), wantField: "server"},
		{name: "server not a URL", secret: clusterSecret(map[string]string{"name": "a", "server": "east:6443", "config": good}), wantField: "server"},
		{name: "no config: anonymous, as in Argo CD", secret: clusterSecret(map[string]string{"name": "a", "server": "https://a"}), wantName: "a", wantHost: "https://a"},
		{name: "malformed config", secret: clusterSecret(map[string]string{"name": "a", "server": "https://a", "config": `{"bearerToken":`}), wantField: "config"},
		{name: "anonymous is allowed, as in Argo CD", secret: clusterSecret(map[string]string{"name": "a", "server": "https://a", "config": `{"tlsClientConfig":{}}`}),
			wantName: "a", wantHost: "https://a"},
		{name: "exec without command", secret: clusterSecret(map[string]string{"name": "a", "server": "https://a", "config": `{"execProviderConfig":{"apiVersion":"client.authentication.k8s.io/v1"}}`}),
			wantField: "config.execProviderConfig.command"},
		{name: "proxy with ftp scheme", secret: clusterSecret(map[string]string{"name": "a", "server": "https://a", "config": `{"bearerToken":"t","proxyUrl":"ftp://proxy:21"}`}),
			wantField: "config.proxyUrl"},
		{name: "in-cluster outside a cluster", secret: clusterSecret(map[string]string{"name": "in-cluster", "server": InClusterServer, "config": `{"tlsClientConfig":{"insecure":false}}`}),
			wantField: "server"},
		{name: "CA not PEM", secret: clusterSecret(map[string]string{"name": "a", "server": "https://a", "config": `{"bearerToken":"t","tlsClientConfig":{"caData":"` + b64([]byte("garbage")) + `"}}`}),
			wantField: "config.tlsClientConfig.caData"},
		{name: "cert without key", secret: clusterSecret(map[string]string{"name": "a", "server": "https://a", "config": `{"tlsClientConfig":{"certData":"` + b64(testCA) + `"}}`}),
			wantField: "config.tlsClientConfig.certData"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseSecret(tt.secret)
			if tt.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("err = %v, want a *FieldError for %s", err, tt.wantField)
				}
				if fe.Field != tt.wantField {
					t.Fatalf("FieldError.Field = %q, want %q (%v)", fe.Field, tt.wantField, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if c.Name != tt.wantName || c.Config.Host != tt.wantHost || c.Server != tt.wantHost {
				t.Fatalf("got name %q host %q server %q, want %q %q", c.Name, c.Config.Host, c.Server, tt.wantName, tt.wantHost)
			}
			if w := strings.Join(c.Warnings, "; "); tt.wantWarning != "" && !strings.Contains(w, tt.wantWarning) || tt.wantWarning == "" && strings.Contains(w, "DNS label") {
				t.Errorf("warnings %q, want %q", w, tt.wantWarning)
			}
		})
	}
}

func TestNewSecretRoundTripsAndHashTracksConnectionData(t *testing.T) {
	cc := ClusterConfig{BearerToken: "t1", TLSClientConfig: TLSClientConfig{CAData: testCA}}
	s, err := NewSecret("argocd", "east", "east", "https://east:6443/", cc)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret(NewSecret(...)): %v", err)
	}
	if a.Name != "east" || a.Config.BearerToken != "t1" || string(a.Config.CAData) != string(testCA) || a.Server != "https://east:6443" {
		t.Fatalf("round trip lost data: %+v", a)
	}
	again, _ := ParseSecret(s.DeepCopy())
	if again.Hash != a.Hash {
		t.Errorf("hash not stable for identical Secrets")
	}
	cc.BearerToken = "t2" // token rotation
	rotated, _ := NewSecret("argocd", "east", "east", "https://east:6443", cc)
	b, err := ParseSecret(rotated)
	if err != nil {
		t.Fatal(err)
	}
	if b.Hash == a.Hash {
		t.Errorf("hash unchanged after token rotation")
	}
	s.Labels["team"] = "x" // metadata only: must not force a re-engage
	c, _ := ParseSecret(s)
	if c.Hash != a.Hash {
		t.Errorf("hash changed on a label-only change")
	}
}

// The auth forms map to rest.Config the way Argo CD's RawRestConfig maps them.
func TestAuthFormsMapLikeArgoCD(t *testing.T) {
	exec := `{"bearerToken":"ignored","execProviderConfig":{"command":"get-token","args":["--x"],"env":{"B":"2","A":"1"},` +
		`"apiVersion":"client.authentication.k8s.io/v1","installHint":"install it","provideClusterInfo":true,"config":{"k":"v"}}}`
	c, err := ParseSecret(clusterSecret(map[string]string{"name": "e", "server": "https://e", "config": exec}))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Config.ExecProvider
	if e == nil || e.Command != "get-token" || e.Args[0] != "--x" || e.APIVersion != "client.authentication.k8s.io/v1" ||
		e.InstallHint != "install it" || !e.ProvideClusterInfo || e.InteractiveMode != "Never" || c.Config.BearerToken != "" {
		t.Fatalf("exec config %+v, token %q", e, c.Config.BearerToken)
	}
	if len(e.Env) != 2 || e.Env[0].Name != "A" || e.Env[1].Value != "2" || !isRaw(e.Config, `{"k":"v"}`) {
		t.Fatalf("exec env %+v config %v", e.Env, e.Config)
	}
	aws := `{"awsAuthConfig":{"clusterName":"prod","roleARN":"arn:aws:iam::1:role/r","profile":"p"},"tlsClientConfig":{"caData":"` + b64(testCA) + `"}}`
	c, err = ParseSecret(clusterSecret(map[string]string{"name": "eks", "server": "https://eks", "config": aws}))
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Config.ExecProvider; e == nil || e.Command != "argocd-k8s-auth" || strings.Join(e.Args, " ") != "aws --cluster-name prod --role-arn arn:aws:iam::1:role/r --profile p" ||
		e.APIVersion != "client.authentication.k8s.io/v1beta1" || string(c.Config.CAData) != string(testCA) {
		t.Fatalf("aws exec config %+v", e)
	}
	proxied := `{"bearerToken":"t","proxyUrl":"socks5://proxy:1080","disableCompression":true,"tlsClientConfig":{"insecure":true,"serverName":"api.internal"}}`
	c, err = ParseSecret(clusterSecret(map[string]string{"name": "p", "server": "https://p", "config": proxied}))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := c.Config.Proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: "p"}})
	if u == nil || u.String() != "socks5://proxy:1080" || !c.Config.DisableCompression || !c.Config.Insecure || c.Config.ServerName != "api.internal" {
		t.Fatalf("proxy %v compression off %v insecure %v serverName %q", u, c.Config.DisableCompression, c.Config.Insecure, c.Config.ServerName)
	}
}

func TestScopeFields(t *testing.T) {
	s := clusterSecret(map[string]string{"name": "n", "server": "https://n", "config": `{"bearerToken":"t"}`,
		"namespaces": " team-a, team-b ,", "clusterResources": "true", "project": "platform", "shard": "2"})
	c, err := ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Namespaces, "|") != "team-a|team-b" || !c.ClusterResources || c.Project != "platform" || c.Shard == nil || *c.Shard != 2 {
		t.Fatalf("scope fields: %+v", c)
	}
	s.Data["shard"] = []byte("two") // Argo CD logs and ignores a bad shard
	if c2, err := ParseSecret(s); err != nil || c2.Shard != nil {
		t.Fatalf("bad shard: %v %v", c2.Shard, err)
	}
	s.Data["namespaces"] = []byte("team-a")
	if c3, _ := ParseSecret(s); c3.Hash == c.Hash {
		t.Errorf("a namespace change must re-engage (hash unchanged)")
	}
}

func FuzzParseSecret(f *testing.F) {
	f.Add("east", "https://east:6443", `{"bearerToken":"t","tlsClientConfig":{"caData":"`+b64(testCA)+`"}}`)
	f.Add("", "http://x", `{"username":"u"}`)
	f.Add("a", "https://a", `{"tlsClientConfig":{"certData":"AA==","keyData":"AA=="}}`)
	f.Fuzz(func(t *testing.T, name, server, config string) {
		s := clusterSecret(map[string]string{"name": name, "server": server, "config": config})
		c, err := ParseSecret(s)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a *FieldError: %v", err)
			}
			return
		}
		if c.Name == "" || c.Config == nil || c.Config.Host == "" || c.Hash == "" {
			t.Fatalf("success with incomplete result: %+v", c)
		}
	})
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// isRaw reports whether an exec plugin config is the JSON want.
func isRaw(cfg runtime.Object, want string) bool {
	u, ok := cfg.(*runtime.Unknown)
	return ok && string(u.Raw) == want
}

// config is optional, as in Argo CD's SecretToCluster: the in-cluster
// server needs none; a remote one without it is reached anonymously, with a
// warning saying so.
func TestConfigIsOptional(t *testing.T) {
	c, err := ValidateSecret(clusterSecret(map[string]string{"name": "in-cluster", "server": InClusterServer}))
	if err != nil || !c.InCluster || len(c.Warnings) != 0 {
		t.Fatalf("config-less in-cluster: %+v, %v; want valid, no warning", c, err)
	}
	c, err = ValidateSecret(clusterSecret(map[string]string{"name": "remote", "server": "https://r.example.com"}))
	if err != nil || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "anonymously") || c.Config.BearerToken != "" || c.Config.ExecProvider != nil {
		t.Fatalf("config-less remote: %+v, %v; want valid, anonymous, one warning", c, err)
	}
	hub := &rest.Config{Host: "https://hub.example.com:6443", BearerToken: "hub"}
	c, err = parseSecret(clusterSecret(map[string]string{"name": "in-cluster", "server": InClusterServer}), func() (*rest.Config, error) { return hub, nil })
	if err != nil || c.Config.Host != hub.Host || c.Config.BearerToken != "hub" {
		t.Fatalf("in-cluster resolved: %+v, %v; want the hub's own connection", c, err)
	}
	if c.Config == hub {
		t.Errorf("the hub's config was shared, not copied")
	}
}

// SecretName gives every cluster name a valid Secret name, and two names
// that differ only in case two Secrets.
func TestSecretName(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"east", "mycluster.example.com", "Prod-EU", "prod-eu", "*", "arn:aws:eks:eu-west-1:1:cluster/prod_1", strings.Repeat("x", 300)} {
		s := SecretName(name)
		if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
			t.Errorf("SecretName(%q) = %q: %v", name, s, msgs)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("SecretName(%q) = SecretName(%q) = %q", name, other, s)
		}
		seen[s] = name
	}
	if s := SecretName("east"); s != "cluster-east" {
		t.Errorf("SecretName(east) = %q, want cluster-east", s)
	}
}
