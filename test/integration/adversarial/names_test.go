package adversarial

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/test/fixture"
)

// A Certificate asking for 60,000 names is refused with InvalidNames before
// the hub does anything else with it (--max-names-per-certificate, default
// issuers.DefaultMaxNames), and a neighbour in the same cluster is issued
// meanwhile.
func TestSixtyThousandNamesAreRefusedFast(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[1]
	const ns = "sixty-thousand-names"
	fixture.EnsureNamespace(t, cp.Client, ns)
	names := make([]string, 60000)
	for i := range names {
		names[i] = fmt.Sprintf("n%d.t", i)
	}
	huge := fixture.Certificate(ns, "huge", issuerName, fixture.WithNames("", names...))
	start := time.Now()
	if err := cp.Client.Create(ctx, huge); err != nil {
		t.Fatalf("the API server refused the 60,000-name Certificate: %v", err)
	}
	neighbourIssues(t, cp.Client, "sixty-thousand-neighbour", "web", "a 60,000-name Certificate")
	crt := fixture.WaitFor(t, cp.Client, client.ObjectKeyFromObject(huge), "Ready=False/InvalidNames", fixture.NotReadyWith(reasons.InvalidNames))
	msg := fixture.Condition(crt, cmapi.CertificateConditionReady).Message
	if want := fmt.Sprintf("60000 names (SANs and literalSubject attributes) exceed the hub's limit of %d", issuers.DefaultMaxNames); !strings.Contains(msg, want) {
		t.Errorf("message %q; want %q", msg, want)
	}
	t.Logf("refused %s after it was created: %s", time.Since(start).Round(time.Millisecond), msg)
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: huge.Spec.SecretName}, &corev1.Secret{}); err == nil {
		t.Error("a Secret was written for the refused Certificate")
	}
}
