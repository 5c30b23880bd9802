// Package observability checks what operators see without reading logs: the
// hub's /metrics with a cluster label and `certhub status` for a healthy, an
// unreachable and a malformed registration. The demo flow is test/e2e's.
package observability

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const issuerName = "obs-ca"

var (
	env         *suite.Env
	bed         *testbed.Bed
	metricsAddr string
	binary      string
	kubeconfig  string
)

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Binary: true, Logs: io.Discard,
		Hub: func(o *hub.Options) { o.MetricsAddr = metricsAddr },
		Setup: func(ctx context.Context, e *suite.Env) error {
			bed, binary, kubeconfig = e.Bed, e.Binary, e.Kubeconfig
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			metricsAddr = l.Addr().String()
			l.Close()
			return registerBroken(ctx)
		}}, &env))
}

// registerBroken adds an unreachable cluster (a closed port) and a malformed Secret.
func registerBroken(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	closed := "https://" + l.Addr().String()
	l.Close()
	cc := inventory.ClusterConfig{BearerToken: "nobody", TLSClientConfig: inventory.TLSClientConfig{Insecure: true}}
	s, err := inventory.NewSecret(bed.ArgoNamespace(), "gone", "gone", closed, cc)
	if err != nil {
		return err
	}
	if err := bed.Hub.Client.Create(ctx, s); err != nil {
		return err
	}
	broken := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: bed.ArgoNamespace(), Name: "broken", Labels: map[string]string{inventory.SecretTypeLabel: inventory.SecretTypeCluster}},
		StringData: map[string]string{"name": "broken", "server": "https://broken.example.com", "config": `{"bearerToken": `},
	}
	return bed.Hub.Client.Create(ctx, broken)
}

func scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// hasSeries reports whether a series with all the given label pairs has value.
func hasSeries(body, name string, labels []string, value string) bool {
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		if value == "" {
			return true
		}
		got, err1 := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		want, err2 := strconv.ParseFloat(value, 64)
		if err1 == nil && err2 == nil && got == want {
			return true
		}
	}
	return false
}

func TestMetricsPerCluster(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[0]
	fixture.EnsureNamespace(t, cp.Client, "obs")
	good := fixture.Certificate("obs", "good", issuerName)
	bad := fixture.Certificate("obs", "bad", issuerName)
	bad.Spec.Duration = &metav1.Duration{Duration: time.Minute}
	for _, c := range []*cmapi.Certificate{good, bad} {
		if err := cp.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(good))
	fixture.WaitFor(t, cp.Client, client.ObjectKeyFromObject(bad), "Ready=False", fixture.NotReadyWith(reasons.InvalidLifetime))

	cl := `cluster="` + cp.Name + `"`
	want := []struct {
		name   string
		labels []string
		value  string
	}{
		// --certificate-metrics=problems (the default): the Ready one is
		// counted, the not-Ready one has series of its own.
		// (other tests of the package issue in this cluster too: counts and
		// the soonest expiry are checked to exist, not for their value)
		{"certhub_certificates", []string{cl, `ready="True"`}, ""},
		{"certhub_certificates", []string{cl, `ready="False"`}, ""},
		{"certhub_cluster_soonest_expiration_timestamp_seconds", []string{cl}, ""},
		{"certhub_certificate_ready_status", []string{cl, `name="bad"`, `condition="False"`}, "1"},
		{"certhub_certificate_info", []string{cl, `name="bad"`, `issuer_name="` + issuerName + `"`}, "1"},
		{"certhub_certificate_issuances_total", []string{cl, `result="success"`}, ""},
		{"certhub_certificate_issuance_duration_seconds_count", []string{`result="success"`}, ""},
		{"certhub_cluster_reachable", []string{cl}, "1"},
		{"certhub_cluster_reachable", []string{`cluster="gone"`}, "0"},
		{"certhub_cluster_secret_invalid", []string{`secret="` + bed.ArgoNamespace() + `/broken"`, `reason="InvalidClusterSecret"`}, "1"},
		{"certhub_downstream_requests_total", []string{cl, `code="2xx"`}, ""},
		{"certhub_downstream_requests_total", []string{`cluster="gone"`, `code="error"`}, ""},
		{"certhub_shard_cluster_owned", []string{cl}, "1"},
	}
	var body string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		body = scrape(t)
		for _, w := range want {
			if !hasSeries(body, w.name, w.labels, w.value) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for _, w := range want {
			if !hasSeries(body, w.name, w.labels, w.value) {
				t.Errorf("no series %s%v = %q", w.name, w.labels, w.value)
			}
		}
	}
	if t.Failed() {
		return
	}
	if hasSeries(body, "certhub_certificate_ready_status", []string{cl, `name="good"`}, "") {
		t.Error("the Ready Certificate has series of its own at --certificate-metrics=problems")
	}
	// A deleted Certificate's series go away.
	if err := cp.Client.Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		return !hasSeries(scrape(t), "certhub_certificate_ready_status", []string{cl, `name="bad"`}, ""), nil
	})
	if err != nil {
		t.Errorf("series of the deleted Certificate are still exported")
	}
}

func TestStatusCommand(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[1]
	fixture.EnsureNamespace(t, cp.Client, "status")
	crt := fixture.Certificate("status", "api", issuerName)
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))

	status := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"status", "--kubeconfig", kubeconfig, "--namespace", bed.HubNamespace(),
			"--cluster-secret-namespace", bed.ArgoNamespace(), "--timeout", "3s"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("certhub status %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := status()
	t.Logf("certhub status:\n%s", out)
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	// CLUSTER OWNER MODE STATE READY …
	if r := rows[cp.Name]; len(r) < 5 || r[1] != "replica-0" || r[2] != "issue" || r[3] != app.StateConnected || r[4] != "1/1" {
		t.Errorf("healthy cluster row = %v, want owner replica-0, mode issue, Connected, 1/1", r)
	}
	if r := rows["gone"]; len(r) < 4 || r[3] != app.StateUnreachable {
		t.Errorf("unreachable cluster row = %v, want %s", r, app.StateUnreachable)
	}
	if r := rows["broken"]; len(r) < 4 || r[3] != app.StateInvalid || !strings.Contains(strings.Join(r, " "), "config") {
		t.Errorf("malformed registration row = %v, want %s naming the config field", r, app.StateInvalid)
	}
	detail := status("--cluster", cp.Name)
	if !strings.Contains(detail, "status") || !strings.Contains(detail, "api") || !strings.Contains(detail, "ClusterIssuer/"+issuerName) || !strings.Contains(detail, "replica-0/") {
		t.Errorf("--cluster output lacks the Certificate, its issuer or its writer:\n%s", detail)
	}
	if js := status("-o", "json"); !strings.Contains(js, `"state": "Connected"`) {
		t.Errorf("-o json output:\n%s", js)
	}
}
