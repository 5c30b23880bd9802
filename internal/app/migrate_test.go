package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/writegate"
)

// reportObject is the ConfigMap the gate publishes for r.
func reportObject(t *testing.T, r writegate.Report) *corev1.ConfigMap {
	t.Helper()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "certhub", Name: writegate.ReportName(r.Cluster),
		Labels: map[string]string{hubapi.MigrationReportLabel: "true"}}, Data: map[string]string{writegate.ReportKey: string(raw)}}
}

func migrationHub(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme, err := hub.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	objs = append(objs,
		reportObject(t, writegate.Report{Cluster: "legacy", Mode: writegate.Observe, By: "replica-0",
			Counts: map[writegate.Action]int{writegate.ActionAdopt: 1, writegate.ActionReissue: 1},
			Plan: []writegate.Verdict{
				{Namespace: "shop", Name: "web-00", Action: writegate.ActionAdopt, Adopting: true},
				{Namespace: "shop", Name: "web-40", Action: writegate.ActionReissue, Adopting: true, Reason: "IncorrectIssuer", Message: "Issuing certificate as the Secret cert-manager wrote was signed by another CA"},
			}}),
		reportObject(t, writegate.Report{Cluster: "prod-1", Mode: writegate.Issue, Conflict: true, Since: &since, By: "replica-1",
			Message: `cert-manager's leader-election Lease kube-system/cert-manager-controller is held by "cm-7"`}),
		// Not a report: ignored.
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "certhub", Name: "other", Labels: map[string]string{hubapi.MigrationReportLabel: "true"}}},
	)
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

func TestMigratePlan(t *testing.T) {
	hubc := migrationHub(t)
	for _, tc := range []struct {
		name string
		o    migrateOptions
		want []string
		err  string
	}{
		{name: "summary", o: migrateOptions{output: "table"},
			want: []string{"legacy    observe  false   -", "Adopt=1 Reissue=1", "prod-1    issue    false   ClusterConflict"}},
		{name: "one cluster's plan", o: migrateOptions{output: "table", cluster: "legacy"},
			want: []string{"cluster legacy: mode observe, writes false, by replica-0", "shop       web-00  Adopt    yes", "shop       web-40  Reissue  yes                IncorrectIssuer"}},
		{name: "a conflict says why", o: migrateOptions{output: "table", cluster: "prod-1"},
			want: []string{"ClusterConflict since 2026-12-04T10:00:00Z: cert-manager's leader-election Lease", "plan: -"}},
		{name: "json", o: migrateOptions{output: "json", cluster: "legacy"}, want: []string{`"action": "Reissue"`, `"adopting": true`}},
		{name: "a cluster the hub writes in has no plan", o: migrateOptions{output: "table", cluster: "east"}, err: `no migration report for cluster "east"`},
		{name: "unknown output", o: migrateOptions{output: "yaml"}, err: "unknown output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.namespace = "certhub"
			var out bytes.Buffer
			err := runMigratePlan(context.Background(), &out, hubc, tc.o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v; want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Columns compared word by word: the table's padding is tabwriter's.
			norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
			for _, w := range tc.want {
				if !strings.Contains(norm(out.String()), norm(w)) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// `certhub status` shows each cluster's mode, and ClusterConflict with its
// reason from the hub's report.
func TestStatusShowsModeAndConflict(t *testing.T) {
	var objs []client.Object
	for cluster, mode := range map[string]string{"legacy": "observe", "prod-1": "issue", "east": "", "typo": "obsrve"} {
		s, err := inventory.NewSecret("argocd", "cluster-"+cluster, cluster, "https://127.0.0.1:1", inventory.ClusterConfig{BearerToken: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if mode != "" {
			s.Labels[hubapi.ModeLabel] = mode
		}
		objs = append(objs, s)
	}
	hubc := migrationHub(t, objs...)
	scheme, err := hub.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := statusRows(context.Background(), hubc, scheme, statusOptions{namespace: "certhub", secretNamespace: "argocd", timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Cluster] = r.Mode
		if (r.Conflict != "") != (r.Cluster == "prod-1") {
			t.Errorf("%s: conflict %q", r.Cluster, r.Conflict)
		}
	}
	want := map[string]string{"legacy": "observe", "prod-1": "issue", "east": "issue", "typo": "observe?"}
	for c, m := range want {
		if got[c] != m {
			t.Errorf("%s: mode %q; want %q", c, got[c], m)
		}
	}
	var out bytes.Buffer
	if err := printStatus(&out, rows, statusOptions{output: "table"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "issue/ClusterConflict") {
		t.Errorf("table lacks the conflict:\n%s", out.String())
	}
}

// `certhub status --cluster` counts the requests the hub signs there, by
// their Ready reason; cert-manager's own are not counted.
func TestStatusCountsRequestsForTheHub(t *testing.T) {
	scheme, err := hub.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cr := func(name, group, reason string) *cmapi.CertificateRequest {
		r := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: name},
			Spec: cmapi.CertificateRequestSpec{IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: cmapi.ClusterIssuerKind, Group: group}}}
		if reason != "" {
			r.Status.Conditions = []cmapi.CertificateRequestCondition{{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionFalse, Reason: reason}}
		}
		return r
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		cr("a", hubapi.GroupName, cmapi.CertificateRequestReasonIssued), cr("b", hubapi.GroupName, cmapi.CertificateRequestReasonIssued),
		cr("c", hubapi.GroupName, cmapi.CertificateRequestReasonFailed), cr("d", hubapi.GroupName, ""),
		cr("e", "cert-manager.io", cmapi.CertificateRequestReasonIssued),
	).Build()
	row := &ClusterStatus{}
	countRequests(context.Background(), c, nil, row)
	if got, want := requestsLine(row.Requests), "CertificateRequests signed by the hub (issuerRef.group certhub.io): 1 Failed, 2 Issued, 1 Waiting"; got != want {
		t.Errorf("%q; want %q", got, want)
	}
}
