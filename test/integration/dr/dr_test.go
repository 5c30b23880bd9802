// Package dr proves disaster recovery of the hub on real API servers: the
// hub's API server and etcd are destroyed, a new empty one is started, what
// Git holds (ClusterIssuer, registrations) is applied and the CA key pair
// restored as External Secrets would, and a new replica carries on without
// issuing a single certificate again, counted by the serials every
// downstream Secret carried.
package dr

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// certhubBinary is the certhub binary the replicas run.
var certhubBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "certhub-dr-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	certhubBinary = filepath.Join(dir, "certhub")
	if out, err := exec.Command("go", "build", "-o", certhubBinary, "github.com/certhub/certhub/cmd/certhub").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building certhub: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// readyOnReplica waits until r's metrics show n Certificates Ready: the
// new replica has decided every one of them.
func readyOnReplica(t *testing.T, r *fleet.Replica, n int) {
	t.Helper()
	var last float64
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		m, err := r.Metrics(ctx)
		if err != nil {
			return false, nil
		}
		last = m.Sum("certhub_certificates", map[string]string{"ready": "True"})
		return last == float64(n), nil
	})
	if err != nil {
		t.Fatalf("%s: %v Certificates Ready in its metrics, want %d", r, last, n)
	}
}

func TestHubRebuiltFromGitIssuesNothingAgain(t *testing.T) {
	ctx := context.Background()
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Stop() })
	if _, err := bed.CreateCAIssuer(ctx, "platform-ca"); err != nil {
		t.Fatal(err)
	}
	var registrations []*corev1.Secret
	for _, cp := range bed.Downstreams {
		s, err := bed.Register(ctx, cp)
		if err != nil {
			t.Fatal(err)
		}
		registrations = append(registrations, s.DeepCopy())
	}
	kubeconfig, err := bed.Hub.WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	audit := fleet.StartAuditor(t, bed.Downstreams)
	cfg := fleet.Config{Binary: certhubBinary, Kubeconfig: kubeconfig, HubNamespace: bed.HubNamespace(), ArgoNamespace: bed.ArgoNamespace()}
	before := cfg.Start(t, "replica-0")

	const perCluster = 10
	var crts []client.ObjectKey
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, "apps")
		for i := range perCluster {
			crt := fixture.Certificate("apps", fmt.Sprintf("svc-%02d", i), "platform-ca", fixture.WithNames("", fmt.Sprintf("svc-%02d.apps.example.com", i)))
			if err := cp.Client.Create(ctx, crt); err != nil {
				t.Fatal(err)
			}
			crts = append(crts, client.ObjectKeyFromObject(crt))
		}
	}
	for _, cp := range bed.Downstreams {
		for _, key := range crts[:perCluster] {
			fixture.WaitReady(t, cp.Client, key)
		}
	}
	readyOnReplica(t, before, 2*perCluster)
	audit.WaitCaughtUp(t, bed.Downstreams, fixture.WaitTimeout)
	signed := audit.Issuances()
	if signed != 2*perCluster {
		t.Fatalf("%d certificates issued before the disaster, want %d", signed, 2*perCluster)
	}

	// What survives the hub: Git (the ClusterIssuer, the registrations) and
	// the secret manager (the CA key pair, restored by External Secrets).
	ci := &cmapi.ClusterIssuer{}
	if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Name: "platform-ca"}, ci); err != nil {
		t.Fatal(err)
	}
	caKeyPair := &corev1.Secret{}
	if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: bed.HubNamespace(), Name: ci.Spec.CA.SecretName}, caKeyPair); err != nil {
		t.Fatal(err)
	}
	ci.Status = cmapi.IssuerStatus{}

	// The disaster: the replica and the hub's API server and etcd are gone.
	if err := before.Stop(syscall.SIGKILL); err != nil {
		t.Logf("stopping %s: %v", before, err)
	}
	if err := bed.RebuildHub(ctx); err != nil {
		t.Fatal(err)
	}
	rebuilt := time.Now()
	for _, obj := range append([]client.Object{fixture.Restorable(caKeyPair), fixture.Restorable(ci)}, func() []client.Object {
		var out []client.Object
		for _, s := range registrations {
			out = append(out, fixture.Restorable(s))
		}
		return out
	}()...) {
		if err := bed.Hub.Client.Create(ctx, obj); err != nil {
			t.Fatalf("restoring %s %s: %v", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	cfg.Kubeconfig, err = bed.Hub.WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	after := cfg.Start(t, "replica-1")
	readyOnReplica(t, after, 2*perCluster)
	t.Logf("the rebuilt hub's replica decided every Certificate Ready %s after the empty hub was up (polled every 250ms; not a benchmark)",
		time.Since(rebuilt).Round(100*time.Millisecond))

	// Steady: a quiet spell in which nothing is issued again.
	fixture.ExpectStable(t, bed.Downstreams[0].Client, nil, 5*time.Second, audit.Issuances)
	audit.WaitCaughtUp(t, bed.Downstreams, fixture.WaitTimeout)
	if got := audit.Issuances(); got != signed {
		t.Errorf("the rebuilt hub issued %d certificates again, want 0 (serials seen: %d before, %d after)", got-signed, signed, got)
	}
	for _, cp := range bed.Downstreams {
		for _, key := range crts[:perCluster] {
			if n := audit.Serials(cp.Name, key.Namespace, key.Name+"-tls"); n != 1 {
				t.Errorf("%s/%s: its Secret carried %d certificates, want 1", cp.Name, key, n)
			}
		}
	}
	// The record of what the hub signed is rebuilt from what downstream
	// holds: every certificate, once, as Rebuilt.
	var entries []issued.Entry
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		list := &corev1.ConfigMapList{}
		if err := bed.Hub.Client.List(ctx, list, client.InNamespace(bed.HubNamespace()), client.MatchingLabels{issued.RecordLabel: issued.RecordChunk}); err != nil {
			return false, nil
		}
		entries, _ = issued.Entries(list.Items)
		return len(entries) >= 2*perCluster, nil
	})
	if err != nil || len(entries) != 2*perCluster {
		t.Fatalf("the rebuilt record holds %d entries, want %d", len(entries), 2*perCluster)
	}
	for _, e := range entries {
		if e.Why != issued.WhyRebuilt {
			t.Errorf("%s/%s/%s serial %s recorded as %q, want %q", e.Cluster, e.Namespace, e.Name, e.Serial, e.Why, issued.WhyRebuilt)
		}
	}
	audit.Check(t)
}
