package external

import (
	"context"
	"crypto"
	"crypto/x509"
	"os"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/cmrunner"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// hubRef names the hub's CA ClusterIssuer through certhub.io.
var hubRef = cmmeta.IssuerReference{Name: hubIssuer, Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}

// externalCluster registers cp as cluster name in mode external, through a
// recording proxy, with cert-manager's controllers running there (without
// its approver when approve is false: the tests approve). They run until
// the test binary ends.
func externalCluster(ctx context.Context, cp *testbed.ControlPlane, name string, approve bool) (*testbed.Proxy, error) {
	dir, err := os.MkdirTemp(env.Dir, name)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := cp.WriteKubeconfig(dir)
	if err != nil {
		return nil, err
	}
	opts := cmrunner.Options{Kubeconfig: kubeconfig}
	if !approve {
		for _, c := range cmrunner.DefaultControllers {
			if c != "certificaterequests-approver" {
				opts.Controllers = append(opts.Controllers, c)
			}
		}
	}
	if _, err := cmrunner.Start(ctx, opts); err != nil {
		return nil, err
	}
	proxy, err := cp.StartProxy()
	if err != nil {
		return nil, err
	}
	if _, err := env.Bed.RegisterThrough(ctx, cp, name, proxy, map[string]string{hubapi.ModeLabel: hubapi.ModeExternal}); err != nil {
		return nil, err
	}
	return proxy, nil
}

// request is a CertificateRequest as istio-csr makes one: a CSR for
// dnsNames signed by key, naming the hub issuer.
func request(t *testing.T, ns, name string, key crypto.Signer, dnsNames ...string) *cmapi.CertificateRequest {
	t.Helper()
	crt := fixture.Certificate(ns, name, hubIssuer, fixture.WithNames("", dnsNames...), fixture.WithIssuer(hubRef),
		fixture.WithDuration(24*time.Hour), fixture.WithSpec(func(s *cmapi.CertificateSpec) {
			s.Usages = []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageKeyEncipherment, cmapi.UsageServerAuth}
		}))
	cr, err := fixture.CertificateRequest(crt, name, key)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// setCondition approves or denies cr, as an approver does.
func setCondition(t *testing.T, c client.Client, cr *cmapi.CertificateRequest, typ cmapi.CertificateRequestConditionType, reason string) {
	t.Helper()
	fixture.SetRequestCondition(t, c, cr, typ, reason)
}

// waitRequest polls cr until cond holds.
func waitRequest(t *testing.T, c client.Client, cr *cmapi.CertificateRequest, what string, cond func(*cmapi.CertificateRequest) bool) *cmapi.CertificateRequest {
	t.Helper()
	return fixture.WaitRequest(t, c, cr, what, cond)
}

// readyReason is the Ready condition's reason ("" without one).
func readyReason(cr *cmapi.CertificateRequest) string {
	return apiutil.CertificateRequestReadyReason(cr)
}

// hubCA is the hub ClusterIssuer's CA certificate.
func hubCA(t *testing.T) *x509.Certificate {
	t.Helper()
	c, err := pki.DecodeX509CertificateBytes(env.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
