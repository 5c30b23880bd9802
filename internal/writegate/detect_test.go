package writegate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/certhub/certhub/internal/writegate"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

var now = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func TestModeOf(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		mode   writegate.Mode
		valid  bool
		writes bool
	}{
		{labels: nil, mode: writegate.Issue, valid: true, writes: true},
		{labels: map[string]string{"certhub.io/mode": ""}, mode: writegate.Issue, valid: true, writes: true},
		{labels: map[string]string{"certhub.io/mode": "issue"}, mode: writegate.Issue, valid: true, writes: true},
		{labels: map[string]string{"certhub.io/mode": "observe"}, mode: writegate.Observe, valid: true},
		{labels: map[string]string{"certhub.io/mode": "off"}, mode: writegate.Off, valid: true},
		{labels: map[string]string{"certhub.io/mode": "force-issue"}, mode: writegate.ForceIssue, valid: true, writes: true},
		{labels: map[string]string{"certhub.io/mode": "external"}, mode: writegate.External, valid: true},
		// A typo never writes.
		{labels: map[string]string{"certhub.io/mode": "isue"}, mode: writegate.Observe},
		{labels: map[string]string{"certhub.io/mode": "Issue"}, mode: writegate.Observe},
	} {
		m, valid := writegate.ModeOf(tc.labels)
		if signs := tc.writes || tc.mode == writegate.External; m.Signs() != signs {
			t.Errorf("ModeOf(%v).Signs() = %t; want %t", tc.labels, m.Signs(), signs)
		}
		if m != tc.mode || valid != tc.valid || m.Writes() != tc.writes {
			t.Errorf("ModeOf(%v) = %s, %t (writes %t); want %s, %t (writes %t)", tc.labels, m, valid, m.Writes(), tc.mode, tc.valid, tc.writes)
		}
	}
}

func TestLeaseHeld(t *testing.T) {
	for name, tc := range map[string]struct {
		lease *coordinationv1.Lease
		held  bool
	}{
		"renewed within its duration":    {lease: fixture.CertManagerLease("cm-1", now.Add(-59*time.Second), 60), held: true},
		"renewed one duration ago":       {lease: fixture.CertManagerLease("cm-1", now.Add(-60*time.Second), 60)},
		"expired long ago":               {lease: fixture.CertManagerLease("cm-1", now.Add(-time.Hour), 60)},
		"released (no holder)":           {lease: fixture.CertManagerLease("", now, 60)},
		"renewed in the future (skewed)": {lease: fixture.CertManagerLease("cm-1", now.Add(time.Minute), 15), held: true},
		"no duration: cert-manager's 60 s default": {lease: func() *coordinationv1.Lease {
			l := fixture.CertManagerLease("cm-1", now.Add(-50*time.Second), 0)
			l.Spec.LeaseDurationSeconds = nil
			return l
		}(), held: true},
		"acquired, never renewed": {lease: func() *coordinationv1.Lease {
			l := fixture.CertManagerLease("cm-1", now.Add(-10*time.Second), 15)
			l.Spec.RenewTime = nil
			return l
		}(), held: true},
	} {
		t.Run(name, func(t *testing.T) {
			held, msg := writegate.LeaseHeld(tc.lease, now)
			if held != tc.held {
				t.Fatalf("held = %t (%q); want %t", held, msg, tc.held)
			}
			if held && msg == "" {
				t.Error("a held Lease must say who holds it")
			}
		})
	}
}

func TestCertManagerWrite(t *testing.T) {
	since := now.Add(-30 * time.Second)
	entry := func(manager string, at time.Time) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Time: &metav1.Time{Time: at}}
	}
	for name, tc := range map[string]struct {
		fields  []metav1.ManagedFieldsEntry
		manager string
	}{
		"issuing after since":           {fields: []metav1.ManagedFieldsEntry{entry("cert-manager-certificates-issuing", now)}, manager: "cert-manager-certificates-issuing"},
		"in since's second":             {fields: []metav1.ManagedFieldsEntry{entry("cert-manager-certificates-readiness", since.Truncate(time.Second))}, manager: "cert-manager-certificates-readiness"},
		"before since":                  {fields: []metav1.ManagedFieldsEntry{entry("cert-manager-certificates-trigger", since.Add(-time.Second))}},
		"the hub's own writes":          {fields: []metav1.ManagedFieldsEntry{entry("certhub", now)}},
		"argocd applying the spec":      {fields: []metav1.ManagedFieldsEntry{entry("argocd-controller", now)}},
		"no time":                       {fields: []metav1.ManagedFieldsEntry{{Manager: "cert-manager-certificates-issuing"}}},
		"an old and a new cert-manager": {fields: []metav1.ManagedFieldsEntry{entry("cert-manager-x", since.Add(-time.Hour)), entry("cert-manager-y", now)}, manager: "cert-manager-y"},
	} {
		t.Run(name, func(t *testing.T) {
			m, _, ok := writegate.CertManagerWrite(tc.fields, since)
			if ok != (tc.manager != "") || m != tc.manager {
				t.Errorf("= %q, %t; want %q", m, ok, tc.manager)
			}
		})
	}
}

// forbid makes c refuse reads of the kinds named, as RBAC does.
func forbid(kinds ...string) interceptor.Funcs {
	denied := func(obj runtime.Object) error {
		for _, k := range kinds {
			switch obj.(type) {
			case *coordinationv1.Lease:
				if k == "Lease" {
					return apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", errors.New("no"))
				}
			case *metav1.PartialObjectMetadataList:
				if k == "Certificate" {
					return apierrors.NewForbidden(schema.GroupResource{Group: "cert-manager.io", Resource: "certificates"}, "", errors.New("no"))
				}
			}
		}
		return nil
	}
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := denied(obj); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := denied(list); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
	}
}

func TestLook(t *testing.T) {
	since := now.Add(-30 * time.Second)
	written := fixture.Certificate("shop", "web", "ca")
	fixture.WrittenBy(written, "cert-manager-certificates-readiness", now.Add(-time.Second))
	quiet := fixture.Certificate("shop", "api", "ca")
	fixture.WrittenBy(quiet, "cert-manager-certificates-issuing", now.Add(-time.Hour))
	fixture.WrittenBy(quiet, "certhub", now)
	// A tenant's kubectl --field-manager=cert-manager-certificates-issuing
	// in its own namespace looks exactly like cert-manager's write.
	spoofed := fixture.Certificate("tenant", "mine", "ca")
	fixture.WrittenBy(spoofed, "cert-manager-certificates-issuing", now)
	for name, tc := range map[string]struct {
		objs    []client.Object
		forbid  []string
		active  bool
		held    []string // namespaces whose status writes are held back
		skipped int
	}{
		"nothing":                            {},
		"the Lease held":                     {objs: []client.Object{fixture.CertManagerLease("cm-1", now, 60)}, active: true},
		"the Lease expired, nothing written": {objs: []client.Object{fixture.CertManagerLease("cm-1", now.Add(-2*time.Minute), 60), quiet}},
		"the Lease released, a status written by cert-manager since: its namespace only": {
			objs: []client.Object{fixture.CertManagerLease("", now, 60), quiet, written}, held: []string{"shop"}},
		"the Lease forbidden (namespaced registration), a write seen: its namespace only": {
			objs: []client.Object{written}, forbid: []string{"Lease"}, held: []string{"shop"}, skipped: 1},
		"a tenant writing as cert-manager never holds back the cluster": {
			objs: []client.Object{fixture.CertManagerLease("", now, 60), spoofed, quiet}, held: []string{"tenant"}},
		"the Lease held and a write seen": {
			objs: []client.Object{fixture.CertManagerLease("cm-1", now, 60), written}, active: true, held: []string{"shop"}},
		"the Lease forbidden, Certificates forbidden": {
			objs: []client.Object{fixture.CertManagerLease("cm-1", now, 60), written}, forbid: []string{"Lease", "Certificate"}, skipped: 2},
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(tc.objs...).WithInterceptorFuncs(forbid(tc.forbid...)).WithReturnManagedFields().Build()
			a, err := writegate.Look(context.Background(), c, writegate.DefaultLeaseNamespace, since, now)
			if err != nil {
				t.Fatal(err)
			}
			if a.Active() != tc.active || len(a.Skipped()) != tc.skipped {
				t.Errorf("active %t (%q), skipped %v; want active %t, %d skipped", a.Active(), a.Message(), a.Skipped(), tc.active, tc.skipped)
			}
			if a.Active() && a.Message() == "" {
				t.Error("an active cert-manager must be explained")
			}
			held := a.Held()
			if len(held) != len(tc.held) {
				t.Errorf("held %v; want %v", held, tc.held)
			}
			for _, ns := range tc.held {
				if !strings.Contains(held[ns], "named like cert-manager's") {
					t.Errorf("namespace %s held %q; want it held, explained", ns, held[ns])
				}
			}
		})
	}
}
