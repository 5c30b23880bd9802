package acme

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/dns01"
)

// Defaults for Options.
const (
	// DefaultRequestTimeout bounds each request to the ACME server (and one
	// order step's requests together).
	DefaultRequestTimeout = 30 * time.Second
	// DefaultHoldDuration is how long a replica's claim on an order lasts
	// without renewal: after a holder's death, another replica resumes the
	// same order this long after its last step.
	DefaultHoldDuration = 15 * time.Second
	// DefaultPollInterval is how often a Certificate whose order runs asks
	// again (a finished order also wakes it at once), and the order
	// controller polls the CA while it validates or issues (half of it).
	DefaultPollInterval = time.Second
	// DefaultDNS01CheckInterval is how often the propagation of the TXT
	// records is checked.
	DefaultDNS01CheckInterval = 500 * time.Millisecond
	// DefaultPropagationTimeout ends an order whose TXT records never show.
	DefaultPropagationTimeout = 10 * time.Minute
	// DefaultFinalizeWait bounds the wait for the certificate after finalize
	// within one step; past it, later steps poll the order.
	DefaultFinalizeWait = 2 * time.Second
	// DefaultOrderRetention is how long a finished order (and its key
	// Secret) is kept for `kubectl get acmeorders` and for its Certificate
	// to pick up.
	DefaultOrderRetention = time.Hour
	// DefaultRetryBase and DefaultRetryMax bound the back-off after failed
	// orders of one issuance: 5m, 10m, 20m, 40m, then every hour.
	DefaultRetryBase = 5 * time.Minute
	DefaultRetryMax  = time.Hour
	// DefaultMaxConcurrentOrders is how many order steps run at once.
	DefaultMaxConcurrentOrders = 16
	// DefaultRenewalInfoInterval is how often the CA is asked for each
	// issued certificate's renewal window (ARI) at the most; sooner when
	// its Retry-After says so. Let's Encrypt answers with 6 hours.
	DefaultRenewalInfoInterval = 6 * time.Hour
)

// Options configure the ACME service.
type Options struct {
	// Namespace holds the account key, EAB, solver credential Secrets and
	// the ACMEOrders (the hub namespace). Required.
	Namespace string
	// Identity names this replica as an order's holder. Required for orders.
	Identity string
	// RequestTimeout defaults to DefaultRequestTimeout.
	RequestTimeout time.Duration
	// UserAgent is sent to the ACME server. Defaults to "certhub".
	UserAgent string
	// DNS01Nameservers are asked for zones and TXT propagation
	// (cert-manager's --dns01-recursive-nameservers, host:port). Defaults to
	// the system's resolvers.
	DNS01Nameservers []string
	// DNS01CheckAuthoritative checks propagation on each zone's
	// authoritative nameservers (found through DNS01Nameservers, port 53)
	// instead of on DNS01Nameservers themselves (false is cert-manager's
	// --dns01-recursive-nameservers-only).
	DNS01CheckAuthoritative bool
	// DNS01CheckInterval defaults to DefaultDNS01CheckInterval.
	DNS01CheckInterval time.Duration
	// DNS01Settle is an extra wait after the records are written before the
	// challenges are accepted (for DNS services whose answers lag behind
	// their own nameservers). Default 0.
	DNS01Settle time.Duration
	// AmbientCredentials lets a solver that names no credentials use the
	// hub's own (Route53: the instance role or IRSA; CloudDNS: workload
	// identity; AzureDNS: workload or managed identity), as cert-manager's
	// --cluster-issuer-ambient-credentials does for ClusterIssuers. The
	// hub's flag of that name defaults to true, as cert-manager's does.
	AmbientCredentials bool
	// RESTConfig reaches the hub API server, through which webhook solvers
	// are called (aggregated APIs). nil: webhook solvers fail with
	// InvalidSolverConfig.
	RESTConfig *rest.Config
	// PropagationTimeout defaults to DefaultPropagationTimeout.
	PropagationTimeout time.Duration
	// HoldDuration defaults to DefaultHoldDuration.
	HoldDuration time.Duration
	// PollInterval defaults to DefaultPollInterval.
	PollInterval time.Duration
	// FinalizeWait defaults to DefaultFinalizeWait.
	FinalizeWait time.Duration
	// OrderRetention defaults to DefaultOrderRetention.
	OrderRetention time.Duration
	// RetryBase and RetryMax default to DefaultRetryBase and DefaultRetryMax.
	RetryBase, RetryMax time.Duration
	// MaxConcurrentOrders defaults to DefaultMaxConcurrentOrders; renewal
	// information requests (ARI) run as many at once.
	MaxConcurrentOrders int
	// RenewalInfoInterval defaults to DefaultRenewalInfoInterval; negative
	// turns ARI off (renewal times then come from the spec alone).
	RenewalInfoInterval time.Duration
	// Weight returns a cluster's share of each issuer's rate limits
	// (budget.WeightLabel); nil: every cluster weighs 1.
	Weight func(cluster string) float64
	// Registerer receives the certhub_acme_* metrics. Defaults to
	// controller-runtime's registry.
	Registerer prometheus.Registerer
	// Clock defaults to the real clock.
	Clock clock.Clock

	newProvider func(s cmacme.ACMEChallengeSolver) (dns01.Provider, error) // tests: a fake DNS
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.RequestTimeout, DefaultRequestTimeout)
	def(&o.DNS01CheckInterval, DefaultDNS01CheckInterval)
	def(&o.PropagationTimeout, DefaultPropagationTimeout)
	def(&o.HoldDuration, DefaultHoldDuration)
	def(&o.PollInterval, DefaultPollInterval)
	def(&o.FinalizeWait, DefaultFinalizeWait)
	def(&o.OrderRetention, DefaultOrderRetention)
	def(&o.RetryBase, DefaultRetryBase)
	def(&o.RetryMax, DefaultRetryMax)
	def(&o.RenewalInfoInterval, DefaultRenewalInfoInterval)
	if o.UserAgent == "" {
		o.UserAgent = "certhub"
	}
	if o.MaxConcurrentOrders == 0 {
		o.MaxConcurrentOrders = DefaultMaxConcurrentOrders
	}
	if o.Registerer == nil {
		o.Registerer = crmetrics.Registry
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// Service is the hub's ACME: accounts, orders, and the Orderer the resolver
// hands to certsync (Issuer).
type Service struct {
	hub     client.Client
	live    client.Reader // uncached: an order is acted on only as the API server has it
	opts    Options
	clients clientCache
	metrics *metrics
	webhook *dns01.Webhook

	ariSlots chan struct{} // bounds the renewal information requests in flight

	mu   sync.Mutex
	subs []func(cluster, namespace, name string)
	ari  ariCache
}

// New returns the Service of ACME ClusterIssuers; SetupWithManager adds its
// controllers to the hub's manager.
func New(opts Options) (*Service, error) {
	if opts.Namespace == "" {
		return nil, errors.New("acme: Namespace is required")
	}
	if opts.Identity == "" {
		return nil, errors.New("acme: Identity is required")
	}
	opts.defaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Service{opts: opts, metrics: m, clients: clientCache{m: map[string]*acmeapi.Client{}}, webhook: dns01.NewWebhook(opts.RESTConfig),
		ariSlots: make(chan struct{}, opts.MaxConcurrentOrders), ari: ariCache{m: map[string]*ariEntry{}}}, nil
}

// SetupWithManager adds the account and order controllers to the hub's
// manager; the Service reads and writes through its client.
func (s *Service) SetupWithManager(mgr ctrl.Manager) error {
	opts := s.opts
	s.hub, s.live = mgr.GetClient(), mgr.GetAPIReader()
	r := &accounts{cl: mgr.GetClient(), live: mgr.GetAPIReader(), opts: opts, rec: mgr.GetEventRecorder("certhub-acme")}
	isACME := predicate.NewPredicateFuncs(func(o client.Object) bool {
		ci, ok := o.(*cmapi.ClusterIssuer)
		return ok && ci.Spec.ACME != nil
	})
	if err := builder.ControllerManagedBy(mgr).Named("acme-account").
		For(&cmapi.ClusterIssuer{}, builder.WithPredicates(isACME, predicate.Or(predicate.GenerationChangedPredicate{}, createOnly{}))).
		Complete(r); err != nil {
		return err
	}
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == opts.Namespace })
	if err := builder.ControllerManagedBy(mgr).Named("acme-order").
		For(&hubapi.ACMEOrder{}, builder.WithPredicates(inNamespace)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentOrders}).
		Complete(reconcile.Func(s.reconcileOrder)); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(s.sweepResumeMarks)); err != nil {
		return err
	}
	return nil
}

// Subscribe calls f whenever an order of a downstream Certificate finished
// (on every replica: each queues the Certificate if it serves its cluster).
func (s *Service) Subscribe(f func(cluster, namespace, name string)) {
	s.mu.Lock()
	s.subs = append(s.subs, f)
	s.mu.Unlock()
}

// client returns the ACME client of ci's registered account.
func (s *Service) client(ctx context.Context, ci *cmapi.ClusterIssuer) (*acmeapi.Client, error) {
	st := ci.Status.ACME
	if st == nil || st.URI == "" {
		return nil, fmt.Errorf("ClusterIssuer %s: the ACME account is not registered yet", ci.Name)
	}
	key, err := readAccountKey(ctx, s.hub, s.opts.Namespace, ci)
	if err != nil {
		return nil, err
	}
	if h := keyHash(key); h != st.LastPrivateKeyHash {
		return nil, fmt.Errorf("ClusterIssuer %s: the account key changed and is not registered yet", ci.Name)
	}
	id := ci.Name + "\x00" + ci.Spec.ACME.Server + "\x00" + st.URI + "\x00" + st.LastPrivateKeyHash
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	if c, ok := s.clients.m[id]; ok {
		return c, nil
	}
	c, err := newClient(ci.Spec.ACME, key, s.opts)
	if err != nil {
		return nil, err
	}
	c.KID = acmeapi.KeyID(st.URI)
	c.RetryBackoff = noWaitBackoff
	c.HTTPClient.Transport = s.metrics.instrument(ci.Name, c.HTTPClient.Transport)
	s.clients.m[id] = c
	return c, nil
}

// readAccountKey reads (never creates) the account key of ci.
func readAccountKey(ctx context.Context, secrets client.Reader, namespace string, ci *cmapi.ClusterIssuer) (*rsa.PrivateKey, error) {
	ref := ci.Spec.ACME.PrivateKey
	field := ref.Key
	if field == "" {
		field = DefaultAccountKeyField
	}
	sec := &corev1.Secret{}
	if err := secrets.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, sec); err != nil {
		return nil, fmt.Errorf("ClusterIssuer %s: account key Secret %s/%s: %w", ci.Name, namespace, ref.Name, err)
	}
	rk, err := decodeAccountKey(sec, field)
	if err != nil {
		return nil, fmt.Errorf("ClusterIssuer %s: %w", ci.Name, err)
	}
	return rk, nil
}

// noWaitBackoff keeps the client's retries short: a bad nonce (Pebble
// rejects 5 %) and a 5xx are retried at once a few times; a 429 is not
// retried inside a step but handed back, so the order controller pauses
// the budget and asks again after Retry-After instead of holding a worker.
func noWaitBackoff(n int, _ *http.Request, res *http.Response) time.Duration {
	if res == nil || res.StatusCode == http.StatusTooManyRequests || n > 4 {
		return 0
	}
	return time.Duration(n) * 50 * time.Millisecond
}

// Revoke revokes der, a certificate ClusterIssuer issuer's CA issued, at
// that CA with the hub's account (RFC 8555 §7.6 revokeCert) and an RFC
// 5280 reason code. internal/revocation calls it once the certificate
// was replaced downstream.
func (s *Service) Revoke(ctx context.Context, issuer string, der []byte, reason int) error {
	ci := &cmapi.ClusterIssuer{}
	if err := s.hub.Get(ctx, client.ObjectKey{Name: issuer}, ci); err != nil {
		return fmt.Errorf("failed to get ClusterIssuer %s: %w", issuer, err)
	}
	if ci.Spec.ACME == nil {
		return fmt.Errorf("ClusterIssuer %s is not an ACME issuer", issuer)
	}
	cl, err := s.client(ctx, ci)
	if err != nil {
		return err
	}
	if err := cl.RevokeCert(ctx, nil, der, acmeapi.CRLReasonCode(reason)); err != nil {
		return fmt.Errorf("failed to revoke a certificate at the CA of ClusterIssuer %s: %w", issuer, err)
	}
	return nil
}
