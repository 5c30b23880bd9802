package issuance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/fixture"
)

// Every invalid spec ends Ready=False with its reason, a Warning Event and no
// Secret, while a healthy Certificate in the same cluster is issued in the
// same run. (Specs the CRD's own schema refuses — enums — never reach the hub.)
func TestInvalidSpecsAreRefusedWithAReason(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[1].Client
	fixture.EnsureNamespace(t, c, "invalid")
	var specs []fixture.InvalidSpec
	created := map[string]*cmapi.Certificate{}
	for i, tt := range fixture.InvalidSpecs() {
		crt := fixture.Certificate("invalid", fmt.Sprintf("bad-%02d", i), issuerName)
		tt.Mutate(crt)
		if err := c.Create(ctx, crt); err != nil {
			if !apierrors.IsInvalid(err) {
				t.Fatalf("%s: %v", tt.Name, err)
			}
			t.Logf("%s: refused at admission by the CRD schema", tt.Name)
			continue
		}
		specs = append(specs, tt)
		created[tt.Name] = crt
	}
	if len(specs) < 12 {
		t.Fatalf("only %d invalid specs reach the hub, want >= 12", len(specs))
	}
	healthy := fixture.Certificate("invalid", "healthy", issuerName)
	if err := c.Create(ctx, healthy); err != nil {
		t.Fatal(err)
	}
	for _, tt := range specs {
		t.Run(tt.Name, func(t *testing.T) {
			crt := created[tt.Name]
			got := fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "Ready=False/"+tt.Reason, fixture.NotReadyWith(tt.Reason))
			if msg := fixture.Condition(got, cmapi.CertificateConditionReady).Message; !strings.Contains(msg, tt.Field) {
				t.Errorf("message %q does not name %q", msg, tt.Field)
			}
			if crt.Spec.SecretName != "" {
				err := c.Get(ctx, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, &corev1.Secret{})
				if !apierrors.IsNotFound(err) {
					t.Errorf("a Secret exists for an invalid spec (err %v)", err)
				}
			}
			waitWarningEvent(t, c, crt, tt.Reason)
		})
	}
	expectStable(t, c, fixture.WaitReady(t, c, client.ObjectKeyFromObject(healthy)))
}

func waitWarningEvent(t *testing.T, c client.Client, crt *cmapi.Certificate, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		list := &eventsv1.EventList{}
		if err := c.List(ctx, list, client.InNamespace(crt.Namespace)); err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			if e.Regarding.Name == crt.Name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no Warning Event %s for %s", reason, crt.Name)
	}
}
