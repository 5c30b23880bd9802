package shard

import (
	"errors"
	"fmt"
	"github.com/go-logr/logr"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Defaults for Options. LeaseDuration/RenewDeadline/RetryPeriod are
// controller-runtime's leader-election defaults.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultRenewInterval is how often a healthy holder renews; renewing at
	// every RetryPeriod (client-go) would cost 2.5× the hub writes.
	DefaultRenewInterval = 5 * time.Second
	// DefaultMaxClockSkew: NTP keeps nodes well within a second of each other.
	DefaultMaxClockSkew = time.Second
	// DefaultBuckets is the fence layout of Options.Buckets' flag
	// (--shard-buckets): 128 buckets are right at every fleet size measured.
	// A fleet of N clusters uses min(N, ~128) fence Leases (at 150 clusters
	// 91 of them, most guarding one cluster, as per-cluster fences would),
	// so the hub's Lease renewals stay under ~26/s from 1,000 clusters to
	// 10,000 and beyond; over 3 replicas the split stays within max/min
	// 1.06 and a 4th replica moves 27–31 % of the clusters (ten name sets at
	// 150, 1,000, 3,000 and 10,000 clusters; docs/benchmarks.md).
	DefaultBuckets = 128
	// DefaultPeerPrefix and DefaultFencePrefix name the Leases.
	DefaultPeerPrefix  = "certhub-peer"
	DefaultFencePrefix = "certhub-shard"
)

// Options configure a Coordinator.
type Options struct {
	// Config reaches the hub API server, where all Leases live. Required.
	Config *rest.Config
	// Log is the logger. Default: discard.
	Log logr.Logger
	// Namespace holds the peer and fence Leases in the hub. Required.
	Namespace string
	// Identity names this replica (its peer Lease and fence holder). Required; unique per replica.
	Identity string
	// Weight is this replica's relative capacity for the assignment. Defaults to 1.
	Weight float64

	// LeaseDuration is how long a Lease that has not been seen to change
	// counts as held. Expiry is judged by the observer's clock, from when it
	// last saw the Lease change (client-go's leaderelection rule); see
	// MaxClockSkew for the one use of the holder's timestamps. Defaults to
	// DefaultLeaseDuration.
	LeaseDuration time.Duration
	// MaxClockSkew bounds how far replicas' clocks may differ. A Lease whose
	// renewTime is older than LeaseDuration + MaxClockSkew by this replica's
	// clock counts as expired even if this replica saw it only now, so a
	// replica that just started (or relisted after a hub restart) need not
	// wait a whole lease for a holder that is long gone. A holder's renewTime
	// can only shorten the observed expiry, never extend it. Safe while clocks
	// differ by less than LeaseDuration - RenewDeadline + MaxClockSkew.
	// Defaults to DefaultMaxClockSkew; negative turns the rule off.
	MaxClockSkew time.Duration
	// RenewDeadline: a holder that has not renewed for this long stops writing
	// and gives the cluster up. Must be < LeaseDuration, so it stops before
	// anyone else may start. Defaults to DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod is the decision loop's tick and the retry interval of failed
	// Lease writes. Must be < RenewDeadline/1.2. Defaults to DefaultRetryPeriod.
	RetryPeriod time.Duration
	// RenewInterval is how often held Leases are renewed. Must be < RenewDeadline. Defaults to DefaultRenewInterval.
	RenewInterval time.Duration

	// Buckets, when > 0, hashes clusters into that many virtual shards with
	// one fence Lease each. 0 means one fence per cluster. Replicas that
	// differ hold no fence until they agree (layout.go). Defaults to 0 here;
	// the hub's flag defaults to DefaultBuckets.
	Buckets int
	// Standby is how many clusters this replica keeps warm besides those it
	// owns: connected, cache synced, never written to — the ones it would
	// take over first if their owner died (next in rendezvous order), so such
	// a takeover waits for no connection or cache sync. Defaults to 0.
	Standby int
	// Balance is the ε of the bounded-load assignment (AssignBounded): no
	// replica is assigned more than ⌈(1+ε)·N·weight/Σweights⌉ of the N
	// clusters. Every replica must use the same value. Defaults to DefaultBalance.
	Balance float64
	// AwaitRegistrations holds the replica out of the membership (no peer
	// Lease, no decision) until RegistrationsSynced is called: until the
	// provider has registered every cluster Secret present at its start. A
	// replica that decided on part of the fleet would assign the fences
	// differently from its peers, and take and give back fences while the
	// rest of the registrations arrived (a restart at 10,000 clusters did so
	// for 7 minutes). Defaults to false: decide at once, for callers that
	// Register before Start or have no provider.
	AwaitRegistrations bool
	// PeerPrefix defaults to DefaultPeerPrefix; FencePrefix to DefaultFencePrefix.
	PeerPrefix, FencePrefix string
	// Registerer receives the shard metrics. Defaults to controller-runtime's registry.
	Registerer prometheus.Registerer

	clock clock.WithTicker // test seam; defaults to the real clock
}

func (o *Options) defaults() {
	if o.Weight == 0 {
		o.Weight = 1
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.MaxClockSkew == 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = min(DefaultRenewInterval, o.RenewDeadline/2)
	}
	if o.Balance == 0 {
		o.Balance = DefaultBalance
	}
	if o.PeerPrefix == "" {
		o.PeerPrefix = DefaultPeerPrefix
	}
	if o.FencePrefix == "" {
		o.FencePrefix = DefaultFencePrefix
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
}

// Validate checks the options, including client-go's lease invariant
// LeaseDuration > RenewDeadline > 1.2 × RetryPeriod.
func (o Options) Validate() error {
	var errs []error
	if o.Config == nil {
		errs = append(errs, errors.New("shard: Config is required"))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("shard: Namespace is required"))
	}
	if o.Identity == "" {
		errs = append(errs, errors.New("shard: Identity is required"))
	}
	if o.Weight < 0 {
		errs = append(errs, fmt.Errorf("shard: Weight %v must not be negative", o.Weight))
	}
	if o.LeaseDuration < time.Second || o.LeaseDuration%time.Second != 0 {
		// A Lease stores whole seconds (leaseDurationSeconds): 1500ms would be
		// written as 1s and other replicas would take over early.
		errs = append(errs, fmt.Errorf("shard: LeaseDuration (%s) must be a whole number of seconds, at least 1s", o.LeaseDuration))
	}
	if o.LeaseDuration <= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("shard: LeaseDuration (%s) must be greater than RenewDeadline (%s)", o.LeaseDuration, o.RenewDeadline))
	}
	if float64(o.RenewDeadline) <= 1.2*float64(o.RetryPeriod) {
		errs = append(errs, fmt.Errorf("shard: RenewDeadline (%s) must be greater than 1.2 × RetryPeriod (%s)", o.RenewDeadline, o.RetryPeriod))
	}
	if o.RetryPeriod <= 0 || o.RenewInterval <= 0 || o.RenewInterval >= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("shard: RetryPeriod (%s) must be > 0 and RenewInterval (%s) in (0, RenewDeadline)", o.RetryPeriod, o.RenewInterval))
	}
	if o.Standby < 0 {
		errs = append(errs, fmt.Errorf("shard: Standby %d must not be negative", o.Standby))
	}
	if o.Balance < 0 {
		errs = append(errs, fmt.Errorf("shard: Balance %v must not be negative", o.Balance))
	}
	if o.Buckets < 0 {
		errs = append(errs, fmt.Errorf("shard: Buckets %d must not be negative", o.Buckets))
	}
	return errors.Join(errs...)
}
