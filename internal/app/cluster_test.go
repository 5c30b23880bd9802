package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateExamplesAndBrokenFiles(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte(`apiVersion: v1
kind: Secret
metadata: {name: b, namespace: argocd, labels: {argocd.argoproj.io/secret-type: cluster}}
stringData: {name: b, server: "https://b", config: '{"bearerToken": '}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := NewCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"cluster", "validate"}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run(filepath.Join("..", "..", "examples", "cluster-secret.yaml"))
	if err != nil || !strings.Contains(out, `ok (cluster "east" at https://east.example.com:6443)`) {
		t.Fatalf("the shipped example does not validate: %v\n%s", err, out)
	}
	out, err = run(broken)
	if err == nil || !strings.Contains(out, "broken.yaml: Secret argocd/b: invalid cluster Secret field config") {
		t.Fatalf("a broken registration passed or was not named: %v\n%s", err, out)
	}
	out, err = run("--show-connection", filepath.Join("..", "..", "examples", "cluster-secret.yaml"))
	if err != nil || !strings.Contains(out, `"host": "https://east.example.com:6443"`) {
		t.Fatalf("--show-connection: %v\n%s", err, out)
	}
}
