// Package rotation proves a CA rotation end to end: three downstream
// clusters in three waves (label certhub.io/wave on their cluster Secrets),
// every served certificate verifying against the trust bundle of its own
// cluster at every step, a wave halted while one of its clusters' API server
// is down (the next wave not started) until it recovers and the rotation is
// resumed, and the old CA gone from the bundles at the end.
package rotation

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const issuerName = "rot-ca"

var (
	env *suite.Env
	bed *testbed.Bed
)

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Downstreams: 3,
		Hub: func(o *hub.Options) {
			o.RotationSoak, o.RotationPause, o.RotationDeadline, o.RotationGrace = 3*time.Second, 2*time.Second, 10*time.Second, 2*time.Second
			o.IssuerRetryInterval = time.Second
		},
		Setup: func(ctx context.Context, e *suite.Env) error {
			bed = e.Bed
			// Waves committed with the registrations: cluster-1 "0", cluster-2 "1", cluster-3 "2".
			list := &corev1.SecretList{}
			if err := bed.Hub.Client.List(ctx, list, client.InNamespace(bed.ArgoNamespace()), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
				return err
			}
			for i := range list.Items {
				s := &list.Items[i]
				for w, cp := range bed.Downstreams {
					if string(s.Data["name"]) == cp.Name {
						s.Labels[hubapi.WaveLabel] = strconv.Itoa(w)
					}
				}
				if err := bed.Hub.Client.Update(ctx, s); err != nil {
					return err
				}
			}
			return nil
		}}, &env))
}
