// Package kubeconfigdir checks the alternative inventory: one downstream
// cluster per kubeconfig file in a directory (--kubeconfig-dir), with the
// same engage / re-engage / disengage behaviour as cluster Secrets.
package kubeconfigdir

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const issuerName = "dir-ca"

var (
	env *suite.Env
	dir string
)

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Unregistered: 2,
		Setup: func(ctx context.Context, e *suite.Env) error {
			dir = filepath.Join(e.Dir, "kubeconfigs")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			return writeKubeconfig(ctx, e.Bed, e.Bed.Downstreams[0])
		},
		Hub: func(o *hub.Options) { o.KubeconfigDir = dir }}, &env))
}

// writeKubeconfig writes <cluster>.kubeconfig with a fresh ServiceAccount token.
func writeKubeconfig(ctx context.Context, bed *testbed.Bed, cp *testbed.ControlPlane) error {
	token, err := bed.ServiceAccountToken(ctx, cp)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cp.Name] = &clientcmdapi.Cluster{Server: cp.Server(), CertificateAuthorityData: cp.Config.CAData}
	cfg.AuthInfos["certhub"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: cp.Name, AuthInfo: "certhub"}
	cfg.CurrentContext = "default"
	return clientcmd.WriteToFile(*cfg, filepath.Join(dir, cp.Name+".kubeconfig"))
}

func connected(t *testing.T, cluster string) bool {
	t.Helper()
	v, ok := fixture.Gauge(t, "certhub_cluster_reachable", map[string]string{"cluster": cluster})
	return ok && v == 1
}

func TestKubeconfigDirectory(t *testing.T) {
	ctx := context.Background()
	one, two := env.Bed.Downstreams[0], env.Bed.Downstreams[1]
	issue := func(cp *testbed.ControlPlane, name string) {
		t.Helper()
		fixture.EnsureNamespace(t, cp.Client, "dir")
		crt := fixture.Certificate("dir", name, issuerName)
		if err := cp.Client.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
		fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	}
	issue(one, "first")

	// A file added later is served without a restart.
	if err := writeKubeconfig(ctx, env.Bed, two); err != nil {
		t.Fatal(err)
	}
	issue(two, "added")

	// A changed file (a new token) re-engages that cluster and keeps issuing.
	if err := writeKubeconfig(ctx, env.Bed, one); err != nil {
		t.Fatal(err)
	}
	issue(one, "after-rotation")

	// A removed file disengages the cluster; nothing downstream is deleted.
	if err := os.Remove(filepath.Join(dir, two.Name+".kubeconfig")); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		return !connected(t, two.Name), nil
	})
	if err != nil {
		t.Fatalf("%s still connected after its kubeconfig was removed", two.Name)
	}
	fixture.GetSecret(t, two.Client, fixture.Certificate("dir", "added", issuerName))
	if !connected(t, one.Name) {
		t.Errorf("%s should still be connected", one.Name)
	}
}
