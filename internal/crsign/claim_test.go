package crsign_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/crsign"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issuance"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// signer runs one reconciler (a replica) over c, with a budget that
// answers wait.
func signer(t *testing.T, c client.Client, resolver *issuance.Resolver, wait time.Duration) (func(*cmapi.CertificateRequest) error, *fixture.FakeCluster) {
	t.Helper()
	fc := fixture.NewFakeCluster(c)
	r, err := crsign.NewReconciler(crsign.Options{Issuers: resolver, Fence: fence.Static{Identity: "replica"}, Policy: fakePolicy{},
		Budget: fakeBudget{wait: wait}, Registerer: prometheus.NewRegistry()}, clocktesting.NewFakeClock(now),
		func(context.Context, multicluster.ClusterName) (cluster.Cluster, error) { return fc, nil })
	if err != nil {
		t.Fatal(err)
	}
	return func(cr *cmapi.CertificateRequest) error {
		_, err := r.Reconcile(context.Background(), mcreconcile.Request{ClusterName: "east", Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)}})
		return err
	}, fc
}

// A replica that dies between signing and writing the status (here: its
// status write fails) leaves its claim; the replica that finishes the
// request signs the same certificate — serial, validity — without asking
// the budget again. Every serial the CA signed for the request is the one
// the request ends with.
func TestClaimMakesOneCertificatePerRequest(t *testing.T) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	cr := request(t, "ca", key)
	cr.UID = "uid-1"
	condition(cmapi.CertificateRequestConditionApproved)(cr)
	resolver, _ := hubWithIssuers(t)
	store := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(cr).WithStatusSubresource(&cmapi.CertificateRequest{}).Build()

	// The first replica: the status write never lands.
	dying := interceptor.NewClient(store.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return errors.New("killed")
		},
	})
	first, _ := signer(t, dying, resolver, 0)
	if err := first(cr); err == nil {
		t.Fatal("the first replica's status write failed, yet Reconcile says nothing")
	}
	got := &cmapi.CertificateRequest{}
	if err := store.Get(context.Background(), client.ObjectKeyFromObject(cr), got); err != nil {
		t.Fatal(err)
	}
	claimValue := got.Annotations[hubapi.SigningClaimAnnotation]
	if claimValue == "" || len(got.Status.Certificate) > 0 {
		t.Fatalf("after the first replica: claim %q, certificate written %t; want a claim and no certificate", claimValue, len(got.Status.Certificate) > 0)
	}

	// The successor, whose budget would make a new issuance wait.
	next, fc := signer(t, store, resolver, time.Hour)
	if err := next(cr); err != nil {
		t.Fatal(err)
	}
	if err := store.Get(context.Background(), client.ObjectKeyFromObject(cr), got); err != nil {
		t.Fatal(err)
	}
	if apiutil.CertificateRequestReadyReason(got) != cmapi.CertificateRequestReasonIssued {
		t.Fatalf("Ready %q; want Issued (a valid claim was admitted before)", apiutil.CertificateRequestReadyReason(got))
	}
	leaf, err := pki.DecodeX509CertificateBytes(got.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(claimValue, ".")
	if leaf.SerialNumber.Text(16) != parts[0] {
		t.Errorf("serial %s; the claim says %s", leaf.SerialNumber.Text(16), parts[0])
	}
	if got := []string{strconv.FormatInt(leaf.NotBefore.Unix(), 10), strconv.FormatInt(leaf.NotAfter.Unix(), 10)}; got[0] != parts[1] || got[1] != parts[2] {
		t.Errorf("validity %v; the claim says %v", got, parts[1:3])
	}
	if got.Annotations[hubapi.SigningClaimAnnotation] != claimValue {
		t.Error("the successor rewrote the claim")
	}
	if events := drain(fc); strings.Contains(events, crsign.ReasonClaimIgnored) {
		t.Errorf("the replica's own claim was ignored: %s", events)
	}
}

// A claim a downstream user wrote, edited or copied from another request
// chooses nothing: it is reported and replaced by the hub's own, whose
// serial the certificate carries; the budget is asked as for any request.
func TestClaimWithoutAValidSealIsIgnored(t *testing.T) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	resolver, _ := hubWithIssuers(t)
	// A claim the hub sealed for another request (UID uid-other).
	other := request(t, "ca", key)
	other.UID = "uid-other"
	condition(cmapi.CertificateRequestConditionApproved)(other)
	otherStore := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(other).WithStatusSubresource(&cmapi.CertificateRequest{}).Build()
	sign, _ := signer(t, otherStore, resolver, 0)
	if err := sign(other); err != nil {
		t.Fatal(err)
	}
	if err := otherStore.Get(context.Background(), client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	copied := other.Annotations[hubapi.SigningClaimAnnotation]
	parts := strings.Split(copied, ".")
	for _, tc := range []struct{ name, claim string }{
		{"copied from another request", copied},
		{"serial edited", "1." + strings.Join(parts[1:], ".")},
		{"validity edited", parts[0] + "." + parts[1] + ".4102444800." + parts[3]},
		{"garbage", "please-sign-serial-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr := request(t, "ca", key)
			cr.UID = types.UID("uid-1")
			cr.Annotations = map[string]string{hubapi.SigningClaimAnnotation: tc.claim}
			condition(cmapi.CertificateRequestConditionApproved)(cr)
			store := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(cr).WithStatusSubresource(&cmapi.CertificateRequest{}).Build()

			waiting, fc := signer(t, store, resolver, time.Hour)
			if err := waiting(cr); err != nil {
				t.Fatal(err)
			}
			got := &cmapi.CertificateRequest{}
			if err := store.Get(context.Background(), client.ObjectKeyFromObject(cr), got); err != nil {
				t.Fatal(err)
			}
			if len(got.Status.Certificate) > 0 {
				t.Fatal("signed past the budget on a claim the hub did not seal")
			}
			if events := drain(fc); !strings.Contains(events, crsign.ReasonClaimIgnored) {
				t.Errorf("Events %q; want %s", events, crsign.ReasonClaimIgnored)
			}

			admitted, _ := signer(t, store, resolver, 0)
			if err := admitted(cr); err != nil {
				t.Fatal(err)
			}
			if err := store.Get(context.Background(), client.ObjectKeyFromObject(cr), got); err != nil {
				t.Fatal(err)
			}
			leaf, err := pki.DecodeX509CertificateBytes(got.Status.Certificate)
			if err != nil {
				t.Fatalf("not signed: %v", err)
			}
			mine := got.Annotations[hubapi.SigningClaimAnnotation]
			if mine == tc.claim || !strings.HasPrefix(mine, leaf.SerialNumber.Text(16)+".") {
				t.Errorf("claim %q, serial %s: want the hub's own claim, naming the certificate's serial", mine, leaf.SerialNumber.Text(16))
			}
			if leaf.SerialNumber.Text(16) == parts[0] || leaf.SerialNumber.Text(16) == "1" || leaf.NotAfter.Year() >= 2100 {
				t.Errorf("the certificate took a serial or validity from the bad claim: %s, %s", leaf.SerialNumber.Text(16), leaf.NotAfter)
			}
		})
	}
}
