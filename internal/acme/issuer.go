package acme

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/issuers"
)

// Reasons of a downstream Certificate while its ACME order runs (Issuing=True)
// and when it failed (Ready=False, with the order's own reason when it has one).
const (
	// ReasonOrderPending: an ACMEOrder in the hub is in progress.
	ReasonOrderPending = issuers.ReasonOrderPending
	// ReasonOrderFailed: the ACME order failed; the message carries the CA's error.
	ReasonOrderFailed = "OrderFailed"
	// ReasonUnsupportedIdentifier: the Certificate asks for something a
	// DNS-01 order cannot carry (IP addresses, URIs, email addresses).
	ReasonUnsupportedIdentifier = "UnsupportedIdentifier"
)

// Issuer returns the issuers.Orderer of an ACME ClusterIssuer: the hook of
// issuers.Options.ACME. The issuer must have its account registered.
func (s *Service) Issuer(_ context.Context, ci *cmapi.ClusterIssuer) (issuers.Issuer, error) {
	if ci.Status.ACME == nil || ci.Status.ACME.URI == "" || !ready(ci) {
		msg := "its ACME account is not registered yet"
		for _, c := range ci.Status.Conditions {
			if c.Type == cmapi.IssuerConditionReady && c.Message != "" {
				msg += ": " + c.Message
			}
		}
		return nil, &issuers.Error{Reason: issuers.ReasonIssuerNotReady, Message: fmt.Sprintf("ClusterIssuer %s: %s", ci.Name, msg)}
	}
	return &orderer{s: s, ci: ci}, nil
}

// orderer orders certificates from one ACME ClusterIssuer.
type orderer struct {
	s  *Service
	ci *cmapi.ClusterIssuer
}

func (o *orderer) Sign(context.Context, issuers.Request) (issuers.Result, error) {
	return issuers.Result{}, errors.New("ACME issuers order asynchronously: use Order")
}

// Order finds or creates the ACMEOrder of this issuance and reports on it;
// it never waits for the CA (the order controller drives the order).
func (o *orderer) Order(ctx context.Context, req issuers.OrderRequest) (issuers.Result, error) {
	name, shared, dnsNames, err := o.identify(req)
	if err != nil {
		return issuers.Result{}, err
	}
	ord := &hubapi.ACMEOrder{}
	err = o.s.hub.Get(ctx, client.ObjectKey{Namespace: o.s.opts.Namespace, Name: name}, ord)
	if apierrors.IsNotFound(err) {
		return issuers.Result{}, o.create(ctx, name, req, dnsNames, 0, shared)
	}
	if err != nil {
		return issuers.Result{}, fmt.Errorf("failed to get ACMEOrder %s/%s: %w", o.s.opts.Namespace, name, err)
	}
	switch ord.Status.State {
	case hubapi.ACMEOrderValid:
		if ord.Spec.KeyInCluster {
			return issuers.Result{ChainPEM: ord.Status.Certificate}, nil
		}
		key, err := o.s.orderKey(ctx, ord)
		if err != nil {
			// The key is gone (deleted by hand): this order is of no use.
			return issuers.Result{}, errors.Join(err, o.s.deleteOrder(ctx, ord))
		}
		if shared && renews(ord, req.Current) {
			// This Certificate already has the shared certificate and asks
			// to replace it: the next generation of the shared order.
			if err := o.s.deleteOrder(ctx, ord); err != nil {
				return issuers.Result{}, err
			}
			return issuers.Result{}, o.create(ctx, name, req, dnsNames, 0, shared)
		}
		return issuers.Result{ChainPEM: ord.Status.Certificate, PrivateKey: key}, nil
	case hubapi.ACMEOrderErrored:
		retryAt := ord.Status.FinishedAt.Add(o.s.backoff(ord.Spec.Attempt))
		if wait := retryAt.Sub(o.s.opts.Clock.Now()); wait > 0 {
			reason := ord.Status.Reason
			if reason == "" {
				reason = ReasonOrderFailed
			}
			return issuers.Result{}, &issuers.Error{Reason: reason, RetryAfter: wait, Message: fmt.Sprintf(
				"ACME order %s/%s failed: %s; next attempt (%d) at %s", ord.Namespace, ord.Name, ord.Status.Message, ord.Spec.Attempt+2, retryAt.UTC().Format(time.RFC3339))}
		}
		if err := o.s.deleteOrder(ctx, ord); err != nil {
			return issuers.Result{}, err
		}
		return issuers.Result{}, o.create(ctx, name, req, dnsNames, ord.Spec.Attempt+1, shared)
	default:
		if ord.Status.State == "" && !ord.Spec.KeyInCluster && o.s.opts.Clock.Since(ord.CreationTimestamp.Time) > o.s.opts.HoldDuration {
			if _, err := o.s.orderKey(ctx, ord); err != nil { // its creator died before writing the key
				return issuers.Result{}, errors.Join(err, o.s.deleteOrder(ctx, ord))
			}
		}
		state := ord.Status.State
		if state == "" {
			state = "created"
		}
		return issuers.Result{}, &issuers.Pending{Reason: ReasonOrderPending, RetryAfter: o.s.opts.PollInterval,
			Message: fmt.Sprintf("ACME order %s/%s in the hub is %s", ord.Namespace, ord.Name, strings.ToLower(state))}
	}
}

// InFlight reports whether the hub holds the ACMEOrder of this issuance.
func (o *orderer) InFlight(ctx context.Context, req issuers.OrderRequest) (bool, error) {
	name, _, _, err := o.identify(req)
	if err != nil {
		return false, nil // hubapi.ACMEOrder refuses it: nothing can be running
	}
	err = o.s.hub.Get(ctx, client.ObjectKey{Namespace: o.s.opts.Namespace, Name: name}, &hubapi.ACMEOrder{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to get ACMEOrder %s/%s: %w", o.s.opts.Namespace, name, err)
	}
	return true, nil
}

// identify checks that req can be ordered from this issuer and names its
// ACMEOrder, from hub facts and the request alone.
func (o *orderer) identify(req issuers.OrderRequest) (name string, shared bool, dnsNames []string, err error) {
	if dnsNames, err = identifiers(&req.Certificate.Spec); err != nil {
		return "", false, nil, err
	}
	for _, n := range dnsNames {
		i, err := chooseSolver(o.ci.Spec.ACME.Solvers, n, req.Certificate.Labels)
		if err == nil {
			err = checkSolver(o.ci.Spec.ACME.Solvers[i], i)
		}
		if se := (*solverError)(nil); errors.As(err, &se) {
			return "", false, nil, &issuers.Error{Reason: se.reason, Message: fmt.Sprintf("ClusterIssuer %s: %s", o.ci.Name, se.message)}
		}
	}
	if _, err := limits(o.ci); err != nil {
		return "", false, nil, &issuers.Error{Reason: issuers.ReasonIssuerNotReady, Message: fmt.Sprintf("ClusterIssuer %s: %v", o.ci.Name, err)}
	}
	if sharesIdentical(o.ci) && req.Key == nil && req.CSR == nil && !keepsKey(req.Certificate) {
		if name, err = sharedOrderName(o.ci.Name, req, dnsNames); err != nil {
			return "", false, nil, &issuers.Error{Reason: ReasonUnsupportedIdentifier, Message: fmt.Sprintf("cannot build the certificate request: %v", err)}
		}
		return name, true, dnsNames, nil
	}
	return orderName(o.ci.Name, req, dnsNames), false, dnsNames, nil
}

// keepsKey reports whether crt keeps its private key across issuances
// (rotationPolicy Never): such a key is the Certificate's alone, from its
// first issuance on, and never comes from a shared order.
func keepsKey(crt *cmapi.Certificate) bool {
	return crt.Spec.PrivateKey != nil && crt.Spec.PrivateKey.RotationPolicy == cmapi.RotationPolicyNever
}

// create writes the order and the Secret holding its leaf key, once the
// issuer's budget admits it.
func (o *orderer) create(ctx context.Context, name string, req issuers.OrderRequest, dnsNames []string, attempt int, shared bool) error {
	// When it is needed at the latest, fixed per issuance so a waiter
	// keeps its place: a first certificate soon after its Certificate was
	// created, a renewal by the current certificate's expiry.
	due := req.Certificate.CreationTimestamp.Add(time.Hour)
	if req.Current != nil {
		due = req.Current.NotAfter
	}
	replaces := replacesID(req.Current, attempt)
	resume, resumeKey := o.s.resumable(ctx, name, req) // a deleted order's CA order, to continue (resume.go)
	if resumeKey != nil {
		req.Key = resumeKey
	}
	var wait time.Duration
	var refused string
	// An ARI renewal is exempt from the CA's limits (Let's Encrypt's
	// rule); a continued CA order was counted when it was created.
	if replaces == "" && resume == "" {
		var err error
		if wait, refused, err = o.s.admit(ctx, o.ci, name, req.Cluster, req.Certificate.Namespace, due, dnsNames); err != nil {
			return fmt.Errorf("ClusterIssuer %s budget: %w", o.ci.Name, err)
		}
	}
	if wait > 0 {
		at := o.s.opts.Clock.Now().Add(wait).UTC().Truncate(time.Second)
		return &issuers.Pending{Reason: ReasonRateLimited, RetryAfter: min(wait, 5*time.Minute), Message: fmt.Sprintf(
			"ClusterIssuer %s: its %q budget (the CA's rate limit, shared by every replica) is spent for now; shared fairly by cluster and namespace, nearest expiry first within a namespace; next try at %s", o.ci.Name, refused, at.Format(time.RFC3339))}
	}
	csr, keyPEM, err := orderCSR(req)
	if err != nil {
		return err
	}
	crt := req.Certificate
	ord := &hubapi.ACMEOrder{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.s.opts.Namespace, Name: name, Finalizers: []string{hubapi.TXTCleanupFinalizer}},
		Spec: hubapi.ACMEOrderSpec{IssuerName: o.ci.Name, Cluster: req.Cluster, Namespace: crt.Namespace, Certificate: crt.Name,
			DNSNames: dnsNames, Request: csr, KeyInCluster: keyPEM == nil, Continues: resume, Attempt: attempt, Replaces: replaces, Shared: shared, SolverLabels: crt.Labels},
	}
	if err := o.s.hub.Create(ctx, ord); err != nil {
		if replaces == "" && resume == "" {
			o.s.giveBack(ctx, o.ci, dnsNames) // no order of ours was created: its tokens go back
		}
		if apierrors.IsAlreadyExists(err) { // another replica created it meanwhile
			return &issuers.Pending{Reason: ReasonOrderPending, RetryAfter: o.s.opts.PollInterval, Message: fmt.Sprintf("ACME order %s/%s in the hub was created", o.s.opts.Namespace, name)}
		}
		return fmt.Errorf("failed to create ACMEOrder %s/%s: %w", o.s.opts.Namespace, name, err)
	}
	created := &issuers.Pending{Reason: ReasonOrderPending, RetryAfter: o.s.opts.PollInterval, Message: fmt.Sprintf("ACME order %s/%s in the hub was created", o.s.opts.Namespace, name)}
	owner := metav1.OwnerReference{APIVersion: hubapi.SchemeGroupVersion.String(), Kind: hubapi.ACMEOrderKind, Name: name, UID: ord.UID}
	if resume != "" {
		if err := o.s.adopt(ctx, ord, owner); err != nil {
			return err
		}
		o.s.claim(ctx, ord)
		created.Message = fmt.Sprintf("ACME order %s/%s in the hub continues the CA's order of a deleted one", o.s.opts.Namespace, name)
		return created
	}
	if keyPEM == nil {
		o.s.claim(ctx, ord)
		return created
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.s.opts.Namespace, Name: name, Labels: map[string]string{hubapi.ACMEOrderLabel: name},
			OwnerReferences: []metav1.OwnerReference{owner}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{corev1.TLSPrivateKeyKey: keyPEM},
	}
	err = o.s.hub.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		// A deleted order's key Secret the garbage collector has not
		// removed yet (it would take the new key with it): replaced.
		old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sec.Namespace, Name: sec.Name}}
		if err = o.s.hub.Delete(ctx, old); client.IgnoreNotFound(err) == nil {
			err = o.s.hub.Create(ctx, sec)
		}
	}
	if err != nil {
		return fmt.Errorf("failed to create the key Secret of ACMEOrder %s/%s: %w", o.s.opts.Namespace, name, err)
	}
	o.s.claim(ctx, ord) // the creator drives its order; another replica takes over if it dies
	return created
}

// orderCSR is the DER request ord finalizes with and the PEM of its key:
// req.CSR as it is (no key: it stays downstream), or a request
// cert-manager would send (as certsync hashes it) for req.Key or a key
// generated from the Certificate's spec.
func orderCSR(req issuers.OrderRequest) (csr, keyPEM []byte, err error) {
	if req.CSR != nil {
		return req.CSR, nil, nil
	}
	key := req.Key
	if key == nil {
		if key, err = pki.GeneratePrivateKeyForCertificate(req.Certificate); err != nil {
			return nil, nil, &issuers.Error{Reason: issuers.ReasonIssuerNotReady, Message: fmt.Sprintf("cannot generate private key: %v", err)}
		}
	}
	tmpl, err := issuers.CertificateRequest(req.Certificate)
	if err != nil {
		return nil, nil, &issuers.Error{Reason: ReasonUnsupportedIdentifier, Message: fmt.Sprintf("cannot build the certificate request: %v", err)}
	}
	if csr, err = pki.EncodeCSR(tmpl, key); err != nil {
		return nil, nil, fmt.Errorf("failed to create the CSR: %w", err)
	}
	if keyPEM, err = pki.EncodePKCS8PrivateKey(key); err != nil {
		return nil, nil, err
	}
	return csr, keyPEM, nil
}

// oidSubjectAltName is the subject alternative name extension.
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// sharesIdentical reports whether ci opted in to sharing identical requests.
func sharesIdentical(ci *cmapi.ClusterIssuer) bool {
	return ci.Annotations[hubapi.ShareIdenticalRequestsAnnotation] == "true"
}

// sharedOrderName is the same for every Certificate whose request is
// identical: the issuer, the identifiers, the subject and extensions of
// the request cert-manager would send and the key parameters — nothing of
// the Certificate's own identity, and nothing a downstream user can write
// besides the request itself (not the certificate its Secret holds: a
// pasted tls.crt must not choose an order). Generations of one shared
// order follow each other under this name (Order: renews).
func sharedOrderName(issuer string, req issuers.OrderRequest, dnsNames []string) (string, error) {
	crt := req.Certificate
	csr, err := issuers.CertificateRequest(crt)
	if err != nil {
		return "", err
	}
	alg, size := cmapi.RSAKeyAlgorithm, 0
	if pk := crt.Spec.PrivateKey; pk != nil {
		if pk.Algorithm != "" {
			alg = pk.Algorithm
		}
		size = pk.Size
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%x\x00", issuer, strings.Join(slices.Sorted(slices.Values(dnsNames)), ","), alg, size, csr.RawSubject)
	for _, e := range csr.ExtraExtensions {
		if e.Id.Equal(oidSubjectAltName) {
			continue // the names, sorted, are hashed above
		}
		fmt.Fprintf(h, "%s\x00%t\x00%x\x00", e.Id, e.Critical, e.Value)
	}
	return "shared-" + hex.EncodeToString(h.Sum(nil))[:24], nil
}

// renews reports whether current is the certificate ord issued: a
// Certificate that holds it and asks again wants it replaced.
func renews(ord *hubapi.ACMEOrder, current *x509.Certificate) bool {
	if current == nil {
		return false
	}
	issued, err := pki.DecodeX509CertificateBytes(ord.Status.Certificate)
	return err == nil && issued.SerialNumber.Cmp(current.SerialNumber) == 0 && bytes.Equal(issued.RawIssuer, current.RawIssuer)
}

// replacesID is the ARI identifier (RFC 9773) of the certificate a
// renewal's first attempt replaces; "" for a first issuance, a retry after
// a failed order, or a certificate without an authority key identifier.
func replacesID(current *x509.Certificate, attempt int) string {
	if current == nil || attempt > 0 {
		return ""
	}
	id, err := acmeapi.CertificateARIID(current)
	if err != nil {
		return ""
	}
	return id
}

// identifiers returns the DNS names to order: the spec's, with its common
// name added when missing (as cert-manager orders it). IP addresses, URIs,
// email addresses and other names cannot be validated with DNS-01.
func identifiers(spec *cmapi.CertificateSpec) ([]string, error) {
	if len(spec.IPAddresses) > 0 || len(spec.URIs) > 0 || len(spec.EmailAddresses) > 0 || len(spec.OtherNames) > 0 {
		return nil, &issuers.Error{Reason: ReasonUnsupportedIdentifier, Message: "ACME certificates from the hub carry only DNS names (DNS-01); remove ipAddresses, uris, emailAddresses and otherNames"}
	}
	names := slices.Clone(spec.DNSNames)
	if cn := spec.CommonName; cn != "" && !slices.Contains(names, cn) {
		names = append(names, cn)
	}
	if len(names) == 0 {
		return nil, &issuers.Error{Reason: ReasonUnsupportedIdentifier, Message: "an ACME certificate needs at least one DNS name (spec.dnsNames or spec.commonName)"}
	}
	return names, nil
}

// orderName is the same on every replica for one issuance: the issuer,
// the Certificate (by cluster, namespace, name and UID), the identifiers
// and the certificate being replaced.
func orderName(issuer string, req issuers.OrderRequest, dnsNames []string) string {
	h := sha256.New()
	sorted := slices.Sorted(slices.Values(dnsNames))
	crt := req.Certificate
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00", issuer, req.Cluster, crt.Namespace, crt.Name, crt.UID, strings.Join(sorted, ","))
	if req.Current != nil {
		fmt.Fprintf(h, "%x", req.Current.SerialNumber)
	}
	prefix := strings.Trim(strings.ToLower(crt.Name), "-.")
	if len(prefix) > 30 {
		prefix = strings.Trim(prefix[:30], "-.")
	}
	return prefix + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// orderKey reads the leaf key of ord and checks it is the CSR's.
func (s *Service) orderKey(ctx context.Context, ord *hubapi.ACMEOrder) (crypto.Signer, error) {
	sec := &corev1.Secret{}
	if err := s.hub.Get(ctx, client.ObjectKey{Namespace: ord.Namespace, Name: ord.Name}, sec); err != nil {
		return nil, fmt.Errorf("failed to get the key Secret of ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	key, err := pki.DecodePrivateKeyBytes(sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("key Secret of ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	csr, err := x509.ParseCertificateRequest(ord.Spec.Request)
	if err != nil {
		return nil, fmt.Errorf("ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	if ok, err := pki.PublicKeysEqual(csr.PublicKey, key.Public()); err != nil || !ok {
		return nil, fmt.Errorf("the key Secret of ACMEOrder %s/%s does not hold the key of its request", ord.Namespace, ord.Name)
	}
	return key, nil
}

// deleteOrder removes ord and its key Secret.
func (s *Service) deleteOrder(ctx context.Context, ord *hubapi.ACMEOrder) error {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ord.Namespace, Name: ord.Name}}
	if err := s.hub.Delete(ctx, sec); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to delete the key Secret of ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	if err := s.hub.Delete(ctx, ord, client.Preconditions{UID: &ord.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("failed to delete ACMEOrder %s/%s: %w", ord.Namespace, ord.Name, err)
	}
	return nil
}

// backoff is the wait after the attempt-th failed order of one issuance:
// RetryBase doubling, at most RetryMax.
func (s *Service) backoff(attempt int) time.Duration {
	d := s.opts.RetryBase
	for range attempt {
		if d >= s.opts.RetryMax {
			break
		}
		d *= 2
	}
	return min(d, s.opts.RetryMax)
}
