// Package envtestmain is the shared TestMain of the integration packages:
// a test bed (hub + downstream API servers), a CA ClusterIssuer in the hub,
// every downstream registered as an Argo CD cluster Secret, and optionally
// one hub replica running in-process for the duration of the tests.
package envtestmain

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/testbed"
)

// Options say what the package's tests need.
type Options struct {
	// Downstreams defaults to 2.
	Downstreams int
	// Issuer names the CA ClusterIssuer to create in the hub. Required.
	Issuer string
	// Unregistered leaves the last this many downstream clusters without a
	// registration, for tests that register them their own way.
	Unregistered int
	// Hub, when set, runs one replica in-process; it may adjust the options
	// (namespaces and identity "replica-0" are already set, metrics and probes off).
	Hub func(*app.Options)
	// HubTransport, when set, wraps the in-process replica's transport to
	// the hub API server (to observe what it asks for and receives).
	HubTransport func(http.RoundTripper) http.RoundTripper
	// Binary, when set, builds the certhub binary first (with -race when race is true).
	Binary bool
	// Race builds the binary with -race.
	Race bool
	// Logs receives the hub's logs. Defaults to stderr in development format.
	Logs io.Writer
	// Setup runs after registration and before the hub starts (extra fixtures).
	Setup func(ctx context.Context, env *Env) error
}

// Env is what the tests use.
type Env struct {
	Bed *testbed.Bed
	// CAPEM is the CA certificate of Options.Issuer.
	CAPEM []byte
	// Dir is a scratch directory removed after the tests.
	Dir string
	// Binary is the built certhub binary, when Options.Binary.
	Binary string
	// Kubeconfig is an admin kubeconfig of the hub, for processes.
	Kubeconfig string
}

// Run is the body of TestMain: os.Exit(envtestmain.Run(m, opts, &env)).
func Run(m *testing.M, opts Options, env **Env) int {
	if opts.Downstreams == 0 {
		opts.Downstreams = 2
	}
	if opts.Logs == nil {
		opts.Logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(opts.Logs), zap.UseDevMode(true)))
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "FAIL: %s: %v\n", what, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "certhub-it-")
	if err != nil {
		return fail("temp dir", err)
	}
	defer os.RemoveAll(dir)
	e := &Env{Dir: dir}
	*env = e

	if opts.Binary {
		e.Binary = filepath.Join(dir, "certhub")
		args := []string{"build", "-o", e.Binary}
		if opts.Race {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, "github.com/certhub/certhub/cmd/certhub")...).CombinedOutput(); err != nil {
			return fail("building certhub", fmt.Errorf("%w\n%s", err, out))
		}
	}
	if e.Bed, err = testbed.Start(ctx, testbed.Options{Downstreams: opts.Downstreams}); err != nil {
		return fail("test bed", err)
	}
	defer func() { _ = e.Bed.Stop() }()
	if e.Kubeconfig, err = e.Bed.Hub.WriteKubeconfig(dir); err != nil {
		return fail("kubeconfig", err)
	}
	ca, err := e.Bed.CreateCAIssuer(ctx, opts.Issuer)
	if err != nil {
		return fail("CA issuer", err)
	}
	e.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	for _, cp := range e.Bed.Downstreams[:len(e.Bed.Downstreams)-opts.Unregistered] {
		if _, err := e.Bed.Register(ctx, cp); err != nil {
			return fail("register", err)
		}
	}
	if opts.Setup != nil {
		if err := opts.Setup(ctx, e); err != nil {
			return fail("setup", err)
		}
	}
	if opts.Hub == nil {
		return m.Run()
	}
	o := app.NewOptions()
	o.Namespace, o.ClusterSecretNamespace = e.Bed.HubNamespace(), e.Bed.ArgoNamespace()
	o.MetricsAddr, o.HealthProbeAddr, o.Identity = "0", "0", "replica-0"
	opts.Hub(o)
	hubCtx, stopHub := context.WithCancel(ctx)
	done := make(chan error, 1)
	cfg := rest.CopyConfig(e.Bed.Hub.Config)
	if opts.HubTransport != nil {
		cfg.Wrap(opts.HubTransport)
	}
	go func() { done <- app.Run(hubCtx, cfg, o) }()
	code := m.Run()
	stopHub()
	if err := <-done; err != nil {
		return fail("hub replica", err)
	}
	return code
}
