package shard

import (
	"context"
	"fmt"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Owners says which replica holds the fence of each cluster, as the fence
// Leases in the hub record it. It is the one reader of fence ownership for
// tools (`certhub status`, the demo): it handles per-cluster and bucket
// fences alike.
type Owners struct {
	byKey   map[string]string // fence key → holder
	buckets map[int]bool      // bucket counts seen on bucket fences
}

// ReadOwners lists the fence Leases in namespace. Released fences (no
// holder) give no owner. Expiry is not judged: this is what the Leases say.
func ReadOwners(ctx context.Context, hub client.Reader, namespace string) (Owners, error) {
	o := Owners{byKey: map[string]string{}, buckets: map[int]bool{}}
	leases := &coordinationv1.LeaseList{}
	if err := hub.List(ctx, leases, client.InNamespace(namespace), client.MatchingLabels{hubapi.LeaseKindLabel: leaseKindFence}); err != nil {
		return o, fmt.Errorf("failed to list fence Leases in %s: %w", namespace, err)
	}
	for _, l := range leases.Items {
		if n, err := strconv.Atoi(l.Annotations[hubapi.ShardBucketsAnnotation]); err == nil && n > 0 {
			o.buckets[n] = true
		}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			o.byKey[l.Annotations[hubapi.FenceKeyAnnotation]] = *l.Spec.HolderIdentity
		}
	}
	return o, nil
}

// Owner returns the replica holding cluster's fence — its own, or its
// bucket's — or "" when none does.
func (o Owners) Owner(cluster string) string {
	if h := o.byKey[cluster]; h != "" {
		return h
	}
	for n := range o.buckets {
		if h := o.byKey[FenceKey(cluster, n)]; h != "" {
			return h
		}
	}
	return ""
}
