package writegate

import (
	"context"
	"fmt"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cert-manager's controller, as its binary runs it (cmd/controller/app:
// startLeaderElection; defaults from internal/apis/config/shared).
const (
	// LeaseName is cert-manager's leader-election Lease.
	LeaseName = "cert-manager-controller"
	// DefaultLeaseNamespace is --leader-election-namespace's default.
	DefaultLeaseNamespace = "kube-system"
	// defaultLeaseDuration is --leader-election-lease-duration's default,
	// used when the Lease does not say.
	defaultLeaseDuration = 60 * time.Second
	// fieldManagerPrefix starts the field manager of every cert-manager
	// controller that writes a Certificate's status
	// (cert-manager-certificates-issuing, -readiness, -trigger, …).
	fieldManagerPrefix = "cert-manager"
)

// activity is what one look at a cluster found of cert-manager's controller.
type activity struct {
	// active: cert-manager's leader-election Lease is held — the one
	// signal no tenant can write (it lives in cert-manager's namespace).
	// It alone holds back the whole cluster.
	active  bool
	message string
	// namespaces: a Certificate there was written by a field manager named
	// like cert-manager's since the last look, with why. Any tenant can
	// write under that name (kubectl --field-manager), so it holds back
	// only Certificate status writes in its own namespace.
	namespaces map[string]string
	// skipped names the signals the registration may not read.
	skipped []string
}

// look asks c whether cert-manager's controller is active: its
// leader-election Lease held and renewed within its duration at now
// (cluster-wide), and in which namespaces a Certificate was written by a
// field manager named like cert-manager's after since (per namespace).
// A Forbidden read skips that signal; other errors are returned.
func look(ctx context.Context, c client.Reader, leaseNamespace string, since, now time.Time) (activity, error) {
	var a activity
	lease := &coordinationv1.Lease{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: leaseNamespace, Name: LeaseName}, lease); {
	case apierrors.IsForbidden(err):
		a.skipped = append(a.skipped, "Lease "+leaseNamespace+"/"+LeaseName)
	case apierrors.IsNotFound(err):
	case err != nil:
		return a, fmt.Errorf("failed to get Lease %s/%s: %w", leaseNamespace, LeaseName, err)
	default:
		if held, msg := leaseHeld(lease, now); held {
			a.active, a.message = true, msg
		}
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind + "List"))
	switch err := c.List(ctx, list); {
	case apierrors.IsForbidden(err):
		a.skipped = append(a.skipped, "Certificates")
	case apierrors.IsNotFound(err): // no cert-manager CRDs: nothing writes Certificates
	case err != nil:
		return a, fmt.Errorf("failed to list Certificates: %w", err)
	default:
		for i := range list.Items {
			it := &list.Items[i]
			if _, seen := a.namespaces[it.Namespace]; seen {
				continue
			}
			if m, at, ok := certManagerWrite(it.ManagedFields, since); ok {
				if a.namespaces == nil {
					a.namespaces = map[string]string{}
				}
				a.namespaces[it.Namespace] = fmt.Sprintf("Certificate %s/%s was written by a field manager named like cert-manager's (%q) at %s",
					it.Namespace, it.Name, m, at.UTC().Format(time.RFC3339))
			}
		}
	}
	return a, nil
}

// leaseHeld reports whether l has a holder that renewed it within its
// duration at now, and says so.
func leaseHeld(l *coordinationv1.Lease, now time.Time) (bool, string) {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		return false, ""
	}
	d := defaultLeaseDuration
	if s.LeaseDurationSeconds != nil {
		d = time.Duration(*s.LeaseDurationSeconds) * time.Second
	}
	renewed := l.CreationTimestamp.Time
	switch {
	case s.RenewTime != nil:
		renewed = s.RenewTime.Time
	case s.AcquireTime != nil:
		renewed = s.AcquireTime.Time
	}
	if !now.Before(renewed.Add(d)) {
		return false, ""
	}
	return true, fmt.Sprintf("cert-manager's leader-election Lease %s/%s is held by %q (renewed %s, for %s)",
		l.Namespace, l.Name, *s.HolderIdentity, renewed.UTC().Format(time.RFC3339), d)
}

// certManagerWrite returns the cert-manager field manager that wrote the
// object after since (managedFields times have whole seconds: a write in
// since's second counts).
func certManagerWrite(fields []metav1.ManagedFieldsEntry, since time.Time) (string, time.Time, bool) {
	for _, f := range fields {
		if f.Time == nil || !strings.HasPrefix(f.Manager, fieldManagerPrefix) || f.Time.Time.Before(since.Truncate(time.Second)) {
			continue
		}
		return f.Manager, f.Time.Time, true
	}
	return "", time.Time{}, false
}
