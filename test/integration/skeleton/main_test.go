// Package skeleton is the walking-skeleton integration test: one hub and two
// downstream API servers (real kube-apiserver + etcd), one hub replica, and
// cert-manager Certificates issued end to end.
package skeleton

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/testbed"
)

const issuerName = "test-ca"

var (
	bed *testbed.Bed
	// caPEM is the CA certificate of issuerName, as the hub holds it.
	caPEM []byte
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseFlagOptions(&zap.Options{Development: true, TimeEncoder: zapcore.RFC3339NanoTimeEncoder})))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var err error
	bed, err = testbed.Start(ctx, testbed.Options{Downstreams: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: test bed:", err)
		return 1
	}
	defer func() {
		if err := bed.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping test bed:", err)
		}
	}()
	ca, err := bed.CreateCAIssuer(ctx, issuerName)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	caPEM = encodeCert(ca)
	for _, cp := range bed.Downstreams {
		if _, err := bed.Register(ctx, cp); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			return 1
		}
	}

	o := app.NewOptions()
	o.Namespace, o.ClusterSecretNamespace = bed.HubNamespace(), bed.ArgoNamespace()
	o.MetricsAddr, o.HealthProbeAddr, o.Identity = "0", "0", "replica-0"
	hubCtx, stopHub := context.WithCancel(ctx)
	hubDone := make(chan error, 1)
	go func() { hubDone <- app.Run(hubCtx, bed.Hub.Config, o) }()

	code := m.Run()
	stopHub()
	if err := <-hubDone; err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: hub replica:", err)
		return 1
	}
	return code
}
