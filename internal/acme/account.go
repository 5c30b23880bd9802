package acme

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/dns01"
)

// Reasons of the ClusterIssuer's Ready condition and Events: cert-manager's own.
const (
	ReasonAccountRegistered = "ACMEAccountRegistered"
	ReasonRegisterFailed    = "ErrRegisterACMEAccount"
	// ReasonBudgetHistoryUnknown (Warning Event on the ClusterIssuer): the
	// account existed at the CA, the hub had no ledger; the budget starts
	// empty and refills (budget.Ledger.StartUnknown).
	ReasonBudgetHistoryUnknown = "ACMEBudgetHistoryUnknown"
	ReasonInvalidConfig        = "InvalidConfig"
)

// DefaultAccountKeyField is the Secret key of the account key when
// privateKeySecretRef.key is empty (cert-manager's).
const DefaultAccountKeyField = corev1.TLSPrivateKeyKey

// createOnly lets creations through (and the initial list), so a replica
// that starts checks every ACME ClusterIssuer once.
type createOnly struct{ predicate.Funcs }

func (createOnly) Create(event.CreateEvent) bool { return true }

type accounts struct {
	cl   client.Client
	live client.Reader // uncached: a Secret another replica just created
	opts Options
	rec  recorder.EventRecorder
}

func (r *accounts) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ci := &cmapi.ClusterIssuer{}
	if err := r.cl.Get(ctx, req.NamespacedName, ci); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	spec := ci.Spec.ACME
	if spec == nil {
		return ctrl.Result{}, nil
	}
	log := log.FromContext(ctx).WithValues("clusterissuer", ci.Name)
	key, reason, err := r.accountKey(ctx, ci)
	if err != nil {
		return ctrl.Result{}, r.fail(ctx, ci, reason, err)
	}
	hash := keyHash(key)
	st := ci.Status.ACME
	if st != nil && st.URI != "" && st.LastPrivateKeyHash == hash && st.LastRegisteredEmail == spec.Email && ready(ci) {
		return ctrl.Result{}, nil // registered with this key and email; nothing to ask the CA
	}
	acct := &acmeapi.Account{}
	if spec.Email != "" {
		acct.Contact = []string{"mailto:" + spec.Email}
	}
	if eab := spec.ExternalAccountBinding; eab != nil {
		hmac, err := dns01.SecretValue(ctx, r.cl, r.opts.Namespace, eab.Key)
		if err != nil {
			return ctrl.Result{}, r.fail(ctx, ci, ReasonInvalidConfig, fmt.Errorf("failed to get External Account Binding key from secret: %w", err))
		}
		raw, err := base64.RawURLEncoding.DecodeString(string(hmac))
		if err != nil {
			return ctrl.Result{}, r.fail(ctx, ci, ReasonInvalidConfig, fmt.Errorf("the External Account Binding key in Secret %s/%s is not base64url: %w", r.opts.Namespace, eab.Key.Name, err))
		}
		acct.ExternalAccountBinding = &acmeapi.ExternalAccountBinding{KID: eab.KeyID, Key: raw}
	}
	ac, err := newClient(spec, key, r.opts)
	if err != nil {
		return ctrl.Result{}, r.fail(ctx, ci, ReasonInvalidConfig, err)
	}
	reqCtx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
	defer cancel()
	// The key's account first (onlyReturnExisting): a hub rebuilt with its
	// account key restored carries on with the same account, its orders and
	// rate limits, and never creates another.
	uri, found := "", false
	got, err := ac.GetReg(reqCtx, "")
	switch {
	case err == nil:
		uri, found = got.URI, true
	case !errors.Is(err, acmeapi.ErrNoAccount):
		return ctrl.Result{}, r.fail(ctx, ci, ReasonRegisterFailed, fmt.Errorf("failed to look the ACME account up: %w", err))
	default:
		got, err = ac.Register(reqCtx, acct, acmeapi.AcceptTOS)
		switch {
		case errors.Is(err, acmeapi.ErrAccountAlreadyExists):
			uri = string(ac.KID) // registered meanwhile (another replica)
		case err != nil:
			return ctrl.Result{}, r.fail(ctx, ci, ReasonRegisterFailed, fmt.Errorf("failed to register ACME account: %w", err))
		default:
			uri = got.URI
		}
	}
	log.Info("ACME account ready", "uri", uri, "existing", found)
	if found {
		if err := r.historyUnknown(ctx, ci); err != nil {
			return ctrl.Result{}, err
		}
	}
	next := ci.DeepCopy()
	next.Status.ACME = &cmacme.ACMEIssuerStatus{URI: uri, LastRegisteredEmail: spec.Email, LastPrivateKeyHash: hash}
	setReady(next, cmmeta.ConditionTrue, ReasonAccountRegistered, "The ACME account was registered with the ACME server")
	if err := r.cl.Status().Patch(ctx, next, client.MergeFromWithOptions(ci, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to update ClusterIssuer %s status: %w", ci.Name, err)
	}
	if !ready(ci) {
		if found {
			r.rec.Eventf(ci, nil, corev1.EventTypeNormal, ReasonAccountRegistered, "Register", "The ACME account of this key exists at the ACME server and is used again: %s", uri)
		} else {
			r.rec.Eventf(ci, nil, corev1.EventTypeNormal, ReasonAccountRegistered, "Register", "The ACME account was registered with the ACME server: %s", uri)
		}
	}
	return ctrl.Result{}, nil
}

// historyUnknown starts ci's budget ledger with its history unknown when
// the account existed at the CA but the hub keeps no ledger (a hub rebuilt
// without it): the CA still counts what was spent, so the buckets start
// empty and refill at their rates, never full.
func (r *accounts) historyUnknown(ctx context.Context, ci *cmapi.ClusterIssuer) error {
	if lims, err := limits(ci); err != nil || lims == nil {
		return nil // no budget to keep (an invalid one is reported where it is used)
	}
	l := budget.NewLedger(r.cl, r.live, client.ObjectKey{Namespace: r.opts.Namespace, Name: LedgerPrefix + ci.Name}, r.opts.Clock)
	created, err := l.StartUnknown(ctx)
	if err != nil {
		return err
	}
	if created {
		log.FromContext(ctx).Info("ACME budget history unknown: the account exists at the CA and the hub keeps no ledger; every bucket starts empty and refills at its rate", "clusterissuer", ci.Name)
		r.rec.Eventf(ci, nil, corev1.EventTypeWarning, ReasonBudgetHistoryUnknown, "Register",
			"The ACME account exists at the CA but the hub keeps no budget ledger (a rebuilt hub?): the CA still counts what was spent, so every bucket starts empty and refills at its rate")
	}
	return nil
}

// accountKey reads the account key, creating it when absent.
func (r *accounts) accountKey(ctx context.Context, ci *cmapi.ClusterIssuer) (*rsa.PrivateKey, string, error) {
	spec := ci.Spec.ACME
	ref := spec.PrivateKey
	if ref.Name == "" {
		return nil, ReasonInvalidConfig, errors.New("spec.acme.privateKeySecretRef.name is required")
	}
	field := ref.Key
	if field == "" {
		field = DefaultAccountKeyField
	}
	sec := &corev1.Secret{}
	err := r.cl.Get(ctx, types.NamespacedName{Namespace: r.opts.Namespace, Name: ref.Name}, sec)
	if apierrors.IsNotFound(err) {
		if spec.DisableAccountKeyGeneration {
			return nil, ReasonInvalidConfig, fmt.Errorf("the ACME issuer config has 'disableAccountKeyGeneration' set to true, but the secret %s/%s was not found", r.opts.Namespace, ref.Name)
		}
		if sec, err = r.createKey(ctx, ref.Name, field); err != nil {
			return nil, ReasonRegisterFailed, err
		}
	} else if err != nil {
		return nil, ReasonRegisterFailed, fmt.Errorf("failed to get account key Secret %s/%s: %w", r.opts.Namespace, ref.Name, err)
	}
	rk, err := decodeAccountKey(sec, field)
	if err != nil {
		return nil, ReasonInvalidConfig, err
	}
	return rk, "", nil
}

// decodeAccountKey reads the RSA account key in field of sec.
func decodeAccountKey(sec *corev1.Secret, field string) (*rsa.PrivateKey, error) {
	raw := sec.Data[field]
	if len(raw) == 0 {
		return nil, fmt.Errorf("account key Secret %s/%s has no key %q", sec.Namespace, sec.Name, field)
	}
	k, err := pki.DecodePrivateKeyBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("account private key in Secret %s/%s is invalid: %w", sec.Namespace, sec.Name, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("ACME private key in %s/%s is not of type RSA", sec.Namespace, sec.Name)
	}
	return rk, nil
}

// createKey writes a new RSA-2048 account key (cert-manager's choice);
// when another replica created it first, that one is read and used.
func (r *accounts) createKey(ctx context.Context, name, field string) (*corev1.Secret, error) {
	k, err := pki.GenerateRSAPrivateKey(2048)
	if err != nil {
		return nil, err
	}
	pemBytes := pki.EncodePKCS1PrivateKey(k)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Namespace, Name: name}, Data: map[string][]byte{field: pemBytes}}
	err = r.cl.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		sec = &corev1.Secret{}
		// The cache may not have it yet: read it from the API server.
		if err := r.live.Get(ctx, types.NamespacedName{Namespace: r.opts.Namespace, Name: name}, sec); err != nil {
			return nil, fmt.Errorf("account key Secret %s/%s was created by another replica but cannot be read: %w", r.opts.Namespace, name, err)
		}
		return sec, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to create account key Secret %s/%s: %w", r.opts.Namespace, name, err)
	}
	return sec, nil
}

// client is an ACME client for the issuer's server with the account key.
func newClient(spec *cmacme.ACMEIssuer, key *rsa.PrivateKey, opts Options) (*acmeapi.Client, error) {
	tc := &tls.Config{InsecureSkipVerify: spec.SkipTLSVerify} //nolint:gosec // the user's explicit spec.acme.skipTLSVerify
	if len(spec.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(spec.CABundle) {
			return nil, errors.New("spec.acme.caBundle holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	hc := &http.Client{Timeout: opts.RequestTimeout, Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc, TLSHandshakeTimeout: 10 * time.Second,
	}}
	return &acmeapi.Client{Key: key, DirectoryURL: spec.Server, HTTPClient: hc, UserAgent: opts.UserAgent}, nil
}

// fail records a failed registration on the ClusterIssuer (condition and,
// on a change, an Event) and returns err, so the request is retried with
// controller-runtime's exponential back-off.
func (r *accounts) fail(ctx context.Context, ci *cmapi.ClusterIssuer, reason string, err error) error {
	next := ci.DeepCopy()
	changed := setReady(next, cmmeta.ConditionFalse, reason, err.Error())
	if next.Status.ACME != nil {
		next.Status.ACME.URI = ""
	}
	if perr := r.cl.Status().Patch(ctx, next, client.MergeFromWithOptions(ci, client.MergeFromWithOptimisticLock{})); perr != nil {
		return errors.Join(err, fmt.Errorf("failed to update ClusterIssuer %s status: %w", ci.Name, perr))
	}
	if changed {
		r.rec.Eventf(ci, nil, corev1.EventTypeWarning, reason, "Register", "%s", err.Error())
	}
	return fmt.Errorf("ClusterIssuer %s: %w", ci.Name, err)
}

func ready(ci *cmapi.ClusterIssuer) bool {
	for _, c := range ci.Status.Conditions {
		if c.Type == cmapi.IssuerConditionReady {
			return c.Status == cmmeta.ConditionTrue
		}
	}
	return false
}

// setReady sets the Ready condition and reports whether status or reason changed.
func setReady(ci *cmapi.ClusterIssuer, status cmmeta.ConditionStatus, reason, message string) bool {
	now := metav1.Now()
	c := cmapi.IssuerCondition{Type: cmapi.IssuerConditionReady, Status: status, Reason: reason, Message: message,
		LastTransitionTime: &now, ObservedGeneration: ci.Generation}
	for i, old := range ci.Status.Conditions {
		if old.Type != cmapi.IssuerConditionReady {
			continue
		}
		changed := old.Status != status || old.Reason != reason
		if !changed {
			c.LastTransitionTime = old.LastTransitionTime
		}
		ci.Status.Conditions[i] = c
		return changed
	}
	ci.Status.Conditions = append(ci.Status.Conditions, c)
	return true
}

// keyHash is cert-manager's lastPrivateKeyHash: base64 of the SHA-256 of the PKCS#1 key.
func keyHash(k *rsa.PrivateKey) string {
	sum := sha256.Sum256(x509.MarshalPKCS1PrivateKey(k))
	return base64.StdEncoding.EncodeToString(sum[:])
}
