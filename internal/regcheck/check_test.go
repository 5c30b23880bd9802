package regcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const registrations = "testdata/registrations"

// validate checks stdin ("-") or files as `certhub cluster validate` does
// (--strict makes warnings fail) and returns its text output: the tests of
// the command itself (flags, directories, -o json) are in internal/app.
func validate(stdin string, args ...string) (string, error) {
	strict := false
	v := NewChecker(CheckOptions{})
	for _, a := range args {
		switch a {
		case "--strict":
			strict = true
		case "-":
			v.File("-", []byte(stdin))
		default:
			raw, err := os.ReadFile(a)
			if err != nil {
				return "", err
			}
			v.File(a, raw)
		}
	}
	var out strings.Builder
	for _, f := range v.Findings() {
		out.WriteString(f.String() + "\n")
	}
	if errs, warns := v.Counts(); errs > 0 || strict && warns > 0 {
		return out.String(), fmt.Errorf("%d error(s), %d warning(s) in cluster registrations", errs, warns)
	}
	return out.String(), nil
}

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
	docs := SplitDocuments(raw)
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
