package revocation

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/engaged"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issued"
)

// Defaults of Options.
const (
	DefaultInterval    = 10 * time.Second
	DefaultCRLValidity = 7 * 24 * time.Hour
)

// Issuer kinds a selected certificate is revoked by.
const (
	KindCA   = "CA"
	KindACME = "ACME"
)

// Record is the hub's record of issued certificates (*issued.Record).
type Record interface {
	// Cluster is every entry signed for objects in a cluster.
	Cluster(name string) []issued.Entry
}

// ACMERevoker revokes a certificate at an ACME ClusterIssuer's CA (RFC 8555
// revokeCert, with the hub's account). *acme.Service implements it.
type ACMERevoker interface {
	Revoke(ctx context.Context, issuer string, der []byte, reason int) error
}

// Options configure revocation.
type Options struct {
	// Namespace is the hub namespace of the CA Secrets and the CRLs. Required.
	Namespace string
	// Hub reads ClusterIssuers, CA Secrets and CertificateRevocations, and
	// writes the CRLs and the revocations' status. Required.
	Hub client.Client
	// Live reads what must not be stale (a CRL before it is rewritten).
	// Required.
	Live client.Reader
	// Fence says which clusters this replica looks at for each revocation.
	// Nil: every engaged cluster.
	Fence fence.Fence
	// Clusters lists every registered cluster (a revocation is Complete
	// once each one it selects has been looked at). Required.
	Clusters func() map[multicluster.ClusterName]map[string]string
	// Record is the hub's record of what it signed: what a revocation
	// selects from (internal/issued). Required.
	Record Record
	// Leaf reads the certificate of a managed Secret downstream (the hub
	// passes the secretcache.Store: read once per version, never where the
	// cluster's mode keeps keys downstream). Required.
	Leaf func(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, key client.ObjectKey) (*x509.Certificate, error)
	// ACME revokes ACME certificates at their CA. Nil: they stay Failed.
	ACME ACMERevoker
	// Interval is how often each revocation in progress is looked at in
	// every cluster. Default DefaultInterval.
	Interval time.Duration
	// CRLValidity is how long a CRL is valid (nextUpdate); it is signed
	// again with half of it left. Default DefaultCRLValidity.
	CRLValidity time.Duration
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// Log defaults to discard.
	Log logr.Logger

	clock clock.WithTicker
}

// Controller renews then revokes what CertificateRevocations select. Add
// it to the multicluster manager; certsync asks it MustRenew.
type Controller struct {
	opts    Options
	crls    *crls
	metrics *metrics

	clusters engaged.Set
	mu       sync.Mutex
	// renew: cluster/namespace/name → the serial to replace, and the
	// revocation that asks.
	renew map[string]want
	subs  []func(cluster, namespace, name string)
}

type want struct{ serial, revocation string }

var _ multicluster.Aware = &Controller{}

// New returns a Controller with its metrics registered.
func New(opts Options) (*Controller, error) {
	if opts.Namespace == "" || opts.Hub == nil || opts.Live == nil || opts.Clusters == nil || opts.Record == nil || opts.Leaf == nil || opts.Registerer == nil {
		return nil, errors.New("revocation: Namespace, Hub, Live, Clusters, Record, Leaf and Registerer are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.CRLValidity <= 0 {
		opts.CRLValidity = DefaultCRLValidity
	}
	if opts.clock == nil {
		opts.clock = clock.RealClock{}
	}
	c := &Controller{opts: opts, renew: map[string]want{}}
	c.crls = &crls{namespace: opts.Namespace, hub: opts.Hub, live: opts.Live, validity: opts.CRLValidity, now: opts.clock.Now}
	var err error
	if c.metrics, err = newMetrics(opts.Registerer, opts.Hub); err != nil {
		return nil, err
	}
	return c, nil
}

// SetupWithManager adds c to mgr (the multicluster manager: it is told of every cluster engaged).
func (c *Controller) SetupWithManager(mgr mcmanager.Manager) error { return mgr.Add(c) }

// Handler serves the CRLs under CRLPath.
func (c *Controller) Handler() http.Handler { return c.crls.handler() }

// Engage remembers cl until ctx ends.
func (c *Controller) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	return c.clusters.Engage(ctx, name, cl)
}

// Subscribe calls fn with each Certificate newly selected (certsync queues it).
func (c *Controller) Subscribe(fn func(cluster, namespace, name string)) {
	c.mu.Lock()
	c.subs = append(c.subs, fn)
	c.mu.Unlock()
}

// MustRenew reports whether cert is the certificate a revocation wants
// replaced for cluster's namespace/name.
func (c *Controller) MustRenew(cluster, namespace, name string, cert *x509.Certificate) (string, bool) {
	c.mu.Lock()
	w, ok := c.renew[cluster+"/"+namespace+"/"+name]
	c.mu.Unlock()
	if !ok || w.serial != Serial(cert) {
		return "", false
	}
	return fmt.Sprintf("Issuing certificate as CertificateRevocation %q revokes serial %s once it is replaced", w.revocation, w.serial), true
}

// setWant records (or, with serial "", drops) what a Certificate must
// replace, and wakes certsync on a new want.
func (c *Controller) setWant(key, serial, revocation string) {
	c.mu.Lock()
	old, had := c.renew[key]
	if serial == "" {
		delete(c.renew, key)
	} else {
		c.renew[key] = want{serial: serial, revocation: revocation}
	}
	subs := slices.Clone(c.subs)
	c.mu.Unlock()
	if serial != "" && (!had || old.serial != serial) {
		parts := strings.SplitN(key, "/", 3)
		for _, fn := range subs {
			fn(parts[0], parts[1], parts[2])
		}
	}
}

// Start looks at every revocation in progress every Interval until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	log := c.opts.Log
	t := c.opts.clock.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		if err := c.passAll(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Revocation pass failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// passAll advances every revocation in progress in the clusters this
// replica owns, and keeps the CRLs signed.
func (c *Controller) passAll(ctx context.Context) error {
	var errs []error
	revs := &hubapi.CertificateRevocationList{}
	if err := c.opts.Hub.List(ctx, revs); err != nil {
		return fmt.Errorf("failed to list CertificateRevocations: %w", err)
	}
	clusters := c.clusters.All()
	for i := range revs.Items {
		rev := &revs.Items[i]
		if rev.Status.Phase == hubapi.RevocationComplete {
			continue
		}
		if err := c.advance(ctx, rev, clusters); err != nil {
			errs = append(errs, fmt.Errorf("CertificateRevocation %s: %w", rev.Name, err))
		}
	}
	cms := &corev1.ConfigMapList{}
	if err := c.opts.Hub.List(ctx, cms, client.InNamespace(c.opts.Namespace), client.MatchingLabels{hubapi.CRLLabel: "true"}); err != nil {
		errs = append(errs, fmt.Errorf("failed to list CRLs: %w", err))
	}
	for i := range cms.Items {
		if err := c.crls.refresh(ctx, &cms.Items[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// advance looks at rev in each cluster this replica owns and writes what
// changed into its status.
func (c *Controller) advance(ctx context.Context, rev *hubapi.CertificateRevocation, engaged map[multicluster.ClusterName]cluster.Cluster) error {
	// The status as written last, not as cached: a pass on a stale one
	// would select nothing that is already renewed.
	if err := c.opts.Live.Get(ctx, client.ObjectKeyFromObject(rev), rev); err != nil {
		return client.IgnoreNotFound(err)
	}
	entries := map[string]hubapi.RevokedCertificate{}
	for _, e := range rev.Status.Certificates {
		entries[e.Serial] = e
	}
	rows := map[string]hubapi.RevocationClusterStatus{}
	var errs []error
	for name, cl := range engaged {
		if !selectsCluster(rev, string(name)) {
			continue
		}
		if c.opts.Fence != nil {
			if _, ok := c.opts.Fence.Owns(name); !ok {
				continue
			}
		}
		row, err := c.inCluster(ctx, rev, string(name), cl, entries)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", name, err))
			row.Message = err.Error()
		}
		rows[string(name)] = row
	}
	if len(rows) > 0 {
		errs = append(errs, c.writeStatus(ctx, rev.Name, rows, entries))
	}
	return errors.Join(errs...)
}

// inCluster selects rev's certificates in cluster name from the hub's
// record (never from a Secret: a tls.crt proves nothing), asks certsync to
// renew each one a Certificate still holds, and revokes each other one at
// once: superseded, never delivered, signed for a CertificateRequest, or
// its Certificate gone.
func (c *Controller) inCluster(ctx context.Context, rev *hubapi.CertificateRevocation, name string, cl cluster.Cluster, entries map[string]hubapi.RevokedCertificate) (hubapi.RevocationClusterStatus, error) {
	row := hubapi.RevocationClusterStatus{Cluster: name}
	recorded := map[string]issued.Entry{} // serial → the record's entry
	for _, e := range c.opts.Record.Cluster(name) {
		if !selectsEntry(rev, e) {
			continue
		}
		recorded[e.Serial] = e
		if _, known := entries[e.Serial]; !known {
			entries[e.Serial] = c.newEntry(ctx, e)
		}
	}
	current, err := c.held(ctx, name, cl, entries)
	if err != nil {
		return row, err
	}
	reason := reasonCode(rev.Spec.Reason)
	var errs []error
	for serial, e := range entries {
		if e.Cluster != name || e.State == hubapi.RevocationRevoked || e.IssuerKind != KindCA && e.IssuerKind != KindACME {
			continue
		}
		key := e.Namespace + "/" + e.Certificate
		if current[key] == serial {
			c.setWant(name+"/"+key, serial, rev.Name) // renew first
			continue
		}
		if err := c.revokeOne(ctx, e, recorded[serial], reason); err != nil {
			e.State, e.Message = hubapi.RevocationFailed, err.Error()
			c.metrics.revocations.WithLabelValues(e.IssuerKind, "Failed").Inc()
			errs = append(errs, err)
		} else {
			now := metav1.NewTime(c.opts.clock.Now().UTC().Truncate(time.Second))
			e.State, e.Message, e.RevokedAt, e.CertificatePEM = hubapi.RevocationRevoked, "", &now, ""
			c.metrics.revocations.WithLabelValues(e.IssuerKind, "Revoked").Inc()
		}
		entries[serial] = e
		c.mu.Lock()
		if w := c.renew[name+"/"+key]; w.serial == serial {
			delete(c.renew, name+"/"+key)
		}
		c.mu.Unlock()
	}
	for _, e := range entries {
		if e.Cluster != name {
			continue
		}
		row.Selected++
		if e.State == hubapi.RevocationRevoked {
			row.Revoked++
		}
	}
	if n := row.Selected - row.Revoked; n > 0 {
		row.Message = fmt.Sprintf("%d certificate(s) renewing or waiting to be revoked", n)
	}
	return row, errors.Join(errs...)
}

// held is the serial each Certificate of a selected entry holds now
// (namespace/name → serial): what must be renewed before its serial is
// revoked. Certificates are listed unstructured, as certsync caches them:
// one cert-manager's Go types cannot decode (the API server accepts
// `duration: 1 day`) must not blind the revocation to the rest.
func (c *Controller) held(ctx context.Context, name string, cl cluster.Cluster, entries map[string]hubapi.RevokedCertificate) (map[string]string, error) {
	wanted := map[string]bool{}
	for _, e := range entries {
		if e.Cluster == name && e.State != hubapi.RevocationRevoked {
			wanted[e.Namespace+"/"+e.Certificate] = true
		}
	}
	current := map[string]string{}
	if len(wanted) == 0 {
		return current, nil
	}
	ulist := certspec.NewList()
	if err := cl.GetClient().List(ctx, ulist); err != nil {
		return nil, fmt.Errorf("failed to list Certificates: %w", err)
	}
	for i := range ulist.Items {
		u := &ulist.Items[i]
		key := u.GetNamespace() + "/" + u.GetName()
		if !wanted[key] {
			continue
		}
		crt := cmapi.Certificate{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crt) != nil {
			continue // holds nothing the hub issued: its selected serials are revoked at once
		}
		leaf, err := c.opts.Leaf(ctx, multicluster.ClusterName(name), cl, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName})
		if err != nil || leaf == nil {
			continue
		}
		current[key] = Serial(leaf)
	}
	return current, nil
}

// newEntry is a newly selected certificate, by the kind of issuer that revokes it.
func (c *Controller) newEntry(ctx context.Context, r issued.Entry) hubapi.RevokedCertificate {
	e := hubapi.RevokedCertificate{Serial: r.Serial, Cluster: r.Cluster, Namespace: r.Namespace, Certificate: r.Name, State: hubapi.RevocationRenewing}
	issuer, ok := strings.CutPrefix(r.Issuer, "ClusterIssuer/")
	e.IssuerName = issuer
	if !ok {
		e.IssuerKind, e.State = "Issuer", hubapi.RevocationFailed
		e.Message = fmt.Sprintf("signed with the CA of %s downstream: the hub keeps no CRL for it; it is renewed only", r.Issuer)
		return e
	}
	if r.Kind == issued.KindCertificateRequest {
		e.Message = "signed for CertificateRequest " + r.Namespace + "/" + r.Name
	}
	ci := &cmapi.ClusterIssuer{}
	switch err := c.opts.Hub.Get(ctx, client.ObjectKey{Name: issuer}, ci); {
	case err != nil:
		e.State, e.Message = hubapi.RevocationFailed, fmt.Sprintf("ClusterIssuer %q: %v", issuer, err)
	case ci.Spec.CA != nil:
		e.IssuerKind = KindCA
	case ci.Spec.ACME != nil:
		e.IssuerKind = KindACME
	default:
		e.IssuerKind, e.State = "SelfSigned", hubapi.RevocationFailed
		e.Message = "a self-signed certificate cannot be revoked; it is renewed only"
	}
	return e
}

// revokeOne revokes e's serial: in its CA's CRL, or at its ACME CA with
// the certificate the record keeps (r; a status entry from before the
// record carries its own).
func (c *Controller) revokeOne(ctx context.Context, e hubapi.RevokedCertificate, r issued.Entry, reason int) error {
	switch e.IssuerKind {
	case KindCA:
		return c.crls.revoke(ctx, e.IssuerName, e.Serial, reason)
	case KindACME:
		if c.opts.ACME == nil {
			return errors.New("no ACME service to revoke with")
		}
		der := r.DER
		if b, _ := pem.Decode([]byte(e.CertificatePEM)); len(der) == 0 && b != nil {
			der = b.Bytes
		}
		if len(der) == 0 {
			return errors.New("the record keeps no copy of the certificate to revoke")
		}
		return c.opts.ACME.Revoke(ctx, e.IssuerName, der, reason)
	}
	return fmt.Errorf("issuer kind %q cannot revoke", e.IssuerKind)
}

// writeStatus merges rows and the entries of their clusters into rev's
// status (other replicas write their clusters' concurrently).
func (c *Controller) writeStatus(ctx context.Context, name string, rows map[string]hubapi.RevocationClusterStatus, entries map[string]hubapi.RevokedCertificate) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rev := &hubapi.CertificateRevocation{}
		if err := c.opts.Live.Get(ctx, client.ObjectKey{Name: name}, rev); err != nil {
			return client.IgnoreNotFound(err)
		}
		next := rev.Status.DeepCopy()
		now := metav1.NewTime(c.opts.clock.Now().UTC().Truncate(time.Second))
		for cl, row := range rows {
			i := slices.IndexFunc(next.Clusters, func(r hubapi.RevocationClusterStatus) bool { return r.Cluster == cl })
			if i >= 0 {
				old := next.Clusters[i]
				row.LastSeen = old.LastSeen
				if old.Selected != row.Selected || old.Revoked != row.Revoked || old.Message != row.Message || old.LastSeen == nil {
					row.LastSeen = &now
				}
				next.Clusters[i] = row
			} else {
				row.LastSeen = &now
				next.Clusters = append(next.Clusters, row)
			}
		}
		slices.SortFunc(next.Clusters, func(a, b hubapi.RevocationClusterStatus) int { return strings.Compare(a.Cluster, b.Cluster) })
		// Entries only advance (Renewing or Failed → Revoked) and are never
		// dropped: merged one by one, whatever another writer did meanwhile.
		for _, e := range entries {
			if _, mine := rows[e.Cluster]; !mine {
				continue
			}
			i := slices.IndexFunc(next.Certificates, func(x hubapi.RevokedCertificate) bool { return x.Serial == e.Serial })
			switch {
			case i < 0:
				next.Certificates = append(next.Certificates, e)
			case next.Certificates[i].State != hubapi.RevocationRevoked:
				next.Certificates[i] = e
			}
		}
		slices.SortFunc(next.Certificates, func(a, b hubapi.RevokedCertificate) int { return strings.Compare(a.Serial, b.Serial) })
		next.Revoked, next.Pending = 0, 0
		for _, e := range next.Certificates {
			switch {
			case e.State == hubapi.RevocationRevoked:
				next.Revoked++
			case e.IssuerKind == KindCA || e.IssuerKind == KindACME:
				next.Pending++
			}
		}
		next.Phase = hubapi.RevocationComplete
		if next.Pending > 0 || !c.everyClusterSeen(rev, next) {
			next.Phase = hubapi.RevocationInProgress
		}
		if equality.Semantic.DeepEqual(&rev.Status, next) {
			return nil
		}
		rev.Status = *next
		return c.opts.Hub.Status().Update(ctx, rev)
	})
}

// everyClusterSeen reports whether every registered cluster rev selects
// has a row.
func (c *Controller) everyClusterSeen(rev *hubapi.CertificateRevocation, st *hubapi.CertificateRevocationStatus) bool {
	for name := range c.opts.Clusters() {
		if selectsCluster(rev, string(name)) && !slices.ContainsFunc(st.Clusters, func(r hubapi.RevocationClusterStatus) bool { return r.Cluster == string(name) }) {
			return false
		}
	}
	return true
}
