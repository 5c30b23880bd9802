package app

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/regcheck"
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
	var findings []regcheck.Finding
	if err != nil || json.Unmarshal([]byte(out), &findings) != nil || len(findings) != 1 || findings[0].Line != 1 ||
		findings[0].Severity != "ok" || findings[0].Cluster != "x" || findings[0].Server != "https://x.example.com" {
		t.Fatalf("-o json: %v %+v\n%s", err, findings, out)
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

// Names Argo CD accepts that are not DNS labels (its own examples use
// "mycluster.example.com") validate with a warning that no {{cluster}}
// pattern matches them, and exit 0; --strict turns the warning into a
// failure as for every other warning.
func TestValidateWarnsOfNamesThatAreNotLabels(t *testing.T) {
	for _, name := range []string{"mycluster.example.com", "Prod-EU"} {
		reg := `apiVersion: v1
kind: Secret
metadata:
  name: ` + inventory.SecretName(name) + `
  namespace: argocd
  labels: {argocd.argoproj.io/secret-type: cluster}
stringData: {name: ` + name + `, server: "https://kube.example.com", config: '{"bearerToken":"t"}'}
`
		out, err := validate(reg, "-")
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if want := `warning: Secret argocd/` + inventory.SecretName(name) + `: cluster "` + name + `" at https://kube.example.com; name "` + name + `" is not a DNS label`; !strings.Contains(out, want) ||
			!strings.Contains(out, "no IssuancePolicy pattern with {{cluster}} matches it") {
			t.Errorf("%s: missing %q in:\n%s", name, want, out)
		}
		if out, err := validate(reg, "--strict", "-"); err == nil {
			t.Errorf("%s: --strict passed a warning:\n%s", name, out)
		}
	}
}
