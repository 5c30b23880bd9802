package failover

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
)

// requests is how many CertificateRequests are in flight when the signer
// dies (at most the hub's signing workers, so each is held mid-way).
const requests = 3

// The replica that owns the cluster signs three requests (approved by
// cert-manager's own approver) and is SIGKILLed while the proxy holds its
// status writes: it signed (its log says so), and no certificate reached
// the cluster. The other replica takes the cluster over and finishes them.
// Each request ends Issued with a certificate for its own key from the
// hub's CA, with the serial the dead replica signed; across both
// replicas' logs the CA signed exactly one serial per request (the dead
// replica's signature and the survivor's are the same certificate).
func TestOneSignaturePerRequestThroughSIGKILL(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub, down := env.Bed.Hub.Client, env.Bed.Downstreams[0].Client
	cfg := fleet.Config{Binary: env.Binary, Kubeconfig: env.Kubeconfig, HubNamespace: env.Bed.HubNamespace(), ArgoNamespace: env.Bed.ArgoNamespace()}
	replicas := map[string]*fleet.Replica{"hub-a": cfg.Start(t, "hub-a"), "hub-b": cfg.Start(t, "hub-b")}
	owner := waitOwner(ctx, t, hub, replicas)
	t.Logf("%s owns cluster %s", owner, clusterName)

	proxy.Hold(func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/certificaterequests/") && strings.HasSuffix(r.URL.Path, "/status")
	})
	defer proxy.Release()
	fixture.EnsureNamespace(t, down, "mesh")
	keys := map[string]any{}
	var crs []*cmapi.CertificateRequest
	for i := range requests {
		key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("workload-%d", i)
		crt := fixture.Certificate("mesh", name, hubIssuer, fixture.WithNames("", name+".mesh.svc"),
			fixture.WithIssuer(cmmeta.IssuerReference{Name: hubIssuer, Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}))
		cr, err := fixture.CertificateRequest(crt, name, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := down.Create(ctx, cr); err != nil {
			t.Fatal(err)
		}
		keys[name], crs = key.Public(), append(crs, cr)
	}

	// Mid-way: every request claimed and signed, its status write held.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		held, _ := proxy.Held()
		for _, cr := range crs {
			if !contains(held, "/certificaterequests/"+cr.Name+"/status") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		held, _ := proxy.Held()
		t.Fatalf("the owner's status writes were never all held: %v", held)
	}
	signedBefore := map[string][]string{} // by the owner, before it dies
	for _, cr := range crs {
		cur := &cmapi.CertificateRequest{}
		if err := down.Get(ctx, client.ObjectKeyFromObject(cr), cur); err != nil {
			t.Fatal(err)
		}
		if len(cur.Status.Certificate) > 0 {
			t.Fatalf("%s has a certificate while its status write is held", cr.Name)
		}
		if signedBefore[cr.Name] = signedSerials(t, replicas[owner], cr.Name); len(signedBefore[cr.Name]) == 0 {
			t.Fatalf("%s: its status write is held, yet %s logged no signature", cr.Name, owner)
		}
	}
	if err := replicas[owner].Stop(syscall.SIGKILL); replicas[owner].Running() {
		t.Fatal(err)
	}
	// The dead replica's held writes are dropped (its connections closed).
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		_, waiting := proxy.Held()
		return waiting == 0, nil
	})
	if err != nil {
		t.Fatal("the killed replica's held writes never went away")
	}
	proxy.Release()

	ca, err := pki.DecodeX509CertificateBytes(env.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, cr := range crs {
		cur := waitIssued(ctx, t, down, cr)
		leaf, err := pki.DecodeX509CertificateBytes(cur.Status.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		if leaf.CheckSignatureFrom(ca) != nil {
			t.Errorf("%s: not signed by the hub's CA", cr.Name)
		}
		if ok, err := pki.PublicKeysEqual(leaf.PublicKey, keys[cr.Name]); err != nil || !ok {
			t.Errorf("%s: the certificate is not for the request's key", cr.Name)
		}
		if got := leaf.SerialNumber.Text(16); got != signedBefore[cr.Name][0] {
			t.Errorf("%s: serial %s; the killed replica signed %s", cr.Name, got, signedBefore[cr.Name][0])
		}
	}

	for _, cr := range crs {
		serials := map[string][]string{}
		for id, r := range replicas {
			for _, s := range signedSerials(t, r, cr.Name) {
				serials[s] = append(serials[s], id)
			}
		}
		t.Logf("%s: serials signed %v", cr.Name, serials)
		if len(serials) != 1 {
			t.Errorf("%s: the CA signed serials %v; want exactly one", cr.Name, serials)
			continue
		}
		if by := serials[signedBefore[cr.Name][0]]; !contains(by, owner) || len(by) < 2 {
			t.Errorf("%s: signed by %v; want the killed %s (mid-way) and the survivor", cr.Name, by, owner)
		}
	}
}

// waitOwner returns the replica that owns the cluster once ownership has
// settled: every replica decides with all of them as peers, exactly one
// holds the cluster's fence (by its Lease and by its own
// certhub_shard_cluster_owned), and the same one did at the poll before. A
// replica that starts deciding before its peer has joined holds every fence
// until it sees the peer, so the first holder seen may hand the cluster
// over a moment later.
func waitOwner(ctx context.Context, t *testing.T, hub client.Client, replicas map[string]*fleet.Replica) string {
	t.Helper()
	var owner, last string
	settled := func(ctx context.Context) bool {
		fences, err := fleet.FenceHolders(ctx, hub, env.Bed.HubNamespace())
		if err != nil {
			return false
		}
		f := fences.Of(clusterName)
		owner = f.Holder
		if replicas[owner] == nil || !time.Now().Before(f.Expires) {
			return false
		}
		for id, r := range replicas {
			m, err := r.Metrics(ctx, "certhub_shard_peers", "certhub_shard_cluster_owned")
			if err != nil || int(m.Sum("certhub_shard_peers", nil)) != len(replicas) {
				return false
			}
			if held := m.Sum("certhub_shard_cluster_owned", map[string]string{"cluster": clusterName}) == 1; held != (id == owner) {
				return false
			}
		}
		return true
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		if !settled(ctx) {
			last = ""
			return false, nil
		}
		done := owner == last
		last = owner
		return done, nil
	})
	if err != nil {
		t.Fatalf("cluster %s never settled on one replica (holder %q)", clusterName, owner)
	}
	return owner
}

// waitIssued polls cr until it is Issued (or Failed: the test fails).
func waitIssued(ctx context.Context, t *testing.T, c client.Client, cr *cmapi.CertificateRequest) *cmapi.CertificateRequest {
	t.Helper()
	cur := &cmapi.CertificateRequest{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cr), cur); err != nil {
			return false, nil
		}
		r := apiutil.CertificateRequestReadyReason(cur)
		return r == cmapi.CertificateRequestReasonIssued || r == cmapi.CertificateRequestReasonFailed, nil
	})
	if err != nil || apiutil.CertificateRequestReadyReason(cur) != cmapi.CertificateRequestReasonIssued {
		t.Fatalf("%s never Issued (%v): %+v", cr.Name, err, cur.Status.Conditions)
	}
	return cur
}

// signedSerials reads r's log for the serials it signed for request name
// ("signed CertificateRequest" lines).
func signedSerials(t *testing.T, r *fleet.Replica, name string) []string {
	t.Helper()
	f, err := os.Open(r.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "signed CertificateRequest") {
			continue
		}
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("%s: a log line that is not JSON: %s", r.ID, line)
		}
		if entry["name"] == name {
			out = append(out, fmt.Sprint(entry["serial"]))
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.Contains(v, s) {
			return true
		}
	}
	return false
}
