package inventory

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
)

// register writes an opted-in Argo CD cluster Secret for the third downstream
// API server under name, with cc, and removes it when the test ends.
func register(t *testing.T, name string, cc inventory.ClusterConfig, data map[string]string) {
	t.Helper()
	cp := env.Bed.Downstreams[2]
	s, err := inventory.NewSecret(env.Bed.ArgoNamespace(), name, name, cp.Server(), cc)
	if err != nil {
		t.Fatal(err)
	}
	s.Labels[optIn] = "true"
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	if err := env.Bed.Hub.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Bed.Hub.Client.Delete(context.Background(), s) })
}

// issuedVia registers the third API server under name with cc and checks a
// Certificate there is issued, then unregisters it (one registration per
// server at a time, so two "clusters" never reconcile the same objects).
func issuedVia(t *testing.T, name string, cc inventory.ClusterConfig) {
	t.Helper()
	cp := env.Bed.Downstreams[2]
	ns := "auth-" + name
	fixture.EnsureNamespace(t, cp.Client, ns)
	register(t, name, cc, nil)
	crt := fixture.Certificate(ns, "web", issuerName)
	if err := cp.Client.Create(context.Background(), crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
}

// Each credential form a real kube-apiserver accepts connects and issues.
func TestAuthForms(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[2]
	token, err := env.Bed.ServiceAccountToken(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	ca := inventory.TLSClientConfig{CAData: cp.Config.CAData}

	t.Run("bearer token (TokenRequest)", func(t *testing.T) {
		issuedVia(t, "bearer", inventory.ClusterConfig{BearerToken: token, TLSClientConfig: ca})
	})
	t.Run("TLS client certificate", func(t *testing.T) {
		certPEM, keyPEM, err := env.Bed.ClientCertificate(ctx, cp, "certhub-cert-user")
		if err != nil {
			t.Fatal(err)
		}
		issuedVia(t, "clientcert", inventory.ClusterConfig{TLSClientConfig: inventory.TLSClientConfig{CAData: cp.Config.CAData, CertData: certPEM, KeyData: keyPEM}})
	})
	script := "#!/bin/sh\nprintf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' \"$CERTHUB_TOKEN\"\n"
	plugin := func(t *testing.T, dir, name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	execConfig := func(cmd string) inventory.ClusterConfig {
		return inventory.ClusterConfig{TLSClientConfig: ca, ExecProviderConfig: &inventory.ExecProviderConfig{
			Command: cmd, APIVersion: "client.authentication.k8s.io/v1", Env: map[string]string{"CERTHUB_TOKEN": token}}}
	}
	t.Run("exec plugin on the allow-list, with a minimal environment", func(t *testing.T) {
		envFile := filepath.Join(env.Dir, "plugin-env")
		t.Setenv("CERTHUB_HUB_ONLY", "the plugin must not see this") // the hub's environment, as a pod's would be
		issuedVia(t, "exec", execConfig(plugin(t, env.Dir, "get-token", "#!/bin/sh\nenv > "+envFile+"\n"+script[len("#!/bin/sh\n"):])))
		seen, err := os.ReadFile(envFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(seen), "CERTHUB_TOKEN=") || !strings.Contains(string(seen), "KUBERNETES_EXEC_INFO=") {
			t.Errorf("the plugin did not get its registration's env and client-go's request:\n%s", seen)
		}
		if strings.Contains(string(seen), "CERTHUB_HUB_ONLY") {
			t.Errorf("the plugin saw the hub's environment:\n%s", seen)
		}
	})
	t.Run("exec plugin not on the allow-list is never run", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "ran")
		cmd := plugin(t, t.TempDir(), "get-token", "#!/bin/sh\ntouch "+marker+"\n"+script[len("#!/bin/sh\n"):])
		register(t, "exec-refused", execConfig(cmd), nil)
		waitSecretEvent(t, "exec-refused", inventory.ReasonInvalidClusterSecret, "not on the hub's exec plugin allow-list")
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("the refused plugin ran")
		}
	})
	t.Run("a hung exec plugin holds nobody and is killed", func(t *testing.T) {
		pidFile := filepath.Join(env.Dir, "hung-pid")
		register(t, "exec-hung", execConfig(plugin(t, env.Dir, "hang-token", "#!/bin/sh\necho $$ >> "+pidFile+"\nexec sleep 60\n")), nil)
		issuedVia(t, "after-hung", inventory.ClusterConfig{BearerToken: token, TLSClientConfig: ca})
		waitSecretEvent(t, "exec-hung", inventory.ReasonClusterUnreachable, "did not finish within")
		// The shim kills it at the request timeout (5 s here), not after its 60 s.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			raw, err := os.ReadFile(pidFile)
			if err != nil {
				return false, nil
			}
			first, _, _ := strings.Cut(string(raw), "\n") // the hub retries; the first run must be gone
			pid, err := strconv.Atoi(strings.TrimSpace(first))
			if err != nil {
				return false, nil
			}
			return syscall.Kill(pid, 0) == syscall.ESRCH, nil
		})
		if err != nil {
			t.Error("the hung plugin still runs 20 s after it started")
		}
	})
	t.Run("CA pinned with serverName", func(t *testing.T) {
		issuedVia(t, "servername", inventory.ClusterConfig{BearerToken: token,
			TLSClientConfig: inventory.TLSClientConfig{CAData: cp.Config.CAData, ServerName: "localhost"}})
	})
	t.Run("serverName mismatch is refused and reported", func(t *testing.T) {
		register(t, "wrongname", inventory.ClusterConfig{BearerToken: token,
			TLSClientConfig: inventory.TLSClientConfig{CAData: cp.Config.CAData, ServerName: "wrong.example.com"}}, nil)
		waitSecretEvent(t, "wrongname", inventory.ReasonClusterUnreachable, "x509")
	})
	t.Run("insecure", func(t *testing.T) {
		issuedVia(t, "insecure", inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{Insecure: true}})
	})
}

// A registration with `namespaces` is served only there, with namespaced
// RBAC; the same credentials are refused elsewhere by the API server.
func TestNamespaceScopedRegistration(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[2]
	token, err := env.Bed.NamespacedToken(ctx, cp, "scoped")
	if err != nil {
		t.Fatal(err)
	}
	fixture.EnsureNamespace(t, cp.Client, "elsewhere")
	outside := fixture.Certificate("elsewhere", "not-mine", issuerName)
	if err := cp.Client.Create(ctx, outside); err != nil {
		t.Fatal(err)
	}
	register(t, "scoped", inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{CAData: cp.Config.CAData}},
		map[string]string{"namespaces": "scoped"})
	inside := fixture.Certificate("scoped", "mine", issuerName)
	if err := cp.Client.Create(ctx, inside); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(inside))

	got := &corev1.Secret{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "elsewhere", Name: "not-mine-tls"}, got); !apierrors.IsNotFound(err) {
		t.Errorf("a Secret was written outside the registration's namespaces (err %v)", err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: cp.Server(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cp.Config.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Secrets("elsewhere").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the scoped credentials read Secrets in another namespace: err %v", err)
	}
	if _, err := cs.CoreV1().Secrets("scoped").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the scoped credentials cannot list their own namespace: %v", err)
	}
}

// waitSecretEvent waits for an Event on the cluster Secret name with reason
// and a note containing fragment.
func waitSecretEvent(t *testing.T, name, reason, fragment string) {
	t.Helper()
	fixture.WaitEvent(t, env.Bed.Hub.Client, env.Bed.ArgoNamespace(), name, reason, fragment)
}
