package rotation

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"sort"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/trust"
)

// stuckReasons are the Ready=False reasons of a Certificate that cannot
// move to a new CA for reasons of its own, until it changes: such a
// Certificate is listed and holds no wave.
var stuckReasons = map[string]bool{
	reasons.PolicyDenied: true, reasons.SecretNotOwned: true, reasons.DuplicateSecretName: true,
	reasons.InvalidSpec: true, reasons.InvalidNames: true, reasons.InvalidSubject: true,
	reasons.InvalidLifetime: true, reasons.InvalidPrivateKey: true, reasons.InvalidUsages: true,
	reasons.InvalidKeystores: true, reasons.InvalidOutputFormats: true, reasons.InvalidSecretName: true,
	reasons.InvalidIssuerRef: true, reasons.KeystorePasswordNotFound: true, reasons.IssuanceLoop: true,
	issuers.ReasonIssuerNotSupported: true,
}

// maxStuckNames bounds the names a report lists per cluster.
const maxStuckNames = 10

// observe returns this replica's view of the rotation of iss to the CA in
// Secret next (its signing certificate nextCA): for every cluster it owns
// (all it is connected to, without a Fence), whether its bundles hold the
// new CA as trust publishes it, and how its Certificates of iss stand.
// Clusters it cannot read are left out.
func (r *Rotator) observe(ctx context.Context, iss *cmapi.ClusterIssuer, next string, nextCA *x509.Certificate) map[multicluster.ClusterName]progress {
	want := trust.PublishedPEM(ctx, r.opts.Hub, r.opts.Namespace, iss.Name, next)
	out := map[multicluster.ClusterName]progress{}
	for name, labels := range r.opts.Clusters() {
		if r.opts.Fence != nil {
			if _, owned := r.opts.Fence.Owns(name); !owned {
				continue
			}
		}
		cl, err := r.opts.GetCluster(ctx, name)
		if err != nil {
			continue
		}
		// One live read tells whether the cluster answers (its cache would
		// serve the last state of a cluster that is down) and what its
		// bundles hold now.
		bundles, err := r.liveBundles(ctx, cl)
		if err != nil {
			continue // unreachable: holds no wave, rotated when back
		}
		p := progress{Published: r.opts.BundleName == "" || r.opts.Scoped(name) || r.bundleHolds(bundles, iss, labels, want)}
		list := certspec.NewList()
		if err := cl.GetClient().List(ctx, list); err != nil {
			continue
		}
		for i := range list.Items {
			crt := &cmapi.Certificate{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, crt) != nil {
				continue
			}
			ref := crt.Spec.IssuerRef
			if ref.Kind != cmapi.ClusterIssuerKind || ref.Name != iss.Name || (ref.Group != "" && ref.Group != "cert-manager.io") {
				continue
			}
			p.Total++
			ready, reason, onNext := r.standing(ctx, name, cl, crt, nextCA)
			switch {
			case ready && onNext:
				p.Moved++
			case !ready && stuckReasons[reason]:
				p.Stuck++
				if len(p.StuckNames) < maxStuckNames {
					p.StuckNames = append(p.StuckNames, fmt.Sprintf("%s/%s (%s)", crt.Namespace, crt.Name, reason))
				}
			}
			if onNext {
				p.OnNext++
			}
		}
		out[name] = p
	}
	return out
}

// liveProbeTimeout bounds the live read of one cluster's bundles.
const liveProbeTimeout = 3 * time.Second

// liveBundles reads the cluster's trust bundle ConfigMaps from its API
// server (not the cache).
func (r *Rotator) liveBundles(ctx context.Context, cl cluster.Cluster) ([]corev1.ConfigMap, error) {
	ctx, cancel := context.WithTimeout(ctx, liveProbeTimeout)
	defer cancel()
	list := &corev1.ConfigMapList{}
	if err := cl.GetAPIReader().List(ctx, list, client.MatchingLabels{hubapi.TrustBundleLabel: "true"}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// bundleHolds reports whether every bundle ConfigMap in a namespace iss's
// CA reaches (trust scope) holds every block of want.
func (r *Rotator) bundleHolds(bundles []corev1.ConfigMap, iss *cmapi.ClusterIssuer, labels map[string]string, want [][]byte) bool {
	if len(want) == 0 {
		return false // the next CA's Secret cannot be read: nothing is published
	}
	for _, cm := range bundles {
		if cm.Name != r.opts.BundleName || !trust.Reaches(iss, labels, cm.Namespace) {
			continue
		}
		for _, b := range want {
			if !bytes.Contains([]byte(cm.Data[r.opts.BundleKey]), b) {
				return false
			}
		}
	}
	return true // every bundle it reaches holds it (or it reaches none: nothing to wait for)
}

// standing is crt's readiness (and its Ready reason when not ready) and
// whether its Secret holds a certificate signed by next.
func (r *Rotator) standing(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, crt *cmapi.Certificate, next *x509.Certificate) (ready bool, reason string, onNext bool) {
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionReady {
			ready, reason = c.Status == cmmeta.ConditionTrue, c.Reason
		}
	}
	leaf, err := r.opts.Leaf(ctx, name, cl, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName})
	return ready, reason, err == nil && leaf != nil && leaf.CheckSignatureFrom(next) == nil
}

func summarize(missing map[multicluster.ClusterName]int) string {
	names := make([]string, 0, len(missing))
	for n := range missing {
		names = append(names, string(n))
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if c := missing[multicluster.ClusterName(n)]; c < 0 {
			parts = append(parts, n+" (unreachable)")
		} else {
			parts = append(parts, fmt.Sprintf("%s (%d)", n, c))
		}
	}
	return strings.Join(parts, ", ")
}
