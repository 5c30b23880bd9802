// Package issuance checks cert-manager parity on real API servers: every spec
// field ends up in the issued certificate and Secret as cert-manager would
// write it, renewals and manual triggers behave, invalid specs are refused
// with a reason, and Argo CD's own health check reads the status correctly.
package issuance

import (
	"context"
	"encoding/pem"
	"fmt"
	"os"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/testbed"
)

const issuerName = "parity-ca"

var (
	bed   *testbed.Bed
	caPEM []byte
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	if bed, err = testbed.Start(ctx, testbed.Options{Downstreams: 2}); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: test bed:", err)
		return 1
	}
	defer func() { _ = bed.Stop() }()
	ca, err := bed.CreateCAIssuer(ctx, issuerName)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	for _, cp := range bed.Downstreams {
		if _, err := bed.Register(ctx, cp); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			return 1
		}
	}
	o := app.NewOptions()
	o.Namespace, o.ClusterSecretNamespace = bed.HubNamespace(), bed.ArgoNamespace()
	o.MetricsAddr, o.HealthProbeAddr, o.Identity = "0", "0", "replica-0"
	o.IssuerRetryInterval = time.Second
	hubCtx, stopHub := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(hubCtx, bed.Hub.Config, o) }()
	code := m.Run()
	stopHub()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: hub:", err)
		return 1
	}
	return code
}
