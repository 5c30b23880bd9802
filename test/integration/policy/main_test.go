// Package policy proves issuance policies on real API servers: a hub that
// denies by default, two downstream clusters registered with different
// labels (cluster-1 env=dev, cluster-2 env=prod), IssuancePolicies created
// in the hub while the hub runs, and downstream admins who try to change
// the outcome from their side.
package policy

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const issuerName = "policy-ca"

var (
	env *suite.Env
	bed *testbed.Bed
	// envOf is the env label each downstream's cluster Secret carries.
	envOf = map[string]string{"cluster-1": "dev", "cluster-2": "prod"}
)

func TestMain(m *testing.M) {
	// The third downstream is registered by TestRegistrationNamesArgoCDAccepts,
	// under names that are not DNS labels.
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Downstreams: 3, Unregistered: 1,
		Hub: func(o *hub.Options) {
			o.IssuerRetryInterval = time.Second
			o.DefaultPolicy = "deny" // as the shipped kustomize base
		},
		Setup: func(ctx context.Context, e *suite.Env) error {
			bed = e.Bed
			return labelClusters(ctx)
		}}, &env))
}

// labelClusters sets env=<dev|prod> on the downstreams' cluster Secrets.
func labelClusters(ctx context.Context) error {
	list := &corev1.SecretList{}
	if err := bed.Hub.Client.List(ctx, list, client.InNamespace(bed.ArgoNamespace()), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
		return err
	}
	n := 0
	for i := range list.Items {
		s := &list.Items[i]
		e, ok := envOf[string(s.Data["name"])]
		if !ok {
			continue
		}
		s.Labels["env"] = e
		if err := bed.Hub.Client.Update(ctx, s); err != nil {
			return err
		}
		n++
	}
	if n != len(envOf) {
		return fmt.Errorf("labelled %d cluster Secrets, want %d", n, len(envOf))
	}
	return nil
}
