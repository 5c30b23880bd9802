package inventory

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
)

// The registration's token is revoked and a new one written into the cluster
// Secret (credential rotation, e.g. from Git or External Secrets): the hub
// re-engages with it, without a restart, and keeps issuing.
func TestTokenRotation(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[2]
	const ns = "rot"
	token, err := env.Bed.NamespacedToken(ctx, cp, ns)
	if err != nil {
		t.Fatal(err)
	}
	cc := inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{CAData: cp.Config.CAData}}
	register(t, "rotating", cc, map[string]string{"namespaces": ns})
	before := fixture.Certificate(ns, "before", issuerName)
	if err := cp.Client.Create(ctx, before); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(before))

	// Revoke: deleting the ServiceAccount invalidates every token it had.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "certhub-hub-" + ns}}
	if err := cp.Client.Delete(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(ctx, cp.Client, sa); err != nil {
		t.Fatal(err)
	}
	if cc.BearerToken, err = env.Bed.NamespacedToken(ctx, cp, ns); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: env.Bed.ArgoNamespace(), Name: "rotating"}, s); err != nil {
		t.Fatal(err)
	}
	s.Data["config"] = raw
	start := time.Now()
	if err := env.Bed.Hub.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	after := fixture.Certificate(ns, "after", issuerName)
	if err := cp.Client.Create(ctx, after); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(after))
	t.Logf("token rotated: first Certificate issued with the new credentials %s after the cluster Secret update", time.Since(start).Round(time.Millisecond))
}

func waitGone(ctx context.Context, c client.Client, o client.Object) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		return apierrors.IsNotFound(err), nil
	})
}
