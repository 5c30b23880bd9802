// Package argocd proves that certhub reads Argo CD cluster Secrets exactly as
// Argo CD does: each Secret is converted by Argo CD's own code
// (util/db.SecretToCluster, (*Cluster).RawRestConfig, from argo-cd/v3) and by
// certhub (`certhub cluster validate --show-connection`), and the connections
// must be equal field by field. It is its own Go module because argo-cd/v3
// pins older Kubernetes libraries than certhub.
package argocd

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-cd/v3/common"
	"github.com/argoproj/argo-cd/v3/util/db"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// connection mirrors certhub's regcheck.Connection JSON (internal/regcheck
// checks the mirror's fields against its own); certhub's output is
// decoded with unknown fields refused, so a field certhub adds fails here
// until the mirror (and the comparison) has it.
type connection struct {
	File               string            `json:"file"` // certhub's only: not compared
	Labels             map[string]string `json:"labels,omitempty"`
	Secret             string            `json:"secret"`
	Name               string            `json:"name"`
	Host               string            `json:"host"`
	Username           string            `json:"username,omitempty"`
	Password           string            `json:"password,omitempty"`
	BearerToken        string            `json:"bearerToken,omitempty"`
	Insecure           bool              `json:"insecure,omitempty"`
	ServerName         string            `json:"serverName,omitempty"`
	CAData             []byte            `json:"caData,omitempty"`
	CertData           []byte            `json:"certData,omitempty"`
	KeyData            []byte            `json:"keyData,omitempty"`
	Exec               *execCfg          `json:"exec,omitempty"`
	ProxyURL           string            `json:"proxyURL,omitempty"`
	DisableCompression bool              `json:"disableCompression,omitempty"`
	Namespaces         []string          `json:"namespaces,omitempty"`
}

type execCfg struct {
	Command            string   `json:"command"`
	Args               []string `json:"args,omitempty"`
	Env                []string `json:"env,omitempty"`
	APIVersion         string   `json:"apiVersion,omitempty"`
	InstallHint        string   `json:"installHint,omitempty"`
	ProvideClusterInfo bool     `json:"provideClusterInfo,omitempty"`
	InteractiveMode    string   `json:"interactiveMode,omitempty"`
	Config             string   `json:"config,omitempty"`
}

// pemCA and pemKey are a real self-signed certificate and its key (certhub
// checks that PEM fields decode; Argo CD does not look).
var pemCA, pemKey = func() (string, string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		panic(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}()

// cases are the registrations compared: every auth form and option Argo CD
// accepts, in the combinations users write.
func cases() map[string]map[string]string {
	b64 := func(s string) string { return base64(s) }
	return map[string]map[string]string{
		"bearer":             {"name": "bearer", "server": "https://a.example.com:6443", "config": `{"bearerToken":"tok","tlsClientConfig":{"caData":"` + b64(pemCA) + `"}}`},
		"bearer-trailing":    {"name": "trailing", "server": "https://a.example.com/", "config": `{"bearerToken":"tok"}`},
		"no-name":            {"server": "https://noname.example.com", "config": `{"bearerToken":"tok"}`},
		"basic":              {"name": "basic", "server": "https://b.example.com", "config": `{"username":"u","password":"p","tlsClientConfig":{"insecure":true}}`},
		"client-cert":        {"name": "cert", "server": "https://c.example.com", "config": `{"tlsClientConfig":{"caData":"` + b64(pemCA) + `","certData":"` + b64(pemCA) + `","keyData":"` + b64(pemKey) + `"}}`},
		"server-name":        {"name": "sn", "server": "https://10.0.0.1:6443", "config": `{"bearerToken":"t","tlsClientConfig":{"caData":"` + b64(pemCA) + `","serverName":"api.internal"}}`},
		"insecure":           {"name": "insecure", "server": "https://i.example.com", "config": `{"bearerToken":"t","tlsClientConfig":{"insecure":true}}`},
		"anonymous":          {"name": "anon", "server": "https://anon.example.com", "config": `{"tlsClientConfig":{}}`},
		"exec":               {"name": "exec", "server": "https://e.example.com", "config": `{"execProviderConfig":{"command":"kubelogin","args":["get-token","--login","azurecli"],"env":{"B":"2","A":"1"},"apiVersion":"client.authentication.k8s.io/v1beta1","installHint":"install kubelogin"}}`},
		"exec-cluster-info":  {"name": "exec2", "server": "https://e2.example.com", "config": `{"execProviderConfig":{"command":"/bin/get","apiVersion":"client.authentication.k8s.io/v1","provideClusterInfo":true,"config":{"audience":"x"}}}`},
		"exec-ignores-token": {"name": "exec3", "server": "https://e3.example.com", "config": `{"bearerToken":"ignored","username":"ignored","execProviderConfig":{"command":"gke-gcloud-auth-plugin","apiVersion":"client.authentication.k8s.io/v1beta1"}}`},
		"aws":                {"name": "eks", "server": "https://eks.example.com", "config": `{"awsAuthConfig":{"clusterName":"prod"},"tlsClientConfig":{"caData":"` + b64(pemCA) + `"}}`},
		"aws-role":           {"name": "eks-role", "server": "https://eks2.example.com", "config": `{"awsAuthConfig":{"clusterName":"prod","roleARN":"arn:aws:iam::1:role/r"}}`},
		"aws-role-profile":   {"name": "eks-profile", "server": "https://eks3.example.com", "config": `{"awsAuthConfig":{"clusterName":"prod","roleARN":"arn:aws:iam::1:role/r","profile":"ops"}}`},
		"aws-over-exec":      {"name": "eks-exec", "server": "https://eks4.example.com", "config": `{"awsAuthConfig":{"clusterName":"c"},"execProviderConfig":{"command":"other"}}`},
		"proxy-http":         {"name": "ph", "server": "https://p.example.com", "config": `{"bearerToken":"t","proxyUrl":"http://proxy:3128"}`},
		"proxy-https":        {"name": "phs", "server": "https://p2.example.com", "config": `{"bearerToken":"t","proxyUrl":"https://proxy:3129"}`},
		"proxy-socks5":       {"name": "ps", "server": "https://p3.example.com", "config": `{"bearerToken":"t","proxyUrl":"socks5://proxy:1080"}`},
		"no-compression":     {"name": "nc", "server": "https://nc.example.com", "config": `{"bearerToken":"t","disableCompression":true}`},
		"namespaces":         {"name": "ns", "server": "https://ns.example.com", "config": `{"bearerToken":"t"}`, "namespaces": "team-a,team-b"},
		"namespaces-spaces":  {"name": "ns2", "server": "https://ns2.example.com", "config": `{"bearerToken":"t"}`, "namespaces": " team-a , team-b", "clusterResources": "true"},
		"project-shard":      {"name": "proj", "server": "https://proj.example.com", "config": `{"bearerToken":"t"}`, "project": "platform", "shard": "3"},
		"http-server":        {"name": "plain", "server": "http://plain.example.com:8080", "config": `{"bearerToken":"t"}`},
		"config-less":        {"name": "bare", "server": "https://bare.example.com"},
		"everything-tls":     {"name": "all", "server": "https://all.example.com", "config": `{"bearerToken":"t","tlsClientConfig":{"insecure":false,"serverName":"all","caData":"` + b64(pemCA) + `","certData":"` + b64(pemCA) + `","keyData":"` + b64(pemKey) + `"},"proxyUrl":"http://p:1","disableCompression":true}`},
	}
}

func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd", Labels: map[string]string{"argocd.argoproj.io/secret-type": "cluster"}},
		Data:       map[string][]byte{},
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// argoConnection converts s with Argo CD's own code.
func argoConnection(t *testing.T, s *corev1.Secret) connection {
	t.Helper()
	c, err := db.SecretToCluster(s)
	if err != nil {
		t.Fatalf("Argo CD rejects %s: %v", s.Name, err)
	}
	cfg, err := c.RawRestConfig()
	if err != nil {
		t.Fatalf("Argo CD RawRestConfig %s: %v", s.Name, err)
	}
	conn := connection{Secret: s.Namespace + "/" + s.Name, Labels: c.Labels, Name: c.Name, Host: cfg.Host, Username: cfg.Username, Password: cfg.Password,
		BearerToken: cfg.BearerToken, Insecure: cfg.Insecure, ServerName: cfg.ServerName, CAData: cfg.CAData, CertData: cfg.CertData,
		KeyData: cfg.KeyData, DisableCompression: cfg.DisableCompression, Namespaces: c.Namespaces}
	if cfg.Proxy != nil {
		u, _ := url.Parse(cfg.Host)
		if p, err := cfg.Proxy(&http.Request{URL: u}); err == nil && p != nil {
			conn.ProxyURL = p.String()
		}
	}
	if e := cfg.ExecProvider; e != nil {
		ec := &execCfg{Command: e.Command, Args: e.Args, APIVersion: e.APIVersion, InstallHint: e.InstallHint,
			ProvideClusterInfo: e.ProvideClusterInfo, InteractiveMode: string(e.InteractiveMode)}
		for _, v := range e.Env {
			ec.Env = append(ec.Env, v.Name+"="+v.Value)
		}
		sort.Strings(ec.Env)
		if u, ok := e.Config.(*runtime.Unknown); ok && u != nil {
			ec.Config = strings.TrimSpace(string(u.Raw))
		}
		conn.Exec = ec
	}
	return conn
}

// diff lists the fields on which two connections differ.
func diff(a, b connection) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		if va.Type().Field(i).Name == "File" || (va.Type().Field(i).Name == "Labels" && va.Field(i).Len() == 0 && vb.Field(i).Len() == 0) {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, fmt.Sprintf("%s: Argo CD %v, certhub %v", va.Type().Field(i).Name, printable(va.Field(i).Interface()), printable(vb.Field(i).Interface())))
		}
	}
	return out
}

func printable(v any) any {
	if e, ok := v.(*execCfg); ok && e != nil {
		return *e
	}
	return v
}

// binDir holds the certhub binary, built once for the package's tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "certhub-argocd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// built is the one build of the certhub binary of this checkout.
var built = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "certhub")
	build := exec.Command("go", "build", "-o", bin, "./cmd/certhub")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return bin, nil
})

// buildCerthub returns the certhub binary, built on first use.
func buildCerthub(t *testing.T) string {
	t.Helper()
	bin, err := built()
	if err != nil {
		t.Fatalf("building certhub: %v", err)
	}
	return bin
}

func certhubConnections(t *testing.T, file string) map[string]connection {
	t.Helper()
	out, err := exec.Command(buildCerthub(t), "cluster", "validate", "--show-connection", file).Output()
	if err != nil {
		t.Fatalf("certhub cluster validate: %v\n%s", err, out)
	}
	var conns []connection
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&conns); err != nil {
		t.Fatalf("certhub output (a field the mirror lacks?): %v\n%s", err, out)
	}
	m := map[string]connection{}
	for _, c := range conns {
		if c.Exec != nil {
			sort.Strings(c.Exec.Env)
		}
		m[c.Secret] = c
	}
	return m
}

func TestCerthubReadsSecretsLikeArgoCD(t *testing.T) {
	cs := cases()
	if len(cs) < 20 {
		t.Fatalf("only %d cases", len(cs))
	}
	var buf bytes.Buffer
	names := make([]string, 0, len(cs))
	for n := range cs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		raw, err := yaml.Marshal(secret(n, cs[n]))
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(raw)
	}
	file := filepath.Join(t.TempDir(), "registrations.yaml")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	got := certhubConnections(t, file)
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			want := argoConnection(t, secret(n, cs[n]))
			if want.Name == "" {
				// The one deliberate difference: Argo CD's SecretToCluster leaves
				// the name empty without a `name` key (its CLI and UI fall back
				// to the server); certhub needs a name, and takes the server too.
				want.Name = want.Host
			}
			c, ok := got["argocd/"+n]
			if !ok {
				t.Fatalf("certhub produced no connection for %s", n)
			}
			if d := diff(want, c); len(d) > 0 {
				t.Errorf("certhub reads %s differently from Argo CD:\n  %s", n, strings.Join(d, "\n  "))
			}
		})
	}
	// The comparison itself must be able to fail: a connection with one field
	// mapped differently (user and password swapped) is caught.
	want := argoConnection(t, secret("basic", cs["basic"]))
	swapped := got["argocd/basic"]
	swapped.Username, swapped.Password = swapped.Password, swapped.Username
	if d := diff(want, swapped); len(d) != 2 {
		t.Errorf("a swapped username/password was not caught: %v", d)
	}
}

// registrationsFile is the table `certhub cluster validate` is unit-tested
// with (every form of Argo CD's declarative setup); here Argo CD converts the
// same documents and certhub must agree wherever Argo CD accepts them.
const registrationsFile = "../../internal/regcheck/testdata/registrations/valid.yaml"

// readRegistrations decodes the Secrets of file as the API server stores
// them (stringData folded over data), keyed by namespace/name as certhub
// reports them.
func readRegistrations(t *testing.T, file string) map[string]*corev1.Secret {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Secret{}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		s := &corev1.Secret{}
		if err := yaml.UnmarshalStrict([]byte(doc), s); err != nil {
			t.Fatalf("decode %q: %v", doc[:min(len(doc), 80)], err)
		}
		if s.Kind != "Secret" {
			continue
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
		out[s.Namespace+"/"+s.Name] = s
	}
	return out
}

func TestValidateTableAgreesWithArgoCD(t *testing.T) {
	secrets := readRegistrations(t, registrationsFile)
	if len(secrets) < 30 {
		t.Fatalf("only %d registrations in %s", len(secrets), registrationsFile)
	}
	got := certhubConnections(t, registrationsFile)
	for key, s := range secrets {
		t.Run(key, func(t *testing.T) {
			c, ok := got[key]
			if !ok {
				t.Fatalf("certhub produced no connection for %s", key)
			}
			cluster, err := db.SecretToCluster(s)
			if err != nil {
				t.Fatalf("Argo CD rejects %s: %v", key, err)
			}
			if strings.TrimRight(cluster.Server, "/") == "https://kubernetes.default.svc" {
				// Argo CD resolves the in-cluster server with rest.InClusterConfig,
				// which fails outside a cluster; certhub validates it offline and
				// resolves it at run time. Compare what both read from the Secret.
				if c.Host != "https://kubernetes.default.svc" || (cluster.Name != "" && c.Name != cluster.Name) || c.BearerToken != cluster.Config.BearerToken {
					t.Errorf("in-cluster %s: certhub %s %q token %q, Argo CD %s %q token %q", key, c.Host, c.Name, c.BearerToken,
						cluster.Server, cluster.Name, cluster.Config.BearerToken)
				}
				return
			}
			want := argoConnection(t, s)
			if want.Name == "" {
				want.Name = want.Host // certhub names an unnamed registration after its server, as Argo CD's CLI does
			}
			c.Secret = want.Secret
			if d := diff(want, c); len(d) > 0 {
				t.Errorf("certhub reads %s differently from Argo CD:\n  %s", key, strings.Join(d, "\n  "))
			}
		})
	}
}

// certhubValidate runs `certhub cluster validate` on docs and returns its
// output and exit error.
func certhubValidate(t *testing.T, docs string) (string, error) {
	t.Helper()
	bin := buildCerthub(t)
	file := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(file, []byte(docs), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "cluster", "validate", file).CombinedOutput()
	return string(out), err
}

// Secrets meant as registrations that Argo CD ignores — Argo CD lists
// cluster Secrets by its own label selector (common.LabelKeySecretType =
// common.LabelValueSecretTypeCluster), which none of these match — are
// errors for certhub; Argo CD's other secret types, which its selector also
// skips, are not registrations and stay silent.
func TestNearMissesAreWhatArgoCDIgnores(t *testing.T) {
	argoSelects := labels.SelectorFromSet(labels.Set{common.LabelKeySecretType: common.LabelValueSecretTypeCluster})
	nearMisses := map[string]*corev1.Secret{}
	mk := func(name string, lbls, anns map[string]string) *corev1.Secret {
		s := secret(name, map[string]string{"name": name, "server": "https://" + name + ".example.com", "config": `{"bearerToken":"t"}`})
		s.Labels, s.Annotations = lbls, anns
		return s
	}
	nearMisses["misspelt-value"] = mk("misspelt-value", map[string]string{common.LabelKeySecretType: "clusters"}, nil)
	nearMisses["capitalised-value"] = mk("capitalised-value", map[string]string{common.LabelKeySecretType: "Cluster"}, nil)
	nearMisses["misspelt-key"] = mk("misspelt-key", map[string]string{"argocd.argoproj.io/secret_type": common.LabelValueSecretTypeCluster}, nil)
	nearMisses["in-annotations"] = mk("in-annotations", nil, map[string]string{common.LabelKeySecretType: common.LabelValueSecretTypeCluster})
	nearMisses["no-label"] = mk("no-label", nil, nil)
	for name, s := range nearMisses {
		t.Run(name, func(t *testing.T) {
			if argoSelects.Matches(labels.Set(s.Labels)) {
				t.Fatalf("Argo CD's selector matches %s: not a near miss", name)
			}
			raw, _ := yaml.Marshal(s)
			out, err := certhubValidate(t, string(raw))
			if err == nil || !strings.Contains(out, "error:") || !strings.Contains(out, "set the label argocd.argoproj.io/secret-type: cluster") {
				t.Errorf("certhub validate: %v\n%s\nwant exit 1 and the fix", err, out)
			}
		})
	}
	var docs strings.Builder
	for _, typ := range []string{common.LabelValueSecretTypeRepository, common.LabelValueSecretTypeRepoCreds, common.LabelValueSecretTypeRepositoryWrite,
		common.LabelValueSecretTypeRepoCredsWrite, common.LabelValueSecretTypeSCMCreds} {
		s := secret("other-"+typ, map[string]string{"url": "https://github.com/x/y", "name": "y"})
		s.Labels = map[string]string{common.LabelKeySecretType: typ}
		raw, _ := yaml.Marshal(s)
		docs.WriteString("---\n")
		docs.Write(raw)
	}
	if out, err := certhubValidate(t, docs.String()); err != nil || strings.Contains(out, "error") || strings.Contains(out, "warning") {
		t.Errorf("Argo CD's other secret types were reported: %v\n%s", err, out)
	}
}
