package app

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/certhub/certhub/internal/inventory"
)

// runCerthub runs the command with args and stdin; it returns stdout+stderr.
func runCerthub(stdin string, args ...string) (string, error) {
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func validate(stdin string, args ...string) (string, error) {
	return runCerthub(stdin, append([]string{"cluster", "validate"}, args...)...)
}

const registrations = "testdata/registrations"

// Every form of Argo CD's declarative setup is accepted — the in-cluster
// server too, although this test does not run in a cluster.
func TestValidateAcceptsArgoCDForms(t *testing.T) {
	out, err := validate("", filepath.Join(registrations, "valid.yaml"))
	if err != nil {
		t.Fatalf("valid registrations refused: %v\n%s", err, out)
	}
	oks := strings.Count(out, ": ok: ")
	if oks < 30 || strings.Contains(out, ": error: ") || strings.Contains(out, ": warning: ") {
		t.Fatalf("%d registrations ok (want >= 30, no error or warning):\n%s", oks, out)
	}
	for _, want := range []string{
		`valid.yaml:39: ok: Secret argocd/in-cluster: cluster "in-cluster" at https://kubernetes.default.svc (the in-cluster server: the cluster the hub reads its Secrets from, resolved at run time)`,
		`ok: Secret argocd/in-cluster-bare: cluster "in-cluster-bare" at https://kubernetes.default.svc`,
		`ok: Secret argocd/shard-quoted: cluster "sharded"`,
		`ok: Secret argocd/base64-data: cluster "b64" at https://b64.example.com`,
		`ok: Secret argocd/mixed-data: cluster "mixed"`, // stringData wins over data, as on the API server
		`ok: Secret no-namespace: cluster "no-ns"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// Each malformed registration is refused with a message naming the field;
// the expectation is the "# expect:" comment above each document.
func TestValidateRefusesMalformed(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(registrations, "invalid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	expect := regexp.MustCompile(`(?m)^# expect: (.*)$`)
	docs := inventory.SplitDocuments(raw)
	n := 0
	for _, d := range docs {
		m := expect.FindSubmatch(d.Raw)
		if m == nil {
			continue
		}
		n++
		want := string(m[1])
		t.Run(want, func(t *testing.T) {
			out, err := validate(string(d.Raw), "-")
			if err == nil || !strings.Contains(out, ": error: ") || !strings.Contains(out, want) {
				t.Fatalf("want an error saying %q, got %v:\n%s", want, err, out)
			}
		})
	}
	if n < 12 {
		t.Fatalf("only %d malformed cases", n)
	}
}

// Regression: `shard: 1` unquoted in stringData passed, although the API
// server refuses it.
func TestValidateUnquotedStringDataIsRefused(t *testing.T) {
	out, err := validate(`apiVersion: v1
kind: Secret
metadata: {name: s, namespace: argocd, labels: {argocd.argoproj.io/secret-type: cluster}}
stringData: {name: s, server: "https://s.example.com", config: '{}', shard: 1}
`, "-")
	if err == nil || !strings.Contains(out, "-:1: error: Secret argocd/s: stringData.shard: Invalid value: 1 (number): must be a string") {
		t.Fatalf("an unquoted shard passed: %v\n%s", err, out)
	}
}

func TestValidateAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	reg := func(secret, cluster, extra string) string {
		return `apiVersion: v1
kind: Secret
metadata:
  name: ` + secret + `
  namespace: argocd
  labels: {argocd.argoproj.io/secret-type: cluster` + extra + `}
stringData: {name: ` + cluster + `, server: "https://` + cluster + `.example.com", config: '{"bearerToken":"t"}'}
`
	}
	write("east/a.yaml", reg("cluster-east", "east", ""))
	write("east/b.yml", "# same cluster, other Secret\n---\n"+reg("cluster-east-2", "east", ""))
	write("west/c.yaml", reg("cluster-east", "west", ""))
	write("west/ignored.txt", "not yaml at all: [")
	write("west/configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated}\n")

	out, err := validate("", dir)
	if err == nil {
		t.Fatalf("duplicates passed:\n%s", out)
	}
	for _, want := range []string{
		"b.yml:3: error: Secret argocd/cluster-east-2: DuplicateClusterName: cluster \"east\" is also registered by Secret argocd/cluster-east at " + filepath.Join(dir, "east/a.yaml") + ":1",
		"c.yaml:1: error: Secret argocd/cluster-east: Secret argocd/cluster-east is also defined at " + filepath.Join(dir, "east/a.yaml") + ":1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ignored.txt") || strings.Contains(out, "unrelated") {
		t.Errorf("a non-YAML file or an unrelated object was reported:\n%s", out)
	}

	// A selector that selects nothing is a warning; --strict makes it fail.
	one := write("single/x.yaml", reg("cluster-x", "x", ", env: dev"))
	out, err = validate("", "--cluster-selector", "env=prod", one)
	if err != nil || !strings.Contains(out, `warning: --cluster-selector "env=prod" selects none of the 1 registrations`) ||
		!strings.Contains(out, "not selected by --cluster-selector") {
		t.Fatalf("selector warning: %v\n%s", err, out)
	}
	if out, err = validate("", "--strict", "--cluster-selector", "env=prod", one); err == nil {
		t.Fatalf("--strict passed a warning:\n%s", out)
	}
	out, err = validate("", "--cluster-selector", "env=dev", one)
	if err != nil || !strings.Contains(out, "selected by --cluster-selector") {
		t.Fatalf("selected registration: %v\n%s", err, out)
	}
	// Another namespace than the hub reads from is a warning.
	other := write("other/ns.yaml", strings.Replace(reg("cluster-y", "yonder", ""), "namespace: argocd", "namespace: gitops", 1))
	out, err = validate("", other)
	if err != nil || !strings.Contains(out, `warning: Secret gitops/cluster-y: metadata.namespace "gitops": the hub reads cluster Secrets from "argocd"`) {
		t.Fatalf("namespace warning: %v\n%s", err, out)
	}
	// -o json, for CI annotations.
	out, err = validate("", "-o", "json", one)
	var findings []inventory.Finding
	if err != nil || json.Unmarshal([]byte(out), &findings) != nil || len(findings) != 1 || findings[0].Line != 1 ||
		findings[0].Severity != "ok" || findings[0].Cluster != "x" || findings[0].Server != "https://x.example.com" {
		t.Fatalf("-o json: %v %+v\n%s", err, findings, out)
	}
}

// Encrypted registrations are checked for structure, not reported as broken.
func TestValidateEncryptedForms(t *testing.T) {
	sops := `apiVersion: v1
kind: Secret
metadata:
  name: cluster-enc
  namespace: argocd
  labels:
    argocd.argoproj.io/secret-type: cluster
stringData:
  name: ENC[AES256_GCM,data:ZWFzdA==,iv:aXY=,tag:dGFn,type:str]
  server: ENC[AES256_GCM,data:aHR0cHM6,iv:aXY=,tag:dGFn,type:str]
  config: ENC[AES256_GCM,data:e30=,iv:aXY=,tag:dGFn,type:str]
sops:
  version: 3.9.0
  encrypted_regex: ^(data|stringData)$
`
	sealed := `apiVersion: bitnami.com/v1alpha1
kind: SealedSecret
metadata: {name: cluster-sealed, namespace: argocd}
spec:
  encryptedData: {name: AgBy3i4OJSWK, server: AgBy3i4OJSWK, config: AgBy3i4OJSWK}
  template:
    metadata:
      name: cluster-sealed
      namespace: argocd
      labels: {argocd.argoproj.io/secret-type: cluster}
`
	out, err := validate(sops+"---\n"+sealed, "-")
	if err != nil || !strings.Contains(out, "ok: Secret argocd/cluster-enc: encrypted (SOPS), structure checked") ||
		!strings.Contains(out, "ok: SealedSecret argocd/cluster-sealed: encrypted (SealedSecret), structure checked") {
		t.Fatalf("encrypted registrations: %v\n%s", err, out)
	}
	noConfig := strings.Replace(sealed, " config: AgBy3i4OJSWK", "", 1)
	out, err = validate(noConfig, "-")
	if err != nil || !strings.Contains(out, "warning: SealedSecret argocd/cluster-sealed") || !strings.Contains(out, "the hub connects anonymously") {
		t.Fatalf("a SealedSecret without config: want a warning (anonymous), got %v\n%s", err, out)
	}
	broken := strings.Replace(sealed, " server: AgBy3i4OJSWK,", "", 1)
	if broken == sealed {
		t.Fatal("the SealedSecret fixture has no server line to remove")
	}
	out, err = validate(broken, "-")
	if err == nil || !strings.Contains(out, "error: SealedSecret argocd/cluster-sealed: invalid cluster Secret field server: is required") {
		t.Fatalf("a SealedSecret without server passed: %v\n%s", err, out)
	}
}

// The ExternalSecret shape `cluster add --format external-secret` writes
// validates; one whose config does not template to JSON does not.
func TestValidateExternalSecret(t *testing.T) {
	es := `apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: cluster-east, namespace: argocd}
spec:
  secretStoreRef: {name: vault, kind: ClusterSecretStore}
  target:
    name: cluster-east
    template:
      engineVersion: v2
      metadata:
        labels: {argocd.argoproj.io/secret-type: cluster}
      data:
        name: east
        server: https://east.example.com
        config: '{"bearerToken":"{{ .token }}","tlsClientConfig":{"caData":"{{ .caData }}","insecure":false}}'
  data:
  - {secretKey: token, remoteRef: {key: certhub/clusters/east, property: token}}
  - {secretKey: caData, remoteRef: {key: certhub/clusters/east, property: caData}}
`
	out, err := validate(es, "-")
	if err != nil || !strings.Contains(out, `ok: ExternalSecret argocd/cluster-east: ExternalSecret templating cluster "east" at https://east.example.com`) {
		t.Fatalf("ExternalSecret: %v\n%s", err, out)
	}
	broken := strings.Replace(es, `"bearerToken":"{{ .token }}"`, `"bearerToken":{{ .token }}`, 1)
	out, err = validate(broken, "-")
	if err == nil || !strings.Contains(out, "spec.target.template.data.config: does not render to JSON with placeholder values") {
		t.Fatalf("an ExternalSecret with a broken config template passed: %v\n%s", err, out)
	}
	noLabel := strings.Replace(es, "labels: {argocd.argoproj.io/secret-type: cluster}", "labels: {}", 1)
	if out, err = validate(noLabel, "-"); err != nil || strings.Contains(out, "ok:") {
		t.Fatalf("an ExternalSecret of another Secret was judged as a registration: %v\n%s", err, out)
	}
}

func TestValidateShippedExample(t *testing.T) {
	out, err := validate("", filepath.Join("..", "..", "examples", "cluster-secret.yaml"))
	if err != nil || !strings.Contains(out, `ok: Secret argocd/cluster-east: cluster "east" at https://east.example.com:6443`) {
		t.Fatalf("the shipped example does not validate: %v\n%s", err, out)
	}
	out, err = validate("", "--show-connection", filepath.Join("..", "..", "examples", "cluster-secret.yaml"))
	if err != nil || !strings.Contains(out, `"host": "https://east.example.com:6443"`) {
		t.Fatalf("--show-connection: %v\n%s", err, out)
	}
}

// A remote registration without config is valid, as in Argo CD, with a
// warning that the hub connects anonymously (an error only with --strict).
func TestValidateConfigLessRemoteWarns(t *testing.T) {
	doc := `apiVersion: v1
kind: Secret
metadata:
  name: bare
  namespace: argocd
  labels: {argocd.argoproj.io/secret-type: cluster}
stringData:
  name: bare
  server: https://bare.example.com
`
	out, err := validate(doc, "-")
	if err != nil || !strings.Contains(out, "warning: Secret argocd/bare") || !strings.Contains(out, "connects to https://bare.example.com anonymously") {
		t.Fatalf("want a warning naming anonymous access and exit 0, got %v:\n%s", err, out)
	}
	if _, err := validate(doc, "--strict", "-"); err == nil {
		t.Errorf("--strict: a warning must fail")
	}
}

// Secrets that are not registrations, in the same folder, stay silent: a
// TLS Secret, a database Secret, Argo CD repository Secrets, and a Secret
// with a "server" that is no URL.
func TestValidateIgnoresUnrelatedSecrets(t *testing.T) {
	docs := `apiVersion: v1
kind: Secret
metadata: {name: web-tls, namespace: argocd}
type: kubernetes.io/tls
data: {tls.crt: "", tls.key: ""}
---
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: argocd}
stringData: {host: db.example.com, username: app, password: pw, name: orders}
---
apiVersion: v1
kind: Secret
metadata: {name: repo, namespace: argocd, labels: {argocd.argoproj.io/secret-type: repository}}
stringData: {url: "https://github.com/x/y", name: y}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: argocd, labels: {argocd.argoproj.io/secret-type: repo-creds}}
stringData: {url: "https://github.com/x", password: p}
---
apiVersion: v1
kind: Secret
metadata: {name: smtp, namespace: argocd}
stringData: {server: "smtp.example.com:587", name: mailer}
`
	out, err := validate(docs, "-")
	if strings.Contains(out, "error") || strings.Contains(out, "warning") {
		t.Fatalf("unrelated Secrets were reported (%v):\n%s", err, out)
	}
}
