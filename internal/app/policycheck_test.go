package app

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certhub/certhub/internal/policy"
)

// The shipped example policies decode strictly and compile.
func TestExamplePoliciesCompile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "issuancepolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := policy.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Fatalf("parsed %d policies, want 3", len(ps))
	}
	if _, err := policy.Compile(ps, policy.Deny); err != nil {
		t.Fatal(err)
	}
}

func TestPolicyCheckOffline(t *testing.T) {
	examples := filepath.Join("..", "..", "examples")
	crts := filepath.Join(t.TempDir(), "certs.yaml")
	if err := os.WriteFile(crts, []byte(`apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: api
spec:
  secretName: api-tls
  commonName: api.east.dev.example.com
  dnsNames: [api.east.dev.example.com, api.team.svc]
  duration: 720h
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {kind: ClusterIssuer, name: platform-ca}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: steal
  namespace: team
spec:
  secretName: steal-tls
  dnsNames: [shop.example.com]
  privateKey: {algorithm: ECDSA}
  issuerRef: {kind: ClusterIssuer, name: platform-ca}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(labels string) (string, error) {
		var out bytes.Buffer
		err := runPolicyCheck(context.Background(), strings.NewReader(""), &out, []string{crts},
			policyCheckOptions{cluster: "east", clusterLabels: labels, namespace: "team", defaultPolicy: "deny",
				policyFiles: []string{filepath.Join(examples, "issuancepolicy.yaml")}})
		return out.String(), err
	}
	out, err := run("env=dev")
	t.Log(out)
	if !errors.Is(err, errDenied) {
		t.Fatalf("err = %v, want errDenied", err)
	}
	for _, want := range []string{
		`ALLOWED team/api: allowed by IssuancePolicy "dev"`,
		`DENIED  team/steal: denied by every IssuancePolicy that selects it (dev); dev: spec.dnsNames "shop.example.com" is not allowed`,
		"2 Certificate(s) checked against 3 IssuancePolicies",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	out, err = run("env=staging")
	if !errors.Is(err, errDenied) || !strings.Contains(out, `no IssuancePolicy selects cluster "east", namespace "team"`) {
		t.Errorf("an unselected cluster under default deny: err %v, output %s", err, out)
	}
}
