package testbed

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/acme"
)

//go:embed crds/cert-manager/*.yaml crds/certhub/*.yaml
var crdFiles embed.FS

//go:embed crds/gateway-api/*.yaml
var gatewayCRDFiles embed.FS

//go:embed envtest.version
var envtestVersion string

// Defaults for Options.
const (
	// DefaultDownstreams is the number of downstream control planes.
	DefaultDownstreams = 2
	// DefaultHubNamespace holds certhub's own objects in the hub (CA Secrets, Leases).
	DefaultHubNamespace = "certhub"
	// DefaultArgoNamespace holds the Argo CD cluster Secrets in the hub.
	DefaultArgoNamespace = "argocd"
)

// EnvtestVersion is the Kubernetes version of the envtest binaries (envtest.version).
func EnvtestVersion() string { return strings.TrimSpace(envtestVersion) }

// Options configure a Bed.
type Options struct {
	// Downstreams is the number of downstream control planes. Defaults to DefaultDownstreams.
	Downstreams int
	// HubNamespace defaults to DefaultHubNamespace.
	HubNamespace string
	// ArgoNamespace defaults to DefaultArgoNamespace.
	ArgoNamespace string
	// AssetsDir holds kube-apiserver, etcd (and kubectl). Defaults to AssetsDir().
	AssetsDir string
	// Progress, when set, receives one line per step (for the demo).
	Progress func(format string, args ...any)
}

// ControlPlane is one running kube-apiserver + etcd.
type ControlPlane struct {
	// Name is the cluster name (the Argo CD Secret's `name` for downstreams).
	Name string
	// Config is an admin client config.
	Config *rest.Config
	// Client is an admin client with certhub's Scheme.
	Client client.Client

	env *envtest.Environment
	// apiServerArgs and apiServer track a kube-apiserver restarted by
	// StopAPIServer/StartAPIServer.
	apiServerArgs []string
	apiServer     *apiServerProcess
}

// Bed is a hub and its downstream clusters.
type Bed struct {
	Hub         *ControlPlane
	Downstreams []*ControlPlane
	opts        Options
	stopOnce    sync.Once
	stopErr     error
}

// Scheme returns a scheme with Kubernetes', cert-manager's, Gateway API's and certhub's ACMEOrder types.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	must(clientgoscheme.AddToScheme(s))
	must(cmapi.AddToScheme(s))
	must(apiextensionsv1.AddToScheme(s))
	must(gwapi.Install(s))
	must(acme.AddToScheme(s))
	return s
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// AssetsDir finds the envtest binaries: $KUBEBUILDER_ASSETS, else the cache
// directory hack/ensure-envtest-assets.sh builds into.
func AssetsDir() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, checkAssets(d)
	}
	cache := os.Getenv("ENVTEST_CACHE_DIR")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("failed to find home directory: %w", err)
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "envtest-assets")
	}
	d := filepath.Join(cache, "k8s", strings.TrimPrefix(EnvtestVersion(), "v")+"-"+runtime.GOOS+"-"+runtime.GOARCH)
	return d, checkAssets(d)
}

func checkAssets(dir string) error {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("envtest binary %s not found in %s (build them with `make envtest`, i.e. hack/ensure-envtest-assets.sh): %w", b, dir, err)
		}
	}
	return nil
}

// CRDs returns the embedded cert-manager CRDs.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(crdFiles, "crds", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := crdFiles.ReadFile(path)
		if err != nil {
			return err
		}
		crds, err := DecodeCRDs(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, crds...)
		return nil
	})
	return out, err
}

// DecodeCRDs decodes the CustomResourceDefinitions in a multi-document YAML file.
func DecodeCRDs(raw []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, doc := range bytes.Split(raw, []byte("\n---")) {
		doc = bytes.TrimPrefix(bytes.TrimSpace(doc), []byte("---"))
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(doc, crd); err != nil {
			return nil, fmt.Errorf("failed to decode CRD: %w", err)
		}
		if crd.Kind == "CustomResourceDefinition" {
			out = append(out, crd)
		}
	}
	return out, nil
}

// Start starts the hub and the downstream control planes in parallel and
// prepares the hub namespaces. It does not register the downstreams: call
// Register for each one that the hub should serve.
func Start(ctx context.Context, opts Options) (*Bed, error) {
	if opts.Downstreams == 0 {
		opts.Downstreams = DefaultDownstreams
	}
	if opts.HubNamespace == "" {
		opts.HubNamespace = DefaultHubNamespace
	}
	if opts.ArgoNamespace == "" {
		opts.ArgoNamespace = DefaultArgoNamespace
	}
	if opts.Progress == nil {
		opts.Progress = func(string, ...any) {}
	}
	if opts.AssetsDir == "" {
		d, err := AssetsDir()
		if err != nil {
			return nil, err
		}
		opts.AssetsDir = d
	} else if err := checkAssets(opts.AssetsDir); err != nil {
		return nil, err
	}

	b := &Bed{opts: opts, Hub: &ControlPlane{Name: "hub"}}
	for i := range opts.Downstreams {
		b.Downstreams = append(b.Downstreams, &ControlPlane{Name: fmt.Sprintf("cluster-%d", i+1)})
	}
	all := append([]*ControlPlane{b.Hub}, b.Downstreams...)
	opts.Progress("starting %d control planes (kube-apiserver %s + etcd each) from %s", len(all), EnvtestVersion(), opts.AssetsDir)
	start := time.Now()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	// At most 4 start at once: kube-apiserver's start-up is CPU-heavy, and 11
	// at once on 2 cores ran past envtest's start timeout.
	sem := make(chan struct{}, 4)
	for i, cp := range all {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = cp.start(opts.AssetsDir)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = b.Stop()
		return nil, err
	}
	opts.Progress("control planes up in %s", time.Since(start).Round(100*time.Millisecond))

	for _, ns := range []string{opts.HubNamespace, opts.ArgoNamespace} {
		if err := ensureNamespace(ctx, b.Hub.Client, ns); err != nil {
			_ = b.Stop()
			return nil, err
		}
	}
	return b, nil
}

func (cp *ControlPlane) start(assets string) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	cp.env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crds},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := cp.env.Start()
	if err != nil {
		return fmt.Errorf("failed to start control plane %s: %w", cp.Name, err)
	}
	cp.Config = cfg
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return fmt.Errorf("failed to create client for %s: %w", cp.Name, err)
	}
	cp.Client = c
	return nil
}

// InstallGatewayAPI installs Gateway API's Gateway CRD (standard channel,
// from the sigs.k8s.io/gateway-api module go.mod pins) and waits until it is
// served. Control planes start without it, like clusters without a Gateway
// controller.
func (cp *ControlPlane) InstallGatewayAPI() error {
	raw, err := gatewayCRDFiles.ReadFile("crds/gateway-api/gateway.networking.k8s.io_gateways.yaml")
	if err != nil {
		return err
	}
	crds, err := DecodeCRDs(raw)
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
		return fmt.Errorf("failed to install the Gateway API CRD in %s: %w", cp.Name, err)
	}
	return nil
}

// Server is the API server URL as an Argo CD cluster Secret records it.
func (cp *ControlPlane) Server() string {
	h := strings.TrimRight(cp.Config.Host, "/")
	if !strings.Contains(h, "://") {
		h = "https://" + h
	}
	return h
}

// Stop stops every control plane. It is safe to call more than once.
func (b *Bed) Stop() error {
	b.stopOnce.Do(func() {
		all := append([]*ControlPlane{b.Hub}, b.Downstreams...)
		errs := make([]error, len(all))
		var wg sync.WaitGroup
		for i, cp := range all {
			if cp == nil || cp.env == nil || cp.Config == nil {
				continue
			}
			wg.Go(func() { errs[i] = errors.Join(cp.stopRestarted(), cp.env.Stop()) })
		}
		wg.Wait()
		b.stopErr = errors.Join(errs...)
	})
	return b.stopErr
}

// HubNamespace is where certhub keeps its own objects in the hub.
func (b *Bed) HubNamespace() string { return b.opts.HubNamespace }

// ArgoNamespace is where the cluster Secrets live in the hub.
func (b *Bed) ArgoNamespace() string { return b.opts.ArgoNamespace }

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, ns)); err != nil {
		return fmt.Errorf("failed to create namespace %s: %w", name, err)
	}
	return nil
}

// WriteKubeconfig writes an admin kubeconfig for cp to dir and returns its
// path, for processes (hub replicas) started outside the test process.
func (cp *ControlPlane) WriteKubeconfig(dir string) (string, error) {
	u, err := cp.env.AddUser(envtest.User{Name: "certhub-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("failed to add admin user to %s: %w", cp.Name, err)
	}
	raw, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("failed to render kubeconfig of %s: %w", cp.Name, err)
	}
	path := filepath.Join(dir, cp.Name+".kubeconfig")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return "", fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	return path, nil
}
