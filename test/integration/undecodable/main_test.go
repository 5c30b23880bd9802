// Package undecodable is the tier of issue 55's reader rule: a Certificate
// the API server accepts and cert-manager's Go types cannot decode stops
// none of the hub's readers of Certificates in its cluster and namespace —
// a revocation, a CA rotation, a DR pair's mirror, discovery and
// `certhub status` — in one hub replica beside it.
package undecodable

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture/suite"
)

const (
	issuerName = "undecodable-ca"
	// selector picks the primary's Certificates its standby mirrors.
	selector = "dr=true"
)

var (
	env     *suite.Env
	crlAddr string
)

func TestMain(m *testing.M) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	crlAddr = l.Addr().String()
	_ = l.Close()
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Downstreams: 2,
		Hub: func(o *hub.Options) {
			o.RevocationInterval = 300 * time.Millisecond
			o.CRLBindAddress = crlAddr
			o.StandbyPairInterval = time.Second
			o.DiscoveryReportInterval = time.Second
			o.RotationSoak, o.RotationPause, o.RotationDeadline, o.RotationGrace = 2*time.Second, time.Second, 20*time.Second, time.Second
			o.IssuerRetryInterval = time.Second
		},
		// cluster-2 is cluster-1's DR standby, for its Certificates labelled dr=true.
		Setup: func(ctx context.Context, e *suite.Env) error {
			list := &corev1.SecretList{}
			if err := e.Bed.Hub.Client.List(ctx, list, client.InNamespace(e.Bed.ArgoNamespace()), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
				return err
			}
			for i := range list.Items {
				s := &list.Items[i]
				if string(s.Data["name"]) != e.Bed.Downstreams[1].Name {
					continue
				}
				s.Labels[hubapi.StandbyForLabel] = e.Bed.Downstreams[0].Name
				if s.Annotations == nil {
					s.Annotations = map[string]string{}
				}
				s.Annotations[hubapi.StandbySelectorAnnotation] = selector
				return e.Bed.Hub.Client.Update(ctx, s)
			}
			return fmt.Errorf("no registration of %s", e.Bed.Downstreams[1].Name)
		}}, &env))
}
