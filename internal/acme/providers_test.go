package acme

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture/dnsapi"

	"github.com/certhub/certhub/internal/dns01"
)

// apis answers Route53, Cloud DNS, Azure DNS and Akamai for this test
// binary (see dnsapi: documented wire formats, not the real services).
var apis *dnsapi.APIs

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "certhub-acme-")
	if err == nil {
		apis, err = dnsapi.Start(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dnsapi:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func ref(name, key string) cmmeta.SecretKeySelector {
	return cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: name}, Key: key}
}

func dns01Solver(d cmacme.ACMEChallengeSolverDNS01) cmacme.ACMEChallengeSolver {
	return cmacme.ACMEChallengeSolver{DNS01: &d}
}

// providerCase is one cloud provider: a solver with good credentials, one
// whose credentials the provider refuses, and what each says.
type providerCase struct {
	name         string
	good, bad    cmacme.ACMEChallengeSolver
	authError    string // in the refused Present's error
	unknownZone  string // in the error for a name in a zone the provider does not host
	secretValues []string
	propagated   func() int // provider-side change-status polls, if the API has them
}

func providerCases() ([]providerCase, []client.Object) {
	r53, gcp, az, ak := apis.Route53, apis.CloudDNS, apis.Azure, apis.Akamai
	secrets := []client.Object{
		secret("aws", map[string][]byte{"secret": []byte("aws-secret-key-1\n"), "id": []byte(r53.AccessKeyID)}),
		secret("gcp", map[string][]byte{"key.json": gcp.ServiceAccountJSON(false)}),
		secret("gcp-other", map[string][]byte{"key.json": gcp.ServiceAccountJSON(true)}),
		secret("azure", map[string][]byte{"secret": []byte(az.ClientSecret), "wrong": []byte("azure-secret-wrong")}),
		secret("akamai", map[string][]byte{"client-token": []byte(ak.ClientToken), "client-secret": []byte(ak.ClientSecret),
			"access-token": []byte(ak.AccessToken), "wrong-token": []byte("akab-access-token-wrong")}),
	}
	azure := func(secretKey string) cmacme.ACMEChallengeSolver {
		return dns01Solver(cmacme.ACMEChallengeSolverDNS01{AzureDNS: &cmacme.ACMEIssuerDNS01ProviderAzureDNS{ClientID: az.ClientID, ClientSecret: new(ref("azure", secretKey)),
			SubscriptionID: az.SubscriptionID, TenantID: az.TenantID, ResourceGroupName: az.ResourceGroup}})
	}
	akamai := func(accessKey string) cmacme.ACMEChallengeSolver {
		return dns01Solver(cmacme.ACMEChallengeSolverDNS01{Akamai: &cmacme.ACMEIssuerDNS01ProviderAkamai{ServiceConsumerDomain: ak.Host,
			ClientToken: ref("akamai", "client-token"), ClientSecret: ref("akamai", "client-secret"), AccessToken: ref("akamai", accessKey)}})
	}
	return []providerCase{
		{
			name: "route53",
			good: dns01Solver(cmacme.ACMEChallengeSolverDNS01{Route53: &cmacme.ACMEIssuerDNS01ProviderRoute53{Region: "us-east-1",
				SecretAccessKeyID: new(ref("aws", "id")), SecretAccessKey: ref("aws", "secret")}}),
			bad: dns01Solver(cmacme.ACMEChallengeSolverDNS01{Route53: &cmacme.ACMEIssuerDNS01ProviderRoute53{Region: "us-east-1",
				AccessKeyID: "AKIDUNKNOWN", SecretAccessKey: ref("aws", "secret")}}),
			authError: "InvalidClientTokenId", unknownZone: "not found in Route 53", secretValues: []string{"aws-secret-key-1"},
			propagated: r53.Asked,
		},
		{
			name: "cloudDNS",
			good: dns01Solver(cmacme.ACMEChallengeSolverDNS01{CloudDNS: &cmacme.ACMEIssuerDNS01ProviderCloudDNS{Project: gcp.Project,
				ServiceAccount: new(ref("gcp", "key.json"))}}),
			bad: dns01Solver(cmacme.ACMEChallengeSolverDNS01{CloudDNS: &cmacme.ACMEIssuerDNS01ProviderCloudDNS{Project: gcp.Project,
				ServiceAccount: new(ref("gcp-other", "key.json"))}}),
			authError: "invalid_grant", unknownZone: "No matching GoogleCloud domain found",
			propagated: func() int { return gcp.Polled },
		},
		{
			name: "azureDNS", good: azure("secret"), bad: azure("wrong"),
			authError: "AADSTS7000215", unknownZone: "not found in AzureDNS", secretValues: []string{az.ClientSecret, "azure-secret-wrong"},
		},
		{
			name: "akamai", good: akamai("access-token"), bad: akamai("wrong-token"),
			authError: "The signature does not match", unknownZone: `Zone "other.test" does not exist`,
			secretValues: []string{ak.ClientSecret, "akab-access-token-wrong"},
		},
	}, secrets
}

// Each cloud provider, through cert-manager's own provider code and the
// hub's credential handling: Present writes the one TXT record (twice
// presented, still one), the provider's change status is polled where it
// has one, CleanUp removes it; refused credentials and a zone the account
// does not host each fail with the provider's own message, and no error
// carries a credential.
func TestCloudProviders(t *testing.T) {
	cases, secrets := providerCases()
	hub := fakeHub(t, secrets...)
	home := newFakeZone(t, "example.test.")
	other := newFakeZone(t, "other.test.")
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkSolver(tc.good, 0); err != nil {
				t.Fatalf("refused: %v", err)
			}
			env := dns01.Env{Hub: hub, Namespace: ns, Nameservers: []string{home.addr}, UserAgent: "certhub-test"}
			p, err := newProvider(ctx, env, tc.good)
			if err != nil {
				t.Fatal(err)
			}
			const fqdn = "_acme-challenge.web.example.test."
			for range 2 {
				if err := p.Present(ctx, "web.example.test", fqdn, "example.test.", "token-value"); err != nil {
					t.Fatalf("present: %v", err)
				}
			}
			if got, want := strings.Join(apis.TXT(), ","), strings.ToLower(tc.name)+" _acme-challenge.web.example.test=token-value"; got != want {
				t.Errorf("records %q, want the one TXT record %q", got, want)
			}
			if tc.propagated != nil && tc.propagated() == 0 {
				t.Error("the provider's change status was never asked (propagation)")
			}
			if err := p.CleanUp(ctx, "web.example.test", fqdn, "example.test.", "token-value"); err != nil {
				t.Fatalf("clean-up: %v", err)
			}
			if got := apis.TXT(); len(got) != 0 {
				t.Errorf("records %q after clean-up, want none", got)
			}

			bad, err := newProvider(ctx, env, tc.bad)
			if err == nil {
				err = bad.Present(ctx, "web.example.test", fqdn, "example.test.", "token-value")
			}
			if err == nil || !strings.Contains(err.Error(), tc.authError) {
				t.Errorf("refused credentials: %v, want the provider's %q", err, tc.authError)
			}
			noSecrets(t, err, tc.secretValues)

			env.Nameservers = []string{other.addr}
			elsewhere, err := newProvider(ctx, env, tc.good)
			if err == nil {
				err = elsewhere.Present(ctx, "web.other.test", "_acme-challenge.web.other.test.", "other.test.", "token-value")
			}
			if err == nil || !strings.Contains(err.Error(), tc.unknownZone) {
				t.Errorf("a zone the provider does not host: %v, want %q", err, tc.unknownZone)
			}
			if got := apis.TXT(); len(got) != 0 {
				t.Errorf("records %q after the failures, want none", got)
			}
		})
	}
}

func noSecrets(t *testing.T, err error, values []string) {
	t.Helper()
	for _, v := range values {
		if err != nil && strings.Contains(err.Error(), v) {
			t.Errorf("the error carries a credential: %v", err)
		}
	}
}

// Ambient credentials, as cert-manager's ClusterIssuers use them: a solver
// naming no credentials is refused unless --cluster-issuer-ambient-credentials
// allows it; allowed, it uses the hub's own (here from the environment the
// SDKs read: AWS keys, a Google application-default credentials file, an
// Azure workload-identity token file).
func TestAmbientCredentials(t *testing.T) {
	r53, gcp, az := apis.Route53, apis.CloudDNS, apis.Azure
	dir := t.TempDir()
	gcpFile, tokenFile := filepath.Join(dir, "gcp.json"), filepath.Join(dir, "azure-token")
	if err := os.WriteFile(gcpFile, gcp.ServiceAccountJSON(false), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(az.FederatedToken), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", r53.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-key-1")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", gcpFile)
	t.Setenv("AZURE_FEDERATED_TOKEN_FILE", tokenFile)
	t.Setenv("AZURE_CLIENT_ID", az.ClientID)
	t.Setenv("AZURE_TENANT_ID", az.TenantID)
	solvers := map[string]cmacme.ACMEChallengeSolver{
		"route53":  dns01Solver(cmacme.ACMEChallengeSolverDNS01{Route53: &cmacme.ACMEIssuerDNS01ProviderRoute53{Region: "us-east-1"}}),
		"clouddns": dns01Solver(cmacme.ACMEChallengeSolverDNS01{CloudDNS: &cmacme.ACMEIssuerDNS01ProviderCloudDNS{Project: gcp.Project}}),
		"azuredns": dns01Solver(cmacme.ACMEChallengeSolverDNS01{AzureDNS: &cmacme.ACMEIssuerDNS01ProviderAzureDNS{SubscriptionID: az.SubscriptionID,
			ResourceGroupName: az.ResourceGroup, HostedZoneName: "example.test"}}),
	}
	home := newFakeZone(t, "example.test.")
	hub := fakeHub(t)
	ctx := context.Background()
	for name, s := range solvers {
		t.Run(name, func(t *testing.T) {
			env := dns01.Env{Hub: hub, Namespace: ns, Nameservers: []string{home.addr}, UserAgent: "certhub-test"}
			p, err := newProvider(ctx, env, s)
			if err == nil {
				err = p.Present(ctx, "web.example.test", "_acme-challenge.web.example.test.", "example.test.", "v")
			}
			if err == nil || !strings.Contains(err.Error(), "ambient") {
				t.Errorf("ambient credentials off: %v, want a refusal naming them", err)
			}
			env.Ambient = true
			if p, err = newProvider(ctx, env, s); err != nil {
				t.Fatal(err)
			}
			if err := p.Present(ctx, "web.example.test", "_acme-challenge.web.example.test.", "example.test.", "v"); err != nil {
				t.Fatalf("present with the hub's own credentials: %v", err)
			}
			if err := p.CleanUp(ctx, "web.example.test", "_acme-challenge.web.example.test.", "example.test.", "v"); err != nil {
				t.Fatalf("clean-up: %v", err)
			}
			if got := apis.TXT(); len(got) != 0 {
				t.Errorf("records %q left", got)
			}
		})
	}
}

// A provider that refuses the hub's credentials fails the order
// (PresentFailed) with the provider's message, leaves no TXT record, and
// the order's message carries no credential.
func TestRefusedCredentialsFailTheOrder(t *testing.T) {
	cases, secrets := providerCases()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ca := newFakeCA(t)
			home := newFakeZone(t, "example.test.")
			clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
			s, hub := newTestService(t, ca.Server, clk, func(o *Options) { o.DNS01Nameservers = []string{home.addr} })
			ctx := context.Background()
			for _, o := range secrets {
				sec, ok := o.DeepCopyObject().(client.Object)
				if !ok {
					t.Fatalf("%T is not an object", o)
				}
				if err := hub.Create(ctx, sec); err != nil {
					t.Fatal(err)
				}
			}
			ci := &cmapi.ClusterIssuer{}
			if err := hub.Get(ctx, client.ObjectKey{Name: "le"}, ci); err != nil {
				t.Fatal(err)
			}
			ci.Spec.ACME.Solvers = []cmacme.ACMEChallengeSolver{tc.bad}
			if err := hub.Update(ctx, ci); err != nil {
				t.Fatal(err)
			}
			ord := newTestOrder(t)
			if err := hub.Create(ctx, ord); err != nil {
				t.Fatal(err)
			}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ord)}
			got := &hubapi.ACMEOrder{}
			for range 8 {
				if _, err := s.reconcileOrder(ctx, req); err != nil {
					t.Logf("step: %v", err)
				}
				if err := hub.Get(ctx, req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
				if done(got) {
					break
				}
			}
			if got.Status.State != hubapi.ACMEOrderErrored || got.Status.Reason != ReasonPresentFailed || !strings.Contains(got.Status.Message, tc.authError) {
				t.Errorf("order %s/%s %q, want Errored/%s with the provider's %q", got.Status.State, got.Status.Reason, got.Status.Message, ReasonPresentFailed, tc.authError)
			}
			for _, v := range tc.secretValues {
				if strings.Contains(got.Status.Message, v) {
					t.Errorf("the order's message carries a credential: %q", got.Status.Message)
				}
			}
			if txt := apis.TXT(); len(txt) != 0 {
				t.Errorf("records %q left", txt)
			}
		})
	}
}

// Route53's auth.kubernetes.serviceAccountRef, as cert-manager does it: a
// token of a ServiceAccount in the hub namespace (audience
// sts.amazonaws.com unless told) is exchanged at STS for the solver's role,
// whose credentials write the record; a role STS refuses for that token is
// the provider's message; a ServiceAccount without a name is refused.
func TestRoute53ServiceAccountToken(t *testing.T) {
	r53 := apis.Route53
	hub := fakeHub(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "route53-dns01"}})
	home := newFakeZone(t, "example.test.")
	solver := func(role, sa string) cmacme.ACMEChallengeSolver {
		return dns01Solver(cmacme.ACMEChallengeSolverDNS01{Route53: &cmacme.ACMEIssuerDNS01ProviderRoute53{Region: "us-east-1", Role: role,
			Auth: &cmacme.Route53Auth{Kubernetes: &cmacme.Route53KubernetesAuth{ServiceAccountRef: &cmacme.ServiceAccountRef{Name: sa}}}}})
	}
	ctx := context.Background()
	env := dns01.Env{Hub: hub, Namespace: ns, Nameservers: []string{home.addr}, UserAgent: "certhub-test"} // ambient off: not needed
	p, err := newProvider(ctx, env, solver(r53.RoleARN, "route53-dns01"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Present(ctx, "web.example.test", "_acme-challenge.web.example.test.", "example.test.", "v"); err != nil {
		t.Fatalf("present with the assumed role: %v", err)
	}
	if got := strings.Join(apis.TXT(), ","); got != "route53 _acme-challenge.web.example.test=v" {
		t.Errorf("records %q", got)
	}
	if err := p.CleanUp(ctx, "web.example.test", "_acme-challenge.web.example.test.", "example.test.", "v"); err != nil {
		t.Fatal(err)
	}
	_, err = newProvider(ctx, env, solver("arn:aws:iam::000000000000:role/other", "route53-dns01"))
	if err == nil || !strings.Contains(err.Error(), "InvalidIdentityToken") {
		t.Errorf("a role STS refuses: %v, want InvalidIdentityToken", err)
	}
	if _, err := newProvider(ctx, env, solver(r53.RoleARN, "")); err == nil || !strings.Contains(err.Error(), "serviceAccountRef needs a name") {
		t.Errorf("no ServiceAccount name: %v", err)
	}
}
