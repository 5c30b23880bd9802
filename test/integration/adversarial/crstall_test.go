package adversarial

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
)

// requestBound is how soon a neighbour's CertificateRequest must be signed
// next to a cluster that stalls its request writes.
const requestBound = 5 * time.Second

// hubRequest creates an approved CertificateRequest ns/name in c naming
// the hub's issuer through certhub.io, as istio-csr makes one.
func hubRequest(t *testing.T, c client.Client, ns, name string) *cmapi.CertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	crt := fixture.Certificate(ns, name, issuerName, fixture.WithIssuer(cmmeta.IssuerReference{Name: issuerName, Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}))
	cr, err := fixture.CertificateRequest(crt, name, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), cr); err != nil {
		t.Fatal(err)
	}
	fixture.SetRequestCondition(t, c, cr, cmapi.CertificateRequestConditionApproved, "test")
	return cr
}

// Issue 56, the CertificateRequest signer: a cluster whose API server (an
// HTTP proxy in front of a real one) serves reads but holds every
// CertificateRequest write until the hub's request timeout, with 12 hub
// requests to sign. The signer's workers take clusters in turn, one
// cluster in at most half of them (internal/fairqueue, as for
// Certificates), so the stalling cluster never holds more than 2 of the 4,
// and a neighbour's request is signed within requestBound meanwhile.
// Before, the signer had one FIFO queue and no cap: every worker waited on
// the stalling cluster.
func TestClusterStallingRequestWritesHoldsHalfTheSigners(t *testing.T) {
	spare := bed.Downstreams[2] // registered only through proxies
	var mu sync.Mutex
	held, most := 0, 0
	release := make(chan struct{})
	stall := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet || !strings.Contains(r.URL.Path, "/certificaterequests") {
			return false
		}
		mu.Lock()
		held++
		most = max(most, held)
		mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-release:
		}
		mu.Lock()
		held--
		mu.Unlock()
		http.Error(w, "stalled", http.StatusServiceUnavailable)
		return true
	}
	url, ca := startHTTPProxy(t, spare, nil, stall)
	t.Cleanup(func() { close(release) }) // before the proxy closes (cleanups run last first)

	fixture.EnsureNamespace(t, spare.Client, "crstall-tenant")
	for i := range 12 {
		hubRequest(t, spare.Client, "crstall-tenant", fmt.Sprintf("r%02d", i))
	}
	registerVia(t, spare, "adv-crstall", url, ca)
	// The hub is inside the backlog once the proxy holds its writes.
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return held >= 1, nil
	})
	if err != nil {
		t.Fatal("the hub never wrote to the stalling cluster")
	}
	healthy := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, healthy, "crstall-neighbour")
	var during []time.Duration
	for i := range 3 {
		start := time.Now()
		cr := hubRequest(t, healthy, "crstall-neighbour", fmt.Sprintf("n%d", i))
		fixture.WaitRequest(t, healthy, cr, "signed", func(cr *cmapi.CertificateRequest) bool {
			return apiutil.CertificateRequestReadyReason(cr) == cmapi.CertificateRequestReasonIssued && len(cr.Status.Certificate) > 0
		})
		took := time.Since(start)
		during = append(during, took)
		t.Logf("neighbour's request signed %s after it was created, next to a cluster holding its request writes (bound %s)", took.Round(time.Millisecond), requestBound)
		if took > requestBound {
			t.Errorf("the neighbour's request took %s, bound %s", took, requestBound)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("neighbour create→signed next to a stalling cluster: %s; request writes the stalling cluster held at once: at most %d", roundAll(during), most)
	if most > (4+1)/2 {
		t.Errorf("the stalling cluster held %d signing workers at once, want at most half of 4", most)
	}
}
