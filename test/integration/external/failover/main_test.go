// Package failover is the external issuer's crash tier: two hub replica
// processes share one cluster in mode external that runs cert-manager's own
// controllers; the replica signing its CertificateRequests is SIGKILLed
// between signing and writing the status. Every request still ends with
// one certificate, and the CA signed one serial per request.
package failover

import (
	"context"
	"os"
	"testing"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture/cmrunner"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const (
	// hubIssuer is the hub's CA ClusterIssuer the requests name.
	hubIssuer = "hub-ca"
	// clusterName is the downstream cluster's registration.
	clusterName = "edge"
)

var (
	env *suite.Env
	// proxy stands between the hub replicas and the downstream cluster.
	proxy *testbed.Proxy
)

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: hubIssuer, Downstreams: 1, Unregistered: 1, Binary: true,
		Setup: func(ctx context.Context, e *suite.Env) error {
			env = e
			cp := e.Bed.Downstreams[0]
			kubeconfig, err := cp.WriteKubeconfig(e.Dir)
			if err != nil {
				return err
			}
			if _, err := cmrunner.Start(ctx, cmrunner.Options{Kubeconfig: kubeconfig}); err != nil {
				return err
			}
			if proxy, err = cp.StartProxy(); err != nil {
				return err
			}
			_, err = e.Bed.RegisterThrough(ctx, cp, clusterName, proxy, map[string]string{hubapi.ModeLabel: hubapi.ModeExternal})
			return err
		}}, &env))
}
