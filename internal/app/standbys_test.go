package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/drpair"
	"github.com/certhub/certhub/internal/inventory"
)

// `certhub status --standbys` lists each registered standby with its
// owner's last report: ready or not, how many, why not; one without a
// report yet is Unknown; with --cluster, the Certificates not ready.
func TestStatusStandbys(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	var objs []client.Object
	for name, primary := range map[string]string{"prod": "", "dr-eu": "prod", "dr-us": "prod"} {
		s, err := inventory.NewSecret("argocd", "cluster-"+name, name, "https://127.0.0.1:1", inventory.ClusterConfig{BearerToken: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if primary != "" {
			s.Labels[hubapi.StandbyForLabel] = primary
		}
		objs = append(objs, s)
	}
	st := drpair.Status{Standby: "dr-eu", Primary: "prod", By: "hub-1", At: now, SourceAt: now.Add(-2 * time.Minute), Selected: 3, ReadyCertificates: 2,
		Reasons: map[string]int{drpair.ReasonExpiresFirst: 1}, Problems: []drpair.Problem{{Namespace: "shop", Name: "web", Reason: drpair.ReasonExpiresFirst, Message: "due"}}}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "certhub", Name: drpair.StatusName("dr-eu"),
		Labels: map[string]string{hubapi.StandbyStatusLabel: "true"}}, Data: map[string]string{drpair.StatusKey: string(raw)}})
	hub := fake.NewClientBuilder().WithObjects(objs...).Build()
	cases := []struct {
		cluster string
		want    []string
		notWant []string
	}{
		{"", []string{"dr-eu  prod  False  2/3  2m0s ago  hub-1  ExpiresFirst=1", "dr-us  prod  Unknown"}, []string{"prod  prod", "REASON"}},
		{"dr-eu", []string{"dr-eu  prod  False", "shop  web  ExpiresFirst  due"}, []string{"dr-us"}},
	}
	for _, tc := range cases {
		t.Run("cluster="+tc.cluster, func(t *testing.T) {
			o := statusOptions{namespace: "certhub", secretNamespace: "argocd", output: "table", cluster: tc.cluster}
			rows, err := collectStandbys(context.Background(), hub, o)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := printStandbys(&out, rows, o, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(squeeze(out.String()), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(squeeze(out.String()), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// squeeze collapses runs of spaces to two, so rows read as columns.
func squeeze(s string) string {
	for strings.Contains(s, "   ") {
		s = strings.ReplaceAll(s, "   ", "  ")
	}
	return s
}
