package adversarial

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// trafficRecorder wraps a transport: it keeps every request line and scans
// every response body, watch streams included, for markers.
type trafficRecorder struct {
	mu       sync.Mutex
	requests []*url.URL
	markers  [][]byte
	seen     map[string]bool
}

func newTrafficRecorder() *trafficRecorder { return &trafficRecorder{seen: map[string]bool{}} }

// watchFor scans later response bytes for value, raw (protobuf) and base64
// (JSON Secret data).
func (r *trafficRecorder) watchFor(value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markers = append(r.markers, []byte(value), []byte(base64.StdEncoding.EncodeToString([]byte(value))))
}

// saw reports whether value went through, in either form.
func (r *trafficRecorder) saw(value string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[value] || r.seen[base64.StdEncoding.EncodeToString([]byte(value))]
}

func (r *trafficRecorder) urls() []*url.URL {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*url.URL(nil), r.requests...)
}

func (r *trafficRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		r.mu.Lock()
		r.requests = append(r.requests, req.URL)
		r.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body = &scanningBody{ReadCloser: resp.Body, r: r}
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// scanningBody looks for the markers in what is read, across read boundaries.
type scanningBody struct {
	io.ReadCloser
	r    *trafficRecorder
	tail []byte
}

func (b *scanningBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		buf := append(b.tail, p[:n]...)
		b.r.mu.Lock()
		longest := 0
		for _, m := range b.r.markers {
			if bytes.Contains(buf, m) {
				b.r.seen[string(m)] = true
			}
			longest = max(longest, len(m))
		}
		b.r.mu.Unlock()
		if keep := longest - 1; keep > 0 && len(buf) > keep {
			buf = buf[len(buf)-keep:]
		}
		b.tail = append(b.tail[:0], buf...)
	}
	return n, err
}

// Item 7 (hub): the hub holds only labelled cluster Secrets of Argo CD's
// namespace — not Argo CD's admin Secret or repository credentials, which
// share that namespace. Every Secret request the replica makes there carries
// the cluster label selector and no such Secret's bytes reach it, while a
// new cluster Secret's do (the recorder's control); a neighbour issues
// meanwhile.
func TestHubHoldsOnlyClusterSecrets(t *testing.T) {
	ctx := context.Background()
	hub, argo := bed.Hub.Client, bed.ArgoNamespace()
	const admin, repo, control = "exposure-admin-password", "exposure-repo-password", "exposure-control-marker"
	for _, v := range []string{admin, repo, control} {
		hubTraffic.watchFor(v)
	}
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: argo, Name: "argocd-secret"}, Data: map[string][]byte{"admin.password": []byte(admin)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: argo, Name: "repo-private", Labels: map[string]string{inventory.SecretTypeLabel: "repository"}},
			Data: map[string][]byte{"url": []byte("https://git.example.com/private.git"), "password": []byte(repo)}},
		// A cluster Secret the hub must see (it is refused: no server).
		{ObjectMeta: metav1.ObjectMeta{Namespace: argo, Name: "exposure-control", Labels: map[string]string{inventory.SecretTypeLabel: inventory.SecretTypeCluster}},
			Data: map[string][]byte{"name": []byte(control), "config": []byte("{}")}},
	}
	for _, s := range secrets {
		if err := hub.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hub.Delete(context.Background(), s) })
	}
	neighbourIssues(t, bed.Downstreams[0].Client, "exposure-neighbour", "web", "Argo CD's admin and repository Secrets in the watched namespace")
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return hubTraffic.saw(control), nil
	})
	if err != nil {
		t.Fatal("the recorder never saw the new cluster Secret reach the hub: it cannot tell what the hub receives")
	}
	for _, v := range []string{admin, repo} {
		if hubTraffic.saw(v) {
			t.Errorf("the hub received the bytes of a Secret that is not a cluster Secret (%s)", v)
		}
	}
	argoSecrets := "/api/v1/namespaces/" + argo + "/secrets"
	n := 0
	for _, u := range hubTraffic.urls() {
		switch {
		case u.Path == "/api/v1/secrets":
			t.Errorf("the hub asked for every Secret of the cluster: %s", u)
		case strings.HasPrefix(u.Path, argoSecrets):
			n++
			if u.Path != argoSecrets || !strings.Contains(u.Query().Get("labelSelector"), inventory.SecretTypeLabel+"="+inventory.SecretTypeCluster) {
				t.Errorf("Secret request in %s without the cluster label selector: %s", argo, u)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no Secret request in %s recorded", argo)
	}
	t.Logf("%d Secret list/watch requests in %s, each selecting %s=%s", n, argo, inventory.SecretTypeLabel, inventory.SecretTypeCluster)
}

// Item 7 (status): `certhub status --cluster` reads the downstream Secrets'
// metadata, never their keys. It runs (the binary) against a registration
// whose server is a recording reverse proxy in front of a real API server
// holding certhub-written Secrets; the recorder sees no tls.key, though the
// same proxy shows one to a client that lists Secrets whole (the control).
func TestStatusReadsNoPrivateKey(t *testing.T) {
	ctx := context.Background()
	ds := bed.Downstreams[0]
	neighbourIssues(t, ds.Client, "status-keys", "web", "certhub status reading the cluster")

	rec := newTrafficRecorder()
	keyPEM := []string{"-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----"}
	for _, m := range keyPEM {
		rec.watchFor(m)
	}
	sawKey := func() bool {
		for _, m := range keyPEM {
			if rec.saw(m) {
				return true
			}
		}
		return false
	}
	proxyURL, proxyCA := startHTTPProxy(t, ds, rec.wrap, nil)

	// Registered in a namespace the running hub does not watch: only status reads it.
	const statusNS = "status-only-argocd"
	fixture.EnsureNamespace(t, bed.Hub.Client, statusNS)
	token, err := bed.ServiceAccountToken(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	s, err := inventory.NewSecret(statusNS, "proxied", "proxied", proxyURL,
		inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{CAData: proxyCA}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.Hub.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, env.Binary, "status", "--kubeconfig", env.Kubeconfig, "--namespace", bed.HubNamespace(),
		"--cluster-secret-namespace", statusNS, "--cluster", "proxied").CombinedOutput()
	if err != nil {
		t.Fatalf("certhub status: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "web") || !strings.Contains(string(out), "Connected") {
		t.Fatalf("certhub status did not list the cluster's Certificates through the proxy:\n%s", out)
	}
	if sawKey() {
		t.Errorf("certhub status received a private key:\n%s", out)
	}

	// Control: the same proxy, a client listing managed Secrets whole.
	c, err := client.New(&rest.Config{Host: proxyURL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: proxyCA}}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &corev1.SecretList{}, client.MatchingLabels{hubapi.ManagedByLabel: hubapi.ManagedByValue}); err != nil {
		t.Fatal(err)
	}
	if !sawKey() {
		t.Fatal("control: listing Secrets whole through the proxy showed no tls.key; the recorder proves nothing")
	}
}

// startHTTPProxy starts a TLS reverse proxy in front of cp's API server and
// returns its URL and CA. Credentials pass through: it only terminates TLS;
// wrap (if set) wraps its transport to cp, and handle (if set) may answer a
// request itself instead (returning true).
func startHTTPProxy(t *testing.T, cp *testbed.ControlPlane, wrap func(http.RoundTripper) http.RoundTripper,
	handle func(http.ResponseWriter, *http.Request) bool) (string, []byte) {
	t.Helper()
	upstream, err := url.Parse(cp.Server())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := rest.TransportFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: cp.Config.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		tr = wrap(tr)
	}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport = tr
	proxy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if handle == nil || !handle(w, r) {
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(proxy.Close)
	return proxy.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw})
}
