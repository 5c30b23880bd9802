package acme

import (
	"context"
	"fmt"
	"slices"
	"strings"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/acmedns"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/cloudflare"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/digitalocean"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/rfc2136"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reasons of a Certificate that no solver can serve.
const (
	// ReasonUnsupportedSolver: the solver chosen for a name is of a type the
	// hub does not run (http01, webhook, or a DNS provider not wired).
	ReasonUnsupportedSolver = "UnsupportedSolver"
	// ReasonNoSolver: no solver of the ClusterIssuer selects the name.
	ReasonNoSolver = "NoSolverFound"
	// ReasonSolverConfig: the chosen solver's configuration or credentials
	// are unusable (e.g. its TSIG Secret is missing).
	ReasonSolverConfig = "InvalidSolverConfig"
)

// SupportedSolvers says what the hub solves, for messages.
const SupportedSolvers = "dns01 with rfc2136, cloudflare, digitalocean or acmeDNS"

// dnsProvider writes and removes TXT records. domain is the identifier
// (without "*."), fqdn the record, zone the zone found for it.
type dnsProvider interface {
	Present(ctx context.Context, domain, fqdn, zone, value string) error
	CleanUp(ctx context.Context, domain, fqdn, zone, value string) error
}

// zoneProvider is cert-manager's rfc2136 provider, which is told the zone.
type zoneProvider struct{ p *rfc2136.DNSProvider }

func (z zoneProvider) Present(_ context.Context, domain, fqdn, zone, value string) error {
	return z.p.Present(domain, fqdn, zone, value)
}

func (z zoneProvider) CleanUp(_ context.Context, domain, fqdn, zone, value string) error {
	return z.p.CleanUp(domain, fqdn, zone, value)
}

// apiProvider is one of cert-manager's API providers (acmeDNS, …), which
// find their zone or record themselves.
type apiProvider struct {
	p interface {
		Present(ctx context.Context, domain, fqdn, value string) error
		CleanUp(ctx context.Context, domain, fqdn, value string) error
	}
}

func (a apiProvider) Present(ctx context.Context, domain, fqdn, _, value string) error {
	return a.p.Present(ctx, domain, fqdn, value)
}

func (a apiProvider) CleanUp(ctx context.Context, domain, fqdn, _, value string) error {
	return a.p.CleanUp(ctx, domain, fqdn, value)
}

// solverError is a solver problem a Certificate's condition reports.
type solverError struct{ reason, message string }

func (e *solverError) Error() string { return e.reason + ": " + e.message }

// chooseSolver returns the index of the solver that serves dnsName for a
// Certificate with labels, as cert-manager chooses: a solver whose
// selector lists the name exactly wins over one whose dnsZones contain it
// (the longest zone first), which wins over one matching only labels (the
// most labels first), which wins over one without a selector; among equals
// the first listed. Solvers whose matchLabels do not all match are skipped.
func chooseSolver(solvers []cmacme.ACMEChallengeSolver, dnsName string, labels map[string]string) (int, error) {
	best, bestScore := -1, [3]int{-1, -1, -1}
	name := strings.TrimPrefix(dnsName, "*.")
	for i, s := range solvers {
		score := [3]int{0, 0, 0} // exact name, zone length, labels
		if sel := s.Selector; sel != nil {
			ok := true
			for k, v := range sel.MatchLabels {
				if labels[k] != v {
					ok = false
				}
			}
			score[2] = len(sel.MatchLabels)
			if len(sel.DNSNames) > 0 {
				ok = ok && slices.Contains(sel.DNSNames, dnsName)
				score[0] = 1
			}
			if len(sel.DNSZones) > 0 && score[0] == 0 {
				zl := -1
				for _, z := range sel.DNSZones {
					z = strings.TrimSuffix(z, ".")
					if (name == z || strings.HasSuffix(name, "."+z)) && len(z) > zl {
						zl = len(z)
					}
				}
				ok = ok && zl >= 0
				score[1] = zl
			}
			if !ok {
				continue
			}
		}
		if less(bestScore, score) {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return -1, &solverError{ReasonNoSolver, fmt.Sprintf("no solver of the ClusterIssuer selects %q (check spec.acme.solvers[].selector)", dnsName)}
	}
	return best, nil
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// checkSolver says whether the hub can run solver s.
func checkSolver(s cmacme.ACMEChallengeSolver, index int) error {
	switch {
	case s.HTTP01 != nil:
		return &solverError{ReasonUnsupportedSolver, fmt.Sprintf("solver %d is http01; the hub solves only %s (HTTP-01 would need a solver in every downstream cluster)", index, SupportedSolvers)}
	case s.DNS01 == nil:
		return &solverError{ReasonUnsupportedSolver, fmt.Sprintf("solver %d has no dns01 configuration; the hub solves %s", index, SupportedSolvers)}
	case s.DNS01.RFC2136 != nil, s.DNS01.AcmeDNS != nil, s.DNS01.Cloudflare != nil, s.DNS01.DigitalOcean != nil:
		return nil
	case s.DNS01.Webhook != nil:
		return &solverError{ReasonUnsupportedSolver, fmt.Sprintf("solver %d is a dns01 webhook; the hub solves %s", index, SupportedSolvers)}
	default:
		return &solverError{ReasonUnsupportedSolver, fmt.Sprintf("solver %d uses a dns01 provider the hub does not run yet; it solves %s", index, SupportedSolvers)}
	}
}

// newProvider builds solver s's DNS provider; credentials are read from
// Secrets in the hub namespace only.
func newProvider(ctx context.Context, secrets client.Reader, namespace string, nameservers []string, userAgent string, s cmacme.ACMEChallengeSolver) (dnsProvider, error) {
	if err := checkSolver(s, 0); err != nil {
		return nil, err
	}
	if cf := s.DNS01.Cloudflare; cf != nil {
		var key, token []byte
		var err error
		if cf.APIKey != nil {
			if key, err = secretValue(ctx, secrets, namespace, *cf.APIKey); err != nil {
				return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("cloudflare API key: %v", err)}
			}
		}
		if cf.APIToken != nil {
			if token, err = secretValue(ctx, secrets, namespace, *cf.APIToken); err != nil {
				return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("cloudflare API token: %v", err)}
			}
		}
		p, err := cloudflare.NewDNSProviderCredentials(cf.Email, strings.TrimSpace(string(key)), strings.TrimSpace(string(token)), nameservers, userAgent)
		if err != nil {
			return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("cloudflare: %v", err)}
		}
		return apiProvider{p}, nil
	}
	if do := s.DNS01.DigitalOcean; do != nil {
		token, err := secretValue(ctx, secrets, namespace, do.Token)
		if err != nil {
			return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("digitalocean token: %v", err)}
		}
		p, err := digitalocean.NewDNSProviderCredentials(strings.TrimSpace(string(token)), nameservers, userAgent)
		if err != nil {
			return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("digitalocean: %v", err)}
		}
		return apiProvider{p}, nil
	}
	if a := s.DNS01.AcmeDNS; a != nil {
		accounts, err := secretValue(ctx, secrets, namespace, a.AccountSecret)
		if err != nil {
			return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("acmeDNS account secret: %v", err)}
		}
		p, err := acmedns.NewDNSProviderHostBytes(a.Host, accounts, nameservers)
		if err != nil {
			return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("acmeDNS: %v", err)}
		}
		return apiProvider{p}, nil
	}
	c := s.DNS01.RFC2136
	secret := ""
	if c.TSIGSecret.Name != "" {
		v, err := secretValue(ctx, secrets, namespace, c.TSIGSecret)
		if err != nil {
			return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("rfc2136 TSIG secret: %v", err)}
		}
		secret = string(v)
	}
	p, err := rfc2136.NewDNSProviderCredentials(c.Nameserver, c.TSIGAlgorithm, c.TSIGKeyName, secret, rfc2136.WithNetwork(string(c.Protocol)))
	if err != nil {
		return nil, &solverError{ReasonSolverConfig, fmt.Sprintf("rfc2136: %v", err)}
	}
	return zoneProvider{p}, nil
}

// secretValue reads one key of a Secret in the hub namespace.
func secretValue(ctx context.Context, secrets client.Reader, namespace string, sel cmmeta.SecretKeySelector) ([]byte, error) {
	sec := &corev1.Secret{}
	if err := secrets.Get(ctx, client.ObjectKey{Namespace: namespace, Name: sel.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %s/%s not found", namespace, sel.Name)
		}
		return nil, err
	}
	v, ok := sec.Data[sel.Key]
	if !ok {
		return nil, fmt.Errorf("secret %s/%s has no key %q", namespace, sel.Name, sel.Key)
	}
	return v, nil
}
