package shard

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// With AwaitRegistrations, a replica writes no Lease — neither its peer
// Lease, which would have its peers hand it fences, nor a fence — until
// the provider says the registrations are in; then it joins and decides
// on all of them at once.
func TestCoordinatorAwaitsRegistrations(t *testing.T) {
	h := newHarness(t, "r0", func(o *Options) { o.AwaitRegistrations = true })
	var synced, early atomic.Bool
	h.cs.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if (a.GetVerb() == "create" || a.GetVerb() == "update") && !synced.Load() {
			early.Store(true)
		}
		return false, nil, nil
	})
	var waiting atomic.Bool
	h.c.log = funcr.New(func(_, args string) {
		if strings.Contains(args, "waiting for the cluster registrations") {
			waiting.Store(true)
		}
	}, funcr.Options{})
	h.c.Register("east")

	ctx := h.run()
	poll := func(what string, cond func() bool) { t.Helper(); pollUntil(ctx, t, what, cond) }
	poll("waiting for the registrations", waiting.Load)
	if h.c.Ready() {
		t.Error("Ready before the registrations synced")
	}

	h.c.Register("west") // the rest of the provider's first pass
	synced.Store(true)
	h.c.RegistrationsSynced()
	h.c.RegistrationsSynced() // a second call is harmless
	poll("fences of both clusters held", func() bool {
		for _, name := range []string{"east", "west"} {
			l, err := h.cs.CoordinationV1().Leases(testNS).Get(ctx, leaseName(DefaultFencePrefix, name), metav1.GetOptions{})
			if apierrors.IsNotFound(err) || err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "r0" {
				return false
			}
		}
		return true
	})
	if early.Load() {
		t.Error("a Lease was written before the registrations synced")
	}
	if !h.c.Ready() {
		t.Error("not Ready after deciding")
	}
}
