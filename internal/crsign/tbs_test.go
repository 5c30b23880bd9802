package crsign_test

import (
	"bytes"
	"context"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/crsign"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// replica is one reconcile of cr in cluster clusterName by a fresh
// reconciler over c, the budget admitting everything.
func replica(t *testing.T, c client.Client, resolver *issuers.Resolver, clusterName multicluster.ClusterName, cr *cmapi.CertificateRequest) (reconcile.Result, error) {
	t.Helper()
	return reconcileOnce(t, fixture.NewFakeCluster(c), crsign.Options{Issuers: resolver, Policy: fakePolicy{}, Budget: fakeBudget{}}, clusterName, cr)
}

// A replica that dies between signing and writing the status (here: its
// status write fails) and the replica that then finishes the request sign
// the same certificate: the same to-be-signed bytes, serial and validity.
func TestEveryReplicaSignsTheSameCertificate(t *testing.T) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	cr := request(t, "ca", key)
	cr.UID = "uid-1"
	condition(cmapi.CertificateRequestConditionApproved)(cr)
	resolver, _ := hubWithIssuers(t)
	store := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(cr).WithStatusSubresource(&cmapi.CertificateRequest{}).Build()
	var lost []byte // the status the dying replica tried to write
	dying := interceptor.NewClient(store, interceptor.Funcs{
		SubResourceUpdate: func(_ context.Context, _ client.Client, _ string, obj client.Object, _ ...client.SubResourceUpdateOption) error {
			if cr, ok := obj.(*cmapi.CertificateRequest); ok {
				lost = cr.Status.Certificate
			}
			return errors.New("killed")
		},
	})
	if _, err := replica(t, dying, resolver, "east", cr); err == nil || lost == nil {
		t.Fatalf("the first replica signed %t and its lost write says %v", lost != nil, err)
	}
	if _, err := replica(t, store, resolver, "east", cr); err != nil {
		t.Fatal(err)
	}
	got := &cmapi.CertificateRequest{}
	if err := store.Get(context.Background(), client.ObjectKeyFromObject(cr), got); err != nil {
		t.Fatal(err)
	}
	first, err := pki.DecodeX509CertificateBytes(lost)
	if err != nil {
		t.Fatal(err)
	}
	second, err := pki.DecodeX509CertificateBytes(got.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.RawTBSCertificate, second.RawTBSCertificate) {
		t.Errorf("two certificates for one request: serial %s %s→%s, then serial %s %s→%s",
			first.SerialNumber.Text(16), first.NotBefore, first.NotAfter, second.SerialNumber.Text(16), second.NotBefore, second.NotAfter)
	}
	if second.SerialNumber.Sign() <= 0 || second.SerialNumber.BitLen() > 159 {
		t.Errorf("serial %s: want positive, at most 159 bits", second.SerialNumber.Text(16))
	}
}

// The serial is the request's own: another cluster, UID or CSR has
// another; the validity starts at the later of creation and approval and
// lasts the request's duration; an approval far ahead of the hub's clock
// waits, never signed valid from the future.
func TestSerialAndValidityComeFromTheRequest(t *testing.T) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	resolver, _ := hubWithIssuers(t)
	approve := func(cr *cmapi.CertificateRequest, at time.Time) {
		cr.Status.Conditions = append(cr.Status.Conditions, cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionApproved,
			Status: cmmeta.ConditionTrue, Reason: "test", LastTransitionTime: &metav1.Time{Time: at}})
	}
	mine, theirs := request(t, "ca", key), request(t, "ca", otherKey) // one CSR each
	sign := func(t *testing.T, cluster multicluster.ClusterName, uid types.UID, of *cmapi.CertificateRequest, approvedAt time.Time) (*cmapi.CertificateRequest, reconcile.Result) {
		t.Helper()
		cr := of.DeepCopy()
		cr.UID = uid
		approve(cr, approvedAt)
		store := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(cr).WithStatusSubresource(&cmapi.CertificateRequest{}).Build()
		res, err := replica(t, store, resolver, cluster, cr)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Get(context.Background(), client.ObjectKeyFromObject(cr), cr); err != nil {
			t.Fatal(err)
		}
		return cr, res
	}
	serial := func(t *testing.T, cr *cmapi.CertificateRequest) *big.Int {
		t.Helper()
		c, err := pki.DecodeX509CertificateBytes(cr.Status.Certificate)
		if err != nil {
			t.Fatalf("not signed: %v (%+v)", err, cr.Status.Conditions)
		}
		return c.SerialNumber
	}

	base, _ := sign(t, "east", "uid-1", mine, now)
	for _, tc := range []struct {
		name    string
		cluster multicluster.ClusterName
		uid     types.UID
		of      *cmapi.CertificateRequest
	}{
		{"another cluster", "west", "uid-1", mine},
		{"another UID (the same name re-created)", "east", "uid-2", mine},
		{"another CSR", "east", "uid-1", theirs},
	} {
		other, _ := sign(t, tc.cluster, tc.uid, tc.of, now)
		if serial(t, other).Cmp(serial(t, base)) == 0 {
			t.Errorf("%s: the same serial %s", tc.name, serial(t, base).Text(16))
		}
	}
	again, _ := sign(t, "east", "uid-1", mine, now)
	if serial(t, again).Cmp(serial(t, base)) != 0 {
		t.Error("the same request signed twice has two serials")
	}

	for _, tc := range []struct {
		name       string
		approvedAt time.Time
		notBefore  time.Time // zero: not signed
	}{
		{"approved after creation", now.Add(90*time.Second + 400*time.Millisecond), now.Add(90 * time.Second)},
		{"approved 'before' creation", now.Add(-time.Hour), now},
		{"approved a little ahead of the hub's clock", now.Add(2 * time.Minute), now.Add(2 * time.Minute)},
		{"approved far ahead of the hub's clock", now.Add(time.Hour), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr, res := sign(t, "east", "uid-1", mine, tc.approvedAt)
			if tc.notBefore.IsZero() {
				if len(cr.Status.Certificate) > 0 {
					t.Fatal("signed a certificate valid from the future")
				}
				ready := apiutil.GetCertificateRequestCondition(cr, cmapi.CertificateRequestConditionReady)
				if ready == nil || ready.Reason != cmapi.CertificateRequestReasonPending || !strings.Contains(ready.Message, "ahead of the hub's clock") || res.RequeueAfter <= 0 {
					t.Errorf("Ready %+v, requeue %s; want Pending saying why, and a requeue", ready, res.RequeueAfter)
				}
				return
			}
			c, err := pki.DecodeX509CertificateBytes(cr.Status.Certificate)
			if err != nil {
				t.Fatalf("not signed: %v (%+v)", err, cr.Status.Conditions)
			}
			if !c.NotBefore.Equal(tc.notBefore) || c.NotAfter.Sub(c.NotBefore) != cr.Spec.Duration.Duration {
				t.Errorf("valid %s→%s; want from %s for %s", c.NotBefore, c.NotAfter, tc.notBefore, cr.Spec.Duration.Duration)
			}
		})
	}
}
