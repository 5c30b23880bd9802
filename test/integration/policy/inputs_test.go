package policy

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/test/fixture"
)

// Registrations named as Argo CD's own examples name them
// ("mycluster.example.com") or with capitals ("Prod-EU") are connected and
// issued under a policy without {{cluster}}, denied under a {{cluster}}
// pattern, and `certhub status` shows why. Each is one namespace of the
// third downstream API server, which no other registration covers; a
// neighbour on cluster-1 issues meanwhile.
func TestRegistrationNamesArgoCDAccepts(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[2]
	names := map[string]string{"mycluster.example.com": "dotted", "Prod-EU": "upper"} // cluster → its namespace
	for cluster, ns := range names {
		fixture.EnsureNamespace(t, cp.Client, ns)
		s, err := bed.RegisterNamespaced(ctx, cp, cluster, ns)
		if err != nil {
			t.Fatalf("register %q: %v", cluster, err)
		}
		t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), s) })
	}
	createPolicy(t, fixture.Policy("argo-names-shop", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchNames: []string{"mycluster.example.com", "Prod-EU"}}},
		Allowed:  hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*.shop.example.com"}, DNSNames: fixture.Values("*.shop.example.com")},
	}))
	createPolicy(t, fixture.Policy("argo-names-own", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchNames: []string{"mycluster.example.com", "Prod-EU"}}},
		Allowed:  hubapi.PolicyAllowed{DNSNames: fixture.Values("*.{{cluster}}.example.com")},
	}))
	neighbourNS := "argo-names-neighbour"
	createPolicy(t, fixture.Policy("argo-names-neighbour", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(neighbourNS)}, Allowed: anyName()}))
	neighbour := create(t, bed.Downstreams[0], fixture.Certificate(neighbourNS, "web", issuerName, fixture.WithNames("web.example.com", "web.example.com")))
	for cluster, ns := range names {
		shop := create(t, cp, fixture.Certificate(ns, "shop", issuerName, fixture.WithNames("www.shop.example.com", "www.shop.example.com")))
		own := "www." + strings.ToLower(cluster) + ".example.com"
		clusterPattern := create(t, cp, fixture.Certificate(ns, "own", issuerName, fixture.WithNames("", own)))
		fixture.WaitReady(t, cp.Client, shop)
		denied(t, cp, clusterPattern, `spec.dnsNames "`+own+`" is not allowed (allowed: *.{{cluster}}.example.com)`)

		var out bytes.Buffer
		cmd := app.NewCommand()
		cmd.SetArgs([]string{"status", "--kubeconfig", env.Kubeconfig, "--namespace", bed.HubNamespace(),
			"--cluster-secret-namespace", bed.ArgoNamespace(), "--timeout", "5s", "--cluster", cluster})
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("certhub status --cluster %s: %v\n%s", cluster, err, out.String())
		}
		shopRow := false
		for _, l := range strings.Split(out.String(), "\n") {
			f := strings.Fields(l)
			shopRow = shopRow || len(f) > 2 && f[0] == ns && f[1] == "shop" && f[2] == "True"
		}
		if want := `warning: name "` + cluster + `" is not a DNS label`; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "Connected") || !shopRow {
			t.Errorf("certhub status --cluster %s does not show it connected, %s/shop Ready and %q:\n%s", cluster, ns, want, out.String())
		}
	}
	fixture.WaitReady(t, bed.Downstreams[0].Client, neighbour)
}

// literalSubject attributes that only it can carry (DC, UID, OID-typed)
// are allowed and refused by their IssuancePolicy fields, as the subject
// fields are: cert-manager's LDAP-style subjects issue where a policy
// lists them.
func TestLiteralSubjectAttributesByTheirFields(t *testing.T) {
	const ns = "ldap-subjects"
	createPolicy(t, fixture.Policy("ldap", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)},
		Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"},
			Subject: &hubapi.SubjectAllowed{DomainComponents: fixture.Values("example", "com"), UserIDs: fixture.Values("svc-*")}},
	}))
	cp := bed.Downstreams[1]
	literal := func(name, subject string) *cmapi.Certificate {
		return fixture.Certificate(ns, name, issuerName, fixture.WithNames(""), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.LiteralSubject = subject }))
	}
	ok := create(t, cp, literal("ldap-ok", "CN=web,UID=svc-web,DC=example,DC=com"))
	evil := create(t, cp, literal("ldap-evil", "CN=web,DC=evil,DC=com"))
	crt := fixture.WaitReady(t, cp.Client, ok)
	cert := leaf(t, fixture.GetSecret(t, cp.Client, crt))
	got := map[string][]string{}
	for _, atv := range cert.Subject.Names {
		got[atv.Type.String()] = append(got[atv.Type.String()], fmt.Sprint(atv.Value))
	}
	if dc, uid := got["0.9.2342.19200300.100.1.25"], got["0.9.2342.19200300.100.1.1"]; len(dc) != 2 || len(uid) != 1 || uid[0] != "svc-web" {
		t.Errorf("issued subject %v: want the literalSubject's two DC and its UID", cert.Subject.Names)
	}
	denied(t, cp, evil, `(ldap); ldap: spec.literalSubject DC "evil" is not allowed (allowed: example, com)`)
}

// A kept sub-CA is held to today's policy: narrowing the policy that
// allowed it (its names from *.example.com to *.dev.example.com, maxPathLen
// 1 to 0) re-issues it with the new powers, while a leaf beside it is
// left alone.
func TestNarrowedPolicyReissuesAKeptSubCA(t *testing.T) {
	const ns = "narrowed-sub-ca"
	cp := bed.Downstreams[1]
	one := 1
	p := fixture.Policy("narrowed-sub-ca", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)},
		Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*.example.com"), IsCA: true, MaxPathLen: &one}})
	createPolicy(t, p)
	subCA := create(t, cp, fixture.Certificate(ns, "team-ca", issuerName, fixture.WithNames("Team CA"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true })))
	web := create(t, cp, fixture.Certificate(ns, "web", issuerName, fixture.WithNames("web.dev.example.com", "web.dev.example.com")))
	crt := fixture.WaitReady(t, cp.Client, subCA)
	before := leaf(t, fixture.GetSecret(t, cp.Client, crt))
	leafBefore := leaf(t, fixture.GetSecret(t, cp.Client, fixture.WaitReady(t, cp.Client, web)))
	if before.MaxPathLen != 1 || !slices.Equal(before.PermittedDNSDomains, []string{".example.com"}) {
		t.Fatalf("sub-CA issued with maxPathLen %d, permitted DNS %v; want the policy's", before.MaxPathLen, before.PermittedDNSDomains)
	}
	obj := fixture.PolicyObject(p)
	if err := bed.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	zero := 0
	narrowed := fixture.PolicyObject(fixture.Policy(p.Name, hubapi.IssuancePolicySpec{Selector: p.Spec.Selector,
		Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*.dev.example.com"), IsCA: true, MaxPathLen: &zero}}))
	narrowed.SetResourceVersion(obj.GetResourceVersion())
	if err := bed.Hub.Client.Update(context.Background(), narrowed); err != nil {
		t.Fatal(err)
	}
	var after *x509.Certificate
	fixture.WaitFor(t, cp.Client, subCA, "re-issued under the narrowed policy", func(c *cmapi.Certificate) bool {
		s := &corev1.Secret{}
		if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: c.Spec.SecretName}, s); err != nil {
			return false
		}
		after = leaf(t, s)
		return fixture.IsReady(c) && after.SerialNumber.Cmp(before.SerialNumber) != 0
	})
	if after.MaxPathLen != 0 || !after.MaxPathLenZero || !slices.Equal(after.PermittedDNSDomains, []string{".dev.example.com"}) {
		t.Errorf("re-issued sub-CA: maxPathLen %d, permitted DNS %v; want 0 and .dev.example.com", after.MaxPathLen, after.PermittedDNSDomains)
	}
	if now := leaf(t, fixture.GetSecret(t, cp.Client, fixture.WaitReady(t, cp.Client, web))); now.SerialNumber.Cmp(leafBefore.SerialNumber) != 0 {
		t.Error("the leaf beside it, still allowed as it is, was re-issued")
	}
}
