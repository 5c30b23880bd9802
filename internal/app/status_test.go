package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/rotation"
	"github.com/certhub/certhub/internal/shard"
)

// `certhub status` names each cluster's owner with per-cluster fences and
// with --shard-buckets (where it used to show "-" for every cluster: owners
// were keyed by fence key and looked up by cluster name).
func TestStatusOwners(t *testing.T) {
	for _, buckets := range []int{0, 4} {
		scheme, err := hub.NewScheme()
		if err != nil {
			t.Fatal(err)
		}
		var objs []client.Object
		for _, cluster := range []string{"east", "west"} {
			s, err := inventory.NewSecret("argocd", "cluster-"+cluster, cluster, "https://127.0.0.1:1", inventory.ClusterConfig{BearerToken: "t"})
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, s)
			key := shard.FenceKey(cluster, buckets)
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "certhub-shard-" + key, Namespace: "certhub",
				Labels:      map[string]string{hubapi.LeaseKindLabel: "fence"},
				Annotations: map[string]string{hubapi.FenceKeyAnnotation: key}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("replica-" + cluster)}}
			if buckets > 0 {
				l.Annotations[hubapi.ShardBucketsAnnotation] = "4"
				if cluster == "west" && shard.FenceKey("west", 4) == shard.FenceKey("east", 4) {
					continue // same bucket, same holder as east
				}
			}
			objs = append(objs, l)
		}
		hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
		rows, err := statusRows(context.Background(), hub, scheme, statusOptions{namespace: "certhub", secretNamespace: "argocd", timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 2 {
			t.Fatalf("buckets %d: %d rows", buckets, len(rows))
		}
		for _, r := range rows {
			want := "replica-" + r.Cluster
			if buckets > 0 && shard.FenceKey("west", 4) == shard.FenceKey("east", 4) {
				want = "replica-east"
			}
			if r.Owner != want || r.State != StateUnreachable {
				t.Errorf("buckets %d: %s owner %q state %s, want %q (unreachable)", buckets, r.Cluster, r.Owner, r.State, want)
			}
		}
	}
}

// certhub status runs no exec plugin unless asked.
func TestStatusRunsNoExecPluginUnlessAsked(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	plugin := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &inventory.Cluster{Name: "e", Config: &rest.Config{Host: "https://127.0.0.1:1", ExecProvider: &clientcmdapi.ExecConfig{Command: plugin, APIVersion: "client.authentication.k8s.io/v1"}}}
	row := &ClusterStatus{}
	inspectCluster(context.Background(), runtime.NewScheme(), c, statusOptions{timeout: time.Second}, row)
	if row.State != StateExecSkipped {
		t.Errorf("state %q, want %s", row.State, StateExecSkipped)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the plugin ran without --allow-exec")
	}
}

// certhub status prints each CA rotation's line.
func TestRotationLines(t *testing.T) {
	s := &rotation.State{Issuer: "platform-ca", Next: "platform-ca-2026", Phase: rotation.Rolling, Wave: 1, Waves: 3, Moved: 340, Total: 1000}
	cm := corev1.ConfigMap{Data: map[string]string{}}
	for k, v := range s.Data() {
		cm.Data[k] = v
	}
	got := rotationLines([]corev1.ConfigMap{cm})
	if want := "CA rotation of ClusterIssuer platform-ca to Secret platform-ca-2026: Rolling, wave 2/3, 340/1000 re-issued"; len(got) != 1 || got[0] != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
