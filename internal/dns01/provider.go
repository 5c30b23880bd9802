package dns01

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	whapi "github.com/cert-manager/cert-manager/pkg/acme/webhook/apis/acme/v1alpha1"
	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/acmedns"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/akamai"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/azuredns"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/clouddns"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/cloudflare"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/digitalocean"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/rfc2136"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/route53"
	webhookslv "github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/webhook"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Provider writes and removes TXT records. domain is the identifier
// (without "*."), fqdn the record, zone the zone found for it.
type Provider interface {
	Present(ctx context.Context, domain, fqdn, zone, value string) error
	CleanUp(ctx context.Context, domain, fqdn, zone, value string) error
}

// Env is what building a solver's provider needs from the hub.
type Env struct {
	// Hub reads credential Secrets and creates ServiceAccount tokens, in
	// Namespace only.
	Hub       client.Client
	Namespace string
	// Nameservers are the providers' own zone lookups (--dns01-recursive-nameservers).
	Nameservers []string
	UserAgent   string
	// Ambient lets a solver without credentials use the hub's own (its
	// ServiceAccount's workload identity, the node's instance role), as
	// cert-manager's --cluster-issuer-ambient-credentials does.
	Ambient bool
	// Webhook calls webhook solvers through the hub API server; nil: none.
	Webhook *Webhook
}

// ConfigError is a solver whose configuration or credentials cannot be
// used (a Secret missing, a field combination refused, the provider's own
// refusal at construction); its message has the credentials redacted.
type ConfigError struct{ Message string }

func (e *ConfigError) Error() string { return e.Message }

// New builds the DNS provider of a dns01 solver naming exactly one
// provider, with cert-manager's own provider code and configuration
// fields. Credentials are read from Secrets in the hub namespace only, and
// every error it or the provider returns has their values redacted. A
// configuration it cannot use is a *ConfigError.
func New(ctx context.Context, env Env, d *cmacme.ACMEChallengeSolverDNS01) (Provider, error) {
	if d == nil {
		return nil, &ConfigError{"the solver has no dns01 configuration"}
	}
	c := &creds{ctx: ctx, env: env}
	p, err := buildProvider(ctx, c, d)
	if err != nil {
		return nil, &ConfigError{c.redact(err.Error())}
	}
	return redacting{p, c.secrets}, nil
}

// buildProvider is newProvider's switch over the providers.
func buildProvider(ctx context.Context, c *creds, d *cmacme.ACMEChallengeSolverDNS01) (Provider, error) {
	env := c.env
	switch {
	case d.Route53 != nil:
		r := d.Route53
		keyID := strings.TrimSpace(r.AccessKeyID)
		if r.SecretAccessKeyID != nil {
			if keyID != "" {
				return nil, errors.New("route53: accessKeyID and accessKeyIDSecretRef cannot both be specified")
			}
			keyID = c.value("route53 accessKeyIDSecretRef", *r.SecretAccessKeyID)
		}
		secretKey := ""
		if r.SecretAccessKey.Name != "" {
			secretKey = c.value("route53 secretAccessKeySecretRef", r.SecretAccessKey)
		}
		token := ""
		if a := r.Auth; a != nil && a.Kubernetes != nil && a.Kubernetes.ServiceAccountRef != nil {
			token = c.serviceAccountToken("route53", a.Kubernetes.ServiceAccountRef.Name, a.Kubernetes.ServiceAccountRef.TokenAudiences)
		}
		if c.err != nil {
			return nil, c.err
		}
		p, err := route53.NewDNSProvider(ctx, keyID, secretKey, r.HostedZoneID, r.Region, r.Role, token, env.Ambient, env.Nameservers, env.UserAgent)
		if err != nil {
			return nil, fmt.Errorf("route53: %w", err)
		}
		return apiProvider{p}, nil
	case d.CloudDNS != nil:
		var key []byte
		if sa := d.CloudDNS.ServiceAccount; sa != nil {
			key = []byte(c.value("cloudDNS serviceAccountSecretRef", *sa))
		}
		if c.err != nil {
			return nil, c.err
		}
		p, err := clouddns.NewDNSProvider(ctx, d.CloudDNS.Project, key, env.Nameservers, env.Ambient, d.CloudDNS.HostedZoneName)
		if err != nil {
			return nil, fmt.Errorf("cloudDNS: %w", err)
		}
		return apiProvider{p}, nil
	case d.AzureDNS != nil:
		a := d.AzureDNS
		secret := ""
		if a.ClientID != "" { // without it, cert-manager uses workload or managed identity (ambient)
			if a.ClientSecret == nil {
				return nil, errors.New("azureDNS: clientID needs clientSecretSecretRef")
			}
			secret = c.value("azureDNS clientSecretSecretRef", *a.ClientSecret)
		}
		if c.err != nil {
			return nil, c.err
		}
		p, err := azuredns.NewDNSProviderCredentials(string(a.Environment), a.ClientID, secret, a.SubscriptionID, a.TenantID, a.ResourceGroupName,
			a.HostedZoneName, env.Nameservers, env.Ambient, a.ManagedIdentity, azuredns.WithAzureZone(a.ZoneType))
		if err != nil {
			return nil, fmt.Errorf("azureDNS: %w", err)
		}
		return apiProvider{p}, nil
	case d.Akamai != nil:
		a := d.Akamai
		clientToken := c.value("akamai clientTokenSecretRef", a.ClientToken)
		clientSecret := c.value("akamai clientSecretSecretRef", a.ClientSecret)
		accessToken := c.value("akamai accessTokenSecretRef", a.AccessToken)
		if c.err != nil {
			return nil, c.err
		}
		p, err := akamai.NewDNSProvider(a.ServiceConsumerDomain, clientToken, clientSecret, accessToken, env.Nameservers)
		if err != nil {
			return nil, fmt.Errorf("akamai: %w", err)
		}
		return apiProvider{p}, nil
	case d.Cloudflare != nil:
		cf := d.Cloudflare
		if cf.APIKey != nil && cf.APIToken != nil {
			return nil, errors.New("cloudflare: apiKeySecretRef and apiTokenSecretRef cannot both be specified")
		}
		var key, token string
		if cf.APIKey != nil {
			key = c.value("cloudflare apiKeySecretRef", *cf.APIKey)
		}
		if cf.APIToken != nil {
			token = c.value("cloudflare apiTokenSecretRef", *cf.APIToken)
		}
		if c.err != nil {
			return nil, c.err
		}
		p, err := cloudflare.NewDNSProviderCredentials(cf.Email, key, token, env.Nameservers, env.UserAgent)
		if err != nil {
			return nil, fmt.Errorf("cloudflare: %w", err)
		}
		return apiProvider{p}, nil
	case d.DigitalOcean != nil:
		token := c.value("digitalocean tokenSecretRef", d.DigitalOcean.Token)
		if c.err != nil {
			return nil, c.err
		}
		p, err := digitalocean.NewDNSProviderCredentials(token, env.Nameservers, env.UserAgent)
		if err != nil {
			return nil, fmt.Errorf("digitalocean: %w", err)
		}
		return apiProvider{p}, nil
	case d.AcmeDNS != nil:
		accounts := c.raw("acmeDNS accountSecretRef", d.AcmeDNS.AccountSecret)
		if c.err != nil {
			return nil, c.err
		}
		p, err := acmedns.NewDNSProviderHostBytes(d.AcmeDNS.Host, accounts, env.Nameservers)
		if err != nil {
			return nil, fmt.Errorf("acmeDNS: %w", err)
		}
		return apiProvider{p}, nil
	case d.Webhook != nil:
		if d.Webhook.GroupName == "" || d.Webhook.SolverName == "" {
			return nil, errors.New("a dns01 webhook needs groupName and solverName")
		}
		if env.Webhook == nil {
			return nil, errors.New("webhook solvers are not available: the hub has no API server configuration for them")
		}
		return webhookProvider{caller: env.Webhook, cfg: d.Webhook, namespace: env.Namespace, ambient: env.Ambient}, nil
	}
	r := d.RFC2136
	secret := ""
	if r.TSIGSecret.Name != "" {
		secret = string(c.raw("rfc2136 tsigSecretSecretRef", r.TSIGSecret))
	}
	if c.err != nil {
		return nil, c.err
	}
	p, err := rfc2136.NewDNSProviderCredentials(r.Nameserver, r.TSIGAlgorithm, r.TSIGKeyName, secret, rfc2136.WithNetwork(string(r.Protocol)))
	if err != nil {
		return nil, fmt.Errorf("rfc2136: %w", err)
	}
	return zoneProvider{p}, nil
}

// creds reads a solver's credentials, remembering the first error and
// every value read (for redaction).
type creds struct {
	ctx     context.Context
	env     Env
	err     error
	secrets []string
}

// raw reads one key of a Secret in the hub namespace.
func (c *creds) raw(field string, sel cmmeta.SecretKeySelector) []byte {
	if c.err != nil {
		return nil
	}
	v, err := SecretValue(c.ctx, c.env.Hub, c.env.Namespace, sel)
	if err != nil {
		c.err = fmt.Errorf("%s: %w", field, err)
		return nil
	}
	if s := strings.TrimSpace(string(v)); len(s) >= 4 {
		c.secrets = append(c.secrets, s)
	}
	return v
}

// value is raw, trimmed of surrounding white space as cert-manager does.
func (c *creds) value(field string, sel cmmeta.SecretKeySelector) string {
	return strings.TrimSpace(string(c.raw(field, sel)))
}

// serviceAccountToken requests a token of a ServiceAccount in the hub
// namespace (Route53's auth.kubernetes.serviceAccountRef; audience
// sts.amazonaws.com unless told), as cert-manager does in its namespace.
func (c *creds) serviceAccountToken(field, name string, audiences []string) string {
	if c.err != nil {
		return ""
	}
	if name == "" {
		c.err = errors.New(field + ": serviceAccountRef needs a name")
		return ""
	}
	if len(audiences) == 0 {
		audiences = []string{"sts.amazonaws.com"}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: c.env.Namespace, Name: name}}
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: new(int64(600))}}
	if err := c.env.Hub.SubResource("token").Create(c.ctx, sa, tr); err != nil {
		c.err = fmt.Errorf("%s: token of ServiceAccount %s/%s: %w", field, c.env.Namespace, name, err)
		return ""
	}
	c.secrets = append(c.secrets, tr.Status.Token)
	return tr.Status.Token
}

// redact replaces every credential read in msg.
func (c *creds) redact(msg string) string { return redactAll(msg, c.secrets) }

func redactAll(msg string, secrets []string) string {
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	return msg
}

// redacting is a provider whose errors never carry its credentials.
type redacting struct {
	p       Provider
	secrets []string
}

func (r redacting) Present(ctx context.Context, domain, fqdn, zone, value string) error {
	return r.wrap(r.p.Present(ctx, domain, fqdn, zone, value))
}

func (r redacting) CleanUp(ctx context.Context, domain, fqdn, zone, value string) error {
	return r.wrap(r.p.CleanUp(ctx, domain, fqdn, zone, value))
}

func (r redacting) wrap(err error) error {
	if err == nil || len(r.secrets) == 0 {
		return err
	}
	if msg := err.Error(); redactAll(msg, r.secrets) != msg {
		return errors.New(redactAll(msg, r.secrets)) // the chain would still print them
	}
	return err
}

// zoneProvider is cert-manager's rfc2136 provider, which is told the zone.
type zoneProvider struct{ p *rfc2136.DNSProvider }

func (z zoneProvider) Present(_ context.Context, domain, fqdn, zone, value string) error {
	return z.p.Present(domain, fqdn, zone, value)
}

func (z zoneProvider) CleanUp(_ context.Context, domain, fqdn, zone, value string) error {
	return z.p.CleanUp(domain, fqdn, zone, value)
}

// apiProvider is one of cert-manager's API providers (route53, acmeDNS,
// …), which find their zone or record themselves.
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

// Webhook is cert-manager's webhook solver client, set up once with the
// hub API server's configuration: every webhook solver is an aggregated API
// there (/apis/<groupName>/v1alpha1/<solverName>).
type Webhook struct {
	once sync.Once
	cfg  *rest.Config
	w    webhookslv.Webhook
	err  error
}

// NewWebhook returns the client of webhook solvers reached through the API
// server cfg reaches; nil when cfg is.
func NewWebhook(cfg *rest.Config) *Webhook {
	if cfg == nil {
		return nil
	}
	return &Webhook{cfg: cfg}
}

func (c *Webhook) solver() (*webhookslv.Webhook, error) {
	c.once.Do(func() { c.err = c.w.Initialize(c.cfg, nil) })
	return &c.w, c.err
}

// webhookProvider sends cert-manager's ChallengeRequest for one challenge:
// the solver's whole webhook configuration, the zone the hub found, the hub
// namespace as the namespace of its credentials.
type webhookProvider struct {
	caller    *Webhook
	cfg       *cmacme.ACMEIssuerDNS01ProviderWebhook
	namespace string
	ambient   bool
}

func (w webhookProvider) request(domain, fqdn, zone, value string) (*whapi.ChallengeRequest, error) {
	raw, err := json.Marshal(w.cfg)
	if err != nil {
		return nil, err
	}
	return &whapi.ChallengeRequest{Type: "dns-01", DNSName: domain, Key: value, ResolvedFQDN: fqdn, ResolvedZone: zone,
		ResourceNamespace: w.namespace, AllowAmbientCredentials: w.ambient, Config: &apiextensionsv1.JSON{Raw: raw}}, nil
}

func (w webhookProvider) Present(_ context.Context, domain, fqdn, zone, value string) error {
	return w.call(domain, fqdn, zone, value, (*webhookslv.Webhook).Present)
}

func (w webhookProvider) CleanUp(_ context.Context, domain, fqdn, zone, value string) error {
	return w.call(domain, fqdn, zone, value, (*webhookslv.Webhook).CleanUp)
}

func (w webhookProvider) call(domain, fqdn, zone, value string, do func(*webhookslv.Webhook, *whapi.ChallengeRequest) error) error {
	s, err := w.caller.solver()
	if err != nil {
		return err
	}
	req, err := w.request(domain, fqdn, zone, value)
	if err != nil {
		return err
	}
	if err := do(s, req); err != nil {
		return fmt.Errorf("webhook solver %s/%s: %w", w.cfg.GroupName, w.cfg.SolverName, err)
	}
	return nil
}

// SecretValue reads one key of a Secret in namespace (the hub's).
func SecretValue(ctx context.Context, secrets client.Reader, namespace string, sel cmmeta.SecretKeySelector) ([]byte, error) {
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
