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
	"github.com/certhub/certhub/internal/discovery"
	"github.com/certhub/certhub/internal/inventory"
)

// `certhub status --discovered` lists the registered clusters' reports,
// filtered by cluster and managed, sorted by expiry or cluster; a cluster
// without a report is named, a report of an unregistered one is not shown.
func TestStatusDiscovered(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	var objs []client.Object
	for _, cluster := range []string{"east", "west", "north"} {
		s, err := inventory.NewSecret("argocd", "cluster-"+cluster, cluster, "https://127.0.0.1:1", inventory.ClusterConfig{BearerToken: "t"})
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, s)
	}
	report := func(r discovery.Report) client.Object {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "certhub", Name: discovery.ReportName(r.Cluster),
			Labels: map[string]string{hubapi.DiscoveryReportLabel: "true"}}, Data: map[string]string{discovery.ReportKey: string(raw)}}
	}
	rec := func(secret string, managed discovery.Managed, notAfter time.Time, problems ...discovery.Problem) discovery.Record {
		return discovery.Record{Namespace: "apps", Secret: secret, Managed: managed, NotAfter: notAfter, KeyAlgorithm: "RSA", KeySize: 1024, Problems: problems}
	}
	objs = append(objs,
		report(discovery.Report{Cluster: "east", Synced: true, Total: 2, Certificates: []discovery.Record{
			rec("hub", discovery.ManagedByCerthub, now.Add(60*24*time.Hour)),
			// Reported before it expired: --discovered says Expired now.
			rec("old", discovery.ManagedByNone, now.Add(-time.Hour), discovery.ProblemWeakKey),
		}}),
		report(discovery.Report{Cluster: "west", Synced: true, Total: 1, Certificates: []discovery.Record{
			rec("cm", discovery.ManagedByCertManager, now.Add(24*time.Hour)),
		}}),
		report(discovery.Report{Cluster: "gone", Synced: true, Total: 1, Certificates: []discovery.Record{rec("x", discovery.ManagedByNone, now)}}),
	)
	hub := fake.NewClientBuilder().WithObjects(objs...).Build()
	o := statusOptions{namespace: "certhub", secretNamespace: "argocd", managed: managedAll, sort: "expiry"}
	rows := func(o statusOptions) []string {
		t.Helper()
		s, err := collectDiscovered(context.Background(), hub, o, now)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range s.Certificates {
			out = append(out, r.Cluster+"/"+r.Secret)
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		cluster, manage string
		sort            string
		want            string
	}{
		{name: "all by expiry", want: "east/old west/cm east/hub"},
		{name: "by cluster", sort: "cluster", want: "east/hub east/old west/cm"},
		{name: "unmanaged", manage: managedUnmanaged, want: "east/old"},
		{name: "managed", manage: managedAny, want: "west/cm east/hub"},
		{name: "cert-manager's", manage: "cert-manager", want: "west/cm"},
		{name: "one cluster", cluster: "west", want: "west/cm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := o
			if tc.cluster != "" {
				o.cluster = tc.cluster
			}
			if tc.manage != "" {
				o.managed = tc.manage
			}
			if tc.sort != "" {
				o.sort = tc.sort
			}
			if got := strings.Join(rows(o), " "); got != tc.want {
				t.Errorf("rows %q, want %q", got, tc.want)
			}
		})
	}
	s, err := collectDiscovered(context.Background(), hub, o, now)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printDiscovered(&out, s, "table", now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"expired 1h ago", "WeakKey,Expired", "RSA-1024", "no discovery report yet (not engaged, or discovery is off): north"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := collectDiscovered(context.Background(), hub, statusOptions{namespace: "certhub", secretNamespace: "argocd", managed: "mine"}, now); err == nil {
		t.Error("--managed mine was accepted")
	}
}
