// Package admission applies the downstream ValidatingAdmissionPolicy
// (kustomize/downstream/certificate-validation.yaml) to a real downstream
// API server and checks that it refuses, at create, the spec errors
// cert-manager's webhook refuses, with its messages, while accepting every
// valid Certificate of the field-parity tests. A second downstream without
// the policy is the control: there the same objects are accepted, so the
// refusals are the policy's, not the CRD schema's.
package admission

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const (
	ns          = "admission"
	issuerName  = "admission-ca"
	policyFile  = "certificate-validation.yaml"
	policyName  = "certhub-certificate-validation"
	downstreamK = "../../../kustomize/downstream"
)

var (
	env *suite.Env
	// guarded has the policy; control has none.
	guarded, control *testbed.ControlPlane
)

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Unregistered: 2,
		Setup: func(ctx context.Context, e *suite.Env) error {
			guarded, control = e.Bed.Downstreams[0], e.Bed.Downstreams[1]
			return applyPolicy(ctx, guarded.Client)
		}}, &env))
}

// applyPolicy creates the policy and its binding as shipped.
func applyPolicy(ctx context.Context, c client.Client) error {
	raw, err := os.ReadFile(filepath.Join(downstreamK, policyFile))
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return err
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// object is crt as an unstructured object, changed by mutate.
func object(t *testing.T, crt *cmapi.Certificate, mutate func(spec map[string]any)) *unstructured.Unstructured {
	t.Helper()
	crt.APIVersion, crt.Kind = cmapi.SchemeGroupVersion.String(), cmapi.CertificateKind
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crt)
	if err != nil {
		t.Fatal(err)
	}
	delete(m, "status")
	if spec, ok := m["spec"].(map[string]any); ok && mutate != nil {
		mutate(spec)
	}
	return &unstructured.Unstructured{Object: m}
}

// refusedCases are spec errors the CRD schema lets through and cert-manager's
// webhook refuses; want is a fragment of cert-manager's message.
var refusedCases = []struct {
	name, want string
	mutate     func(spec map[string]any)
}{
	{"duration does not parse", `spec.duration: Invalid value: "1 day": must be a duration`, func(s map[string]any) { s["duration"] = "1 day" }},
	{"renewBefore does not parse", `spec.renewBefore: Invalid value: "2d": must be a duration`, func(s map[string]any) { s["renewBefore"] = "2d" }},
	{"duration under 1h", "certificate duration must be greater than 1h0m0s", func(s map[string]any) { s["duration"] = "30m" }},
	{"renewBefore not under duration", "certificate duration 2h must be greater than renewBefore 3h", func(s map[string]any) { s["duration"], s["renewBefore"] = "2h", "3h" }},
	{"renewBefore not under the default duration", "certificate duration 2160h must be greater than renewBefore 2200h", func(s map[string]any) { delete(s, "duration"); s["renewBefore"] = "2200h" }},
	{"renewBefore under 5m", "certificate renewBefore must be greater than 5m0s", func(s map[string]any) { s["renewBefore"] = "1m" }},
	{"renewBefore and renewBeforePercentage", "renewBefore and renewBeforePercentage are mutually exclusive", func(s map[string]any) {
		s["renewBefore"], s["renewBeforePercentage"] = "1h", int64(50)
	}},
	{"renewBeforePercentage 100", "spec.renewBeforePercentage: Invalid value: 100: must be between 0 and 100, exclusive", func(s map[string]any) { s["renewBeforePercentage"] = int64(100) }},
	{"no names", "at least one of commonName (from the commonName field or from a literalSubject), dnsNames, emailAddresses, ipAddresses, otherNames, or uris must be set", func(s map[string]any) {
		delete(s, "commonName")
		delete(s, "dnsNames")
	}},
	{"commonName over 64 bytes", "spec.commonName: Too long", func(s map[string]any) { s["commonName"] = strings.Repeat("a", 65) }},
	{"commonName with literalSubject", "When providing a `LiteralSubject` no `commonName` may be provided.", func(s map[string]any) { s["literalSubject"] = "CN=x,O=y" }},
	{"subject with literalSubject", "When providing a `LiteralSubject` no `Subject` properties may be provided.", func(s map[string]any) {
		delete(s, "commonName")
		s["literalSubject"], s["subject"] = "CN=x", map[string]any{"organizations": []any{"o"}}
	}},
	{"RSA 1024", "spec.privateKey.size: Invalid value: 1024: must be between 2048 and 8192 for rsa keyAlgorithm", func(s map[string]any) {
		s["privateKey"] = map[string]any{"algorithm": "RSA", "size": int64(1024)}
	}},
	{"RSA by default, 1024", "must be between 2048 and 8192 for rsa keyAlgorithm", func(s map[string]any) { s["privateKey"] = map[string]any{"size": int64(1024)} }},
	{"ECDSA 512", `spec.privateKey.size: Unsupported value: 512: supported values: "256", "384", "521"`, func(s map[string]any) {
		s["privateKey"] = map[string]any{"algorithm": "ECDSA", "size": int64(512)}
	}},
	{"issuerRef without name", "spec.issuerRef.name: Required value: must be specified", func(s map[string]any) { s["issuerRef"] = map[string]any{"name": "", "kind": "ClusterIssuer"} }},
	{"issuerRef unknown cert-manager kind", `spec.issuerRef.kind: Invalid value: "Vault": must be one of Issuer or ClusterIssuer`, func(s map[string]any) {
		s["issuerRef"] = map[string]any{"name": "x", "kind": "Vault", "group": "cert-manager.io"}
	}},
	{"issuerRef external kind without group", "(did you forget to set spec.issuerRef.kind.group?)", func(s map[string]any) {
		s["issuerRef"] = map[string]any{"name": "x", "kind": "AWSPCAClusterIssuer"}
	}},
	{"PKCS12 password and passwordSecretRef", "PKCS12: only one of passwordSecretRef or password may be set", func(s map[string]any) {
		s["keystores"] = map[string]any{"pkcs12": map[string]any{"create": true, "password": "x", "passwordSecretRef": map[string]any{"name": "pw", "key": "k"}}}
	}},
	{"JKS without password", "JKS: one of passwordSecretRef or password must be set", func(s map[string]any) {
		s["keystores"] = map[string]any{"jks": map[string]any{"create": true}}
	}},
	{"secretTemplate sets a cert-manager.io annotation", "cert-manager.io/* annotations are not allowed", func(s map[string]any) {
		s["secretTemplate"] = map[string]any{"annotations": map[string]any{"cert-manager.io/issuer-name": "x"}}
	}},
	{"nameConstraints without isCA", "isCA should be true when nameConstraints is set", func(s map[string]any) {
		s["nameConstraints"] = map[string]any{"permitted": map[string]any{"dnsDomains": []any{"example.com"}}}
	}},
	{"revisionHistoryLimit 0", "spec.revisionHistoryLimit: Invalid value: 0: must not be less than 1", func(s map[string]any) { s["revisionHistoryLimit"] = int64(0) }},
}

// waitForPolicy waits until the API server enforces the policy (it loads
// policies asynchronously after they are created).
func waitForPolicy(t *testing.T) {
	t.Helper()
	probe := object(t, fixture.Certificate(ns, "probe", issuerName), func(s map[string]any) { s["duration"] = "1 day" })
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		return guarded.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll) != nil, nil
	})
	if err != nil {
		t.Fatalf("the ValidatingAdmissionPolicy was not enforced within %s", fixture.WaitTimeout)
	}
}

func TestPolicyRefusesWhatTheWebhookWould(t *testing.T) {
	fixture.EnsureNamespace(t, guarded.Client, ns)
	fixture.EnsureNamespace(t, control.Client, ns)
	waitForPolicy(t)
	ctx := context.Background()
	for i, tc := range refusedCases {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, fixture.Certificate(ns, "bad-"+strings.ReplaceAll(strings.ToLower(strings.Fields(tc.name)[0]), "_", "-")+"-"+string(rune('a'+i)), issuerName), tc.mutate)
			if err := control.Client.Create(ctx, obj.DeepCopy(), client.DryRunAll); err != nil {
				t.Fatalf("without the policy the API server refuses it already (not the policy's case): %v", err)
			}
			err := guarded.Client.Create(ctx, obj.DeepCopy())
			if err == nil {
				t.Fatalf("created; want refused with %q", tc.want)
			}
			if !strings.Contains(err.Error(), policyName) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with %v; want the policy's message containing %q", err, tc.want)
			}
			t.Logf("refused: %s", after(err.Error(), "denied request: "))
		})
	}
	if len(refusedCases) < 12 {
		t.Errorf("%d refused cases, want at least 12", len(refusedCases))
	}
}

// An update that breaks a valid Certificate is refused too.
func TestPolicyRefusesABreakingUpdate(t *testing.T) {
	fixture.EnsureNamespace(t, guarded.Client, ns)
	waitForPolicy(t)
	ctx := context.Background()
	obj := object(t, fixture.Certificate(ns, "update-me", issuerName), nil)
	if err := guarded.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(obj.Object, "1 week", "spec", "duration"); err != nil {
		t.Fatal(err)
	}
	if err := guarded.Client.Update(ctx, obj); err == nil || !strings.Contains(err.Error(), `"1 week"`) {
		t.Fatalf("update to duration \"1 week\": err %v, want refused naming the value", err)
	}
}

func TestPolicyAcceptsEveryParityCertificate(t *testing.T) {
	fixture.EnsureNamespace(t, guarded.Client, ns)
	waitForPolicy(t)
	var errs []error
	for _, name := range fixture.ParityNames {
		obj := object(t, fixture.ParityCertificate(ns, issuerName, name), nil)
		if err := guarded.Client.Create(context.Background(), obj); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("valid Certificates refused: %v", err)
	}
	t.Logf("accepted %d field-parity Certificates: %s", len(fixture.ParityNames), strings.Join(fixture.ParityNames, ", "))
}

func after(s, sep string) string {
	if _, rest, ok := strings.Cut(s, sep); ok {
		return rest
	}
	return s
}
