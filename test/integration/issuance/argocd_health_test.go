package issuance

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/test/fixture"
)

// argoVersion is the Argo CD release whose Certificate health script we check against.
const argoVersion = "github.com/argoproj/argo-cd/v3@v3.5.7"

const healthScript = "testdata/argocd-certificate-health.lua"

// The vendored script must be Argo CD's, byte for byte.
func TestVendoredHealthScriptIsArgoCDs(t *testing.T) {
	out, err := exec.Command("go", "mod", "download", "-json", argoVersion).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", argoVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download said %s", out)
	}
	want, err := os.ReadFile(filepath.Join(mod.Dir, "resource_customizations", "cert-manager.io", "Certificate", "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(healthScript)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from %s's health.lua; copy it again", healthScript, argoVersion)
	}
}

// argoHealth runs Argo CD's health script on obj, as Argo CD's Lua VM does:
// `obj` is the object as a table, the script returns {status, message}.
func argoHealth(t *testing.T, obj client.Object) (status, message string) {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(healthScript)
	if err != nil {
		t.Fatal(err)
	}
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, u))
	if err := L.DoString(string(script)); err != nil {
		t.Fatalf("health script: %v", err)
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health script returned %v", L.Get(-1))
	}
	return hs.RawGetString("status").String(), hs.RawGetString("message").String()
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case map[string]any:
		tb := L.NewTable()
		for k, e := range x {
			tb.RawSetString(k, toLua(L, e))
		}
		return tb
	case []any:
		tb := L.NewTable()
		for _, e := range x {
			tb.Append(toLua(L, e))
		}
		return tb
	case string:
		return lua.LString(x)
	case bool:
		return lua.LBool(x)
	case int64:
		return lua.LNumber(x)
	case float64:
		return lua.LNumber(x)
	case nil:
		return lua.LNil
	default:
		return lua.LString("")
	}
}

// Argo CD shows an issued Certificate as Healthy and an invalid one as
// Degraded, from the status certhub wrote — so ApplicationSet RollingSync
// and app health work downstream without cert-manager.
func TestArgoCDHealthOfWrittenStatus(t *testing.T) {
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "argo-health")
	good := fixture.Certificate("argo-health", "good", issuerName)
	bad := fixture.Certificate("argo-health", "bad", issuerName)
	bad.Spec.DNSNames, bad.Spec.CommonName = nil, ""
	fresh := fixture.Certificate("argo-health", "fresh", issuerName)
	if st, _ := argoHealth(t, fresh); st != "Progressing" {
		t.Errorf("a Certificate without status is %s to Argo CD, want Progressing", st)
	}
	for _, crt := range []*cmapi.Certificate{good, bad} {
		if err := c.Create(context.Background(), crt); err != nil {
			t.Fatal(err)
		}
	}
	issued := fixture.WaitReady(t, c, client.ObjectKeyFromObject(good))
	expectStable(t, c, issued)
	if st, msg := argoHealth(t, issued); st != "Healthy" {
		t.Errorf("issued Certificate is %s (%s) to Argo CD, want Healthy", st, msg)
	}
	refused := fixture.WaitFor(t, c, client.ObjectKeyFromObject(bad), "Ready=False", fixture.NotReadyWith(reasons.InvalidNames))
	if st, msg := argoHealth(t, refused); st != "Degraded" || msg == "" {
		t.Errorf("invalid Certificate is %s (%q) to Argo CD, want Degraded with a message", st, msg)
	}
}
