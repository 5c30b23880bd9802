package shard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Labels and annotations on certhub's Leases.
const (
	leaseKindPeer  = "peer"
	leaseKindFence = "fence"
	maxNameLen     = 253
)

// leaseName builds "<prefix>-<key>" as a valid object name. Keys that are not
// already DNS-1123 (or are too long) get a hash suffix so two keys can never
// share a Lease.
func leaseName(prefix, key string) string {
	s := sanitize.DNS1123(key)
	if s == key && len(prefix)+1+len(s) <= maxNameLen {
		return prefix + "-" + s
	}
	sum := sha256.Sum256([]byte(key))
	suffix := hex.EncodeToString(sum[:])[:10]
	if room := maxNameLen - len(prefix) - 2 - len(suffix); len(s) > room {
		s = strings.TrimRight(s[:room], "-.")
	}
	return prefix + "-" + s + "-" + suffix
}

// FenceKey is the key of the fence that guards cluster: the cluster itself,
// or with buckets > 0 its bucket "bucket-<n>" (n = xxhash64(cluster) mod buckets).
func FenceKey(cluster string, buckets int) string {
	if buckets <= 0 {
		return cluster
	}
	return "bucket-" + strconv.FormatUint(xxhash.Sum64String(cluster)%uint64(buckets), 10)
}

// observation is what this replica knows of one Lease, client-go style:
// expiry counts from when *we* saw it change, not from its timestamps.
type observation struct {
	lease      *coordinationv1.Lease
	observedAt time.Time
}

func (o *observation) holder() string {
	if o == nil || o.lease == nil || o.lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *o.lease.Spec.HolderIdentity
}

func (o *observation) duration() time.Duration {
	if o == nil || o.lease == nil || o.lease.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*o.lease.Spec.LeaseDurationSeconds) * time.Second
}

// expiry is when the claim ends: a lease duration after we saw it change,
// or earlier when its renewTime plus a lease duration plus maxSkew says so
// (maxSkew < 0: never). A holder's timestamp can shorten a claim we just
// saw, never extend one.
func (o *observation) expiry(maxSkew time.Duration) time.Time {
	at := o.observedAt.Add(o.duration())
	if maxSkew >= 0 && o.lease != nil && o.lease.Spec.RenewTime != nil {
		if stamp := o.lease.Spec.RenewTime.Add(o.duration() + maxSkew); stamp.Before(at) {
			at = stamp
		}
	}
	return at
}

// live reports whether the Lease has a holder whose claim has not expired by now.
func (o *observation) live(now time.Time, maxSkew time.Duration) bool {
	return o.holder() != "" && now.Before(o.expiry(maxSkew))
}

// observer keeps observations of the Leases the informer delivers.
type observer struct {
	mu      sync.Mutex
	leases  map[string]*observation // by Lease name
	maxSkew time.Duration           // Options.MaxClockSkew
}

func newObserver(maxSkew time.Duration) *observer {
	return &observer{leases: map[string]*observation{}, maxSkew: maxSkew}
}

// live reports whether Lease name is held and unexpired as of now.
func (ob *observer) live(name string, now time.Time) bool {
	o := ob.get(name)
	return o != nil && o.live(now, ob.maxSkew)
}

// record stores l, restarting its expiry clock only when its holder or renew
// time changed (a resync or an unrelated update does not extend a claim).
func (ob *observer) record(l *coordinationv1.Lease, now time.Time) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	prev := ob.leases[l.Name]
	if prev != nil && samerecord(prev.lease, l) {
		prev.lease = l
		return
	}
	ob.leases[l.Name] = &observation{lease: l, observedAt: now}
}

func samerecord(a, b *coordinationv1.Lease) bool {
	eq := func(x, y *string) bool { return (x == nil && y == nil) || (x != nil && y != nil && *x == *y) }
	rt := func(l *coordinationv1.Lease) time.Time {
		if l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	return eq(a.Spec.HolderIdentity, b.Spec.HolderIdentity) && rt(a).Equal(rt(b)) &&
		ptrEq(a.Spec.LeaseTransitions, b.Spec.LeaseTransitions)
}

func ptrEq(a, b *int32) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func (ob *observer) forget(name string) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	delete(ob.leases, name)
}

// get returns a copy of the observation of Lease name, or nil.
func (ob *observer) get(name string) *observation {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if o := ob.leases[name]; o != nil {
		c := *o
		return &c
	}
	return nil
}

// nextExpiry returns the earliest moment after now at which a Lease held by
// someone other than self expires, or the zero time. The decision loop wakes
// then, so takeover after a crash is not delayed by up to a tick.
func (ob *observer) nextExpiry(now time.Time, self string) time.Time {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var next time.Time
	for _, o := range ob.leases {
		if h := o.holder(); h == "" || h == self {
			continue
		}
		at := o.expiry(ob.maxSkew)
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// peers returns the live peers (by their peer Leases) as of now.
func (ob *observer) peers(now time.Time) []Peer {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var out []Peer
	for _, o := range ob.leases {
		if o.lease.Labels[hubapi.LeaseKindLabel] != leaseKindPeer || !o.live(now, ob.maxSkew) {
			continue
		}
		w, err := strconv.ParseFloat(o.lease.Annotations[hubapi.ReplicaWeightAnnotation], 64)
		if err != nil || w <= 0 {
			w = 1
		}
		out = append(out, Peer{ID: o.holder(), Weight: w})
	}
	return out
}

func (o *observation) String() string {
	if o == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s held by %q since %s", o.lease.Name, o.holder(), o.observedAt.Format(time.RFC3339Nano))
}
