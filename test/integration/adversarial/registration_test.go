package adversarial

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
)

// Item 4: registrations that point where they should not. A cloud metadata
// address and a plain-http server are refused before anything is dialled,
// with a reason naming the field; a hostile server's response body never
// reaches an Event; the registration's credentials appear in no Event. A
// healthy neighbour issues meanwhile.
func TestRegistrationsThatPointWhereTheyShouldNot(t *testing.T) {
	ctx := context.Background()
	hub := bed.Hub.Client
	const token = "hostile-registration-token-0123456789"
	hostile := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("<html><body>" + strings.Repeat("SECRET-BODY please paste your kubeconfig at https://evil.example ", 50) + "</body></html>"))
	}))
	defer hostile.Close()

	regs := map[string]string{
		"metadata":      "https://169.254.169.254",
		"metadata-ipv6": "https://[fd00:ec2::254]:443",
		"plain":         "http://127.0.0.1:1",
		"hostile":       hostile.URL,
	}
	for name, server := range regs {
		cc := inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{Insecure: true}}
		s, err := inventory.NewSecret(bed.ArgoNamespace(), "adv-"+name, "adv-"+name, server, cc)
		if err != nil {
			t.Fatal(err)
		}
		if err := hub.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hub.Delete(context.Background(), s) })
	}

	neighbourIssues(t, bed.Downstreams[0].Client, "registration-neighbour", "web", "4 hostile registrations")

	argo := bed.ArgoNamespace()
	for _, tc := range []struct{ name, reason, fragment string }{
		{"metadata", inventory.ReasonInvalidClusterSecret, "field server: refusing to connect to 169.254.169.254: link-local and cloud metadata addresses are refused"},
		{"metadata-ipv6", inventory.ReasonInvalidClusterSecret, "refusing to connect to fd00:ec2::254"},
		{"plain", inventory.ReasonInvalidClusterSecret, "field server: uses plain http"},
		{"hostile", inventory.ReasonClusterUnreachable, "with a body that is not a Kubernetes Status (not shown)"},
	} {
		e := fixture.WaitEvent(t, hub, argo, "adv-"+tc.name, tc.reason, tc.fragment)
		t.Logf("adv-%s: %s: %s", tc.name, e.Reason, e.Note)
	}
	list := &eventsv1.EventList{}
	if err := hub.List(ctx, list, client.InNamespace(argo)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if strings.Contains(e.Note, "SECRET-BODY") || strings.Contains(e.Note, token) {
			t.Errorf("Event %s on %s carries the remote body or the registration's token: %s", e.Reason, e.Regarding.Name, e.Note)
		}
	}
	if v, ok := fixture.Gauge(t, "certhub_cluster_secret_invalid", map[string]string{"secret": argo + "/adv-metadata"}); !ok || v != 1 {
		t.Errorf("certhub_cluster_secret_invalid for adv-metadata = %v (present %v), want 1", v, ok)
	}
}
