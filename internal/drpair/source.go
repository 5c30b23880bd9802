package drpair

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/hubreport"
)

// entryOf is u as a source entry: issued when Ready at its current
// generation with a leaf in its Secret (read from c, the cache of
// certhub's Secrets).
func entryOf(ctx context.Context, c client.Reader, u *unstructured.Unstructured) (Entry, error) {
	e := Entry{Namespace: u.GetNamespace(), Name: u.GetName(), Labels: u.GetLabels()}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	raw, err := json.Marshal(spec)
	if err != nil {
		return e, err
	}
	e.Spec = raw
	crt := &cmapi.Certificate{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crt); err != nil {
		return e, nil // not issued by the hub either: listed, never mirrored
	}
	ready := false
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionReady && c.Status == cmmeta.ConditionTrue && c.ObservedGeneration == crt.Generation {
			ready = true
		}
	}
	if !ready || crt.Spec.SecretName == "" {
		return e, nil
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: crt.Spec.SecretName}, s); err != nil {
		return e, client.IgnoreNotFound(err)
	}
	if s.Labels[hubapi.ManagedByLabel] != hubapi.ManagedByValue {
		return e, nil
	}
	if leaf := leafOf(s); leaf != nil {
		e.Issued, e.NotAfter, e.Names = true, leaf.NotAfter.UTC(), namesOf(leaf)
	}
	return e, nil
}

// writeSource writes primary's Certificates to its source ConfigMap, when
// they changed since this replica last wrote it.
func (p *Pairs) writeSource(ctx context.Context, primary multicluster.ClusterName, cl cluster.Cluster, stamp string) error {
	list := certspec.NewList()
	if err := cl.GetClient().List(ctx, list); err != nil {
		return fmt.Errorf("failed to list the Certificates of primary %s: %w", primary, err)
	}
	src := Source{Primary: string(primary), By: strings.SplitN(stamp, "/", 2)[0], At: p.opts.clock.Now().UTC()}
	for i := range list.Items {
		if list.Items[i].GetDeletionTimestamp() != nil {
			continue
		}
		e, err := entryOf(ctx, cl.GetClient(), &list.Items[i])
		if err != nil {
			return fmt.Errorf("failed to read Certificate %s/%s of primary %s: %w", list.Items[i].GetNamespace(), list.Items[i].GetName(), primary, err)
		}
		src.Certificates = append(src.Certificates, e)
	}
	slices.SortFunc(src.Certificates, func(a, b Entry) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	digest, err := digestOf(src.Certificates)
	if err != nil {
		return err
	}
	name := SourceName(string(primary))
	if !p.changed(name, digest) {
		return nil
	}
	raw, err := src.encode()
	if err != nil {
		return fmt.Errorf("failed to encode the source of primary %s: %w", primary, err)
	}
	if err := hubreport.Put(ctx, p.opts.Hub, client.ObjectKey{Namespace: p.opts.Namespace, Name: name}, hubapi.StandbySourceLabel,
		nil, map[string][]byte{SourceKey: raw}); err != nil {
		return err
	}
	p.wrote(name, digest)
	p.opts.Log.V(1).Info("wrote the primary's Certificates for its standbys", "cluster", primary, "certificates", len(src.Certificates))
	return nil
}

// digestOf is a digest of v's JSON.
func digestOf(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

// readSource reads primary's source from the hub; nil when there is none.
func (p *Pairs) readSource(ctx context.Context, primary multicluster.ClusterName) (*Source, error) {
	cm := &corev1.ConfigMap{}
	if err := p.opts.Hub.Get(ctx, client.ObjectKey{Namespace: p.opts.Namespace, Name: SourceName(string(primary))}, cm); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	raw, ok := cm.BinaryData[SourceKey]
	if !ok {
		return nil, nil
	}
	return decodeSource(raw)
}
