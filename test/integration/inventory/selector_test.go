// Package inventory checks which registrations the hub serves and how it
// reacts to their changes, on real API servers.
package inventory

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/suite"
)

const (
	issuerName = "inv-ca"
	optIn      = "certhub.io/enabled"
)

var env *suite.Env

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Downstreams: 3, Unregistered: 1, Issuer: issuerName, Binary: true,
		Hub: func(o *hub.Options) {
			o.ClusterSelector = optIn + "=true"
			// The exec plugins auth_test writes; anything else is refused.
			o.ExecPlugins = []string{filepath.Join(env.Dir, "get-token"), filepath.Join(env.Dir, "hang-token")}
			// They run as `certhub run` runs them: through the binary's
			// exec-credential shim, killed after the request timeout.
			o.ExecShim, o.RequestTimeout = env.Binary, 5*time.Second
		}}, &env))
}

// reachable returns the certhub_cluster_reachable gauge of cluster, if the hub exports one.
func reachable(t *testing.T, cluster string) (float64, bool) {
	t.Helper()
	return fixture.Gauge(t, "certhub_cluster_reachable", map[string]string{"cluster": cluster})
}

func setOptIn(t *testing.T, name string, on bool) {
	t.Helper()
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: env.Bed.ArgoNamespace(), Name: name}
	if err := env.Bed.Hub.Client.Get(context.Background(), key, s); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(s.DeepCopy())
	if on {
		s.Labels[optIn] = "true"
	} else {
		delete(s.Labels, optIn)
	}
	if err := env.Bed.Hub.Client.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
}

// --cluster-selector: only opted-in registrations are served; opting in and
// out through the Secret's labels takes effect live.
func TestClusterSelectorOptInAndOut(t *testing.T) {
	ctx := context.Background()
	in, out := env.Bed.Downstreams[0], env.Bed.Downstreams[1]
	setOptIn(t, in.Name, true)
	for _, cp := range env.Bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, "sel")
		if err := cp.Client.Create(ctx, fixture.Certificate("sel", "web", issuerName)); err != nil {
			t.Fatal(err)
		}
	}
	fixture.WaitReady(t, in.Client, client.ObjectKey{Namespace: "sel", Name: "web"})
	if _, ok := reachable(t, out.Name); ok {
		t.Errorf("cluster %s is connected although its Secret does not match the selector", out.Name)
	}

	setOptIn(t, out.Name, true) // opt in through Git: served without a restart
	fixture.WaitReady(t, out.Client, client.ObjectKey{Namespace: "sel", Name: "web"})

	setOptIn(t, in.Name, false) // opt out: disengaged, nothing deleted downstream
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		_, ok := reachable(t, in.Name)
		return !ok, nil
	})
	if err != nil {
		t.Fatalf("cluster %s still connected after opting out", in.Name)
	}
	if err := in.Client.Get(ctx, client.ObjectKey{Namespace: "sel", Name: "web-tls"}, &corev1.Secret{}); err != nil {
		t.Errorf("opting out must not delete anything downstream: %v", err)
	}
}
