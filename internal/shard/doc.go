// Package shard decides which hub replica writes to which downstream cluster,
// with no leader: every replica is active, and each cluster has exactly one
// writing replica at a time.
//
// It is a multicluster-runtime Coordinator (mcmanager.WithCoordinator) and
// decides what each replica connects to as well as what it writes: the
// provider registers every valid registration with it (Register), and
// connects only the clusters it wants (Wanted, OnWantedChanged) — those it
// is assigned, plus Options.Standby warm ones. The Coordinator engages the
// controllers only for the connected clusters whose fence it holds.
//
//	peer Leases (certhub-peer-<id>) ──informer──▶ live peers, judged by local time
//	                                                   │
//	registered clusters ─▶ fence keys (cluster, or bucket-N, with its cluster count)
//	                  ─▶ AssignBounded(keys, peers)  (weighted HRW, bounded loads)
//	                                                   │ == self?
//	fence Lease (certhub-shard-<key>) ◀── acquire / renew / release
//	   │ assigned, or standby                          │ held + connected
//	provider connects (cache, watches)     Engage(child ctx) ─▶ certsync writes
//
// Contract:
//   - Membership: each replica keeps a peer Lease, renewed every
//     RenewInterval by a heartbeat of its own, so a long decision step
//     does not let it lapse. A Lease — peer or fence — counts as held until it has
//     not been seen to change for LeaseDuration, measured on the observer's
//     clock (client-go's leaderelection rule). The holder's renewTime may
//     only shorten that: a Lease whose renewTime is older than
//     LeaseDuration plus MaxClockSkew is expired even when first seen, so a
//     replica that just started, or relisted after a hub restart, need not
//     wait a whole lease for a holder long gone (found by the chaos run,
//     test/integration/chaos).
//   - No decision before the first membership snapshot (informer synced and
//     our own peer Lease written), and with AwaitRegistrations none — not
//     even a peer Lease — before the provider has registered the clusters
//     it found at its start (RegistrationsSynced). A replica that cannot
//     renew its own peer Lease decides to own nothing.
//   - Fencing: a cluster is engaged only while its fence Lease is held. A
//     holder that has not renewed for RenewDeadline (< LeaseDuration) stops
//     at once, before anyone else may take over; Owns turns false at that
//     moment even if the loop is busy. Every acquisition increments
//     leaseTransitions, and writers stamp "<replica>/<transition>" on what
//     they write, so a stale writer is detectable after the fact.
//   - Pauses: a renewal that succeeds after RenewDeadline keeps the fence
//     and the engagements; Owns was false meanwhile. Mark/Paused
//     (fence.Pauser) tell the controllers which reconciles overlapped the
//     pause, and fence.RetryPaused requeues just those.
//   - Handoff: when the assignment moves a cluster away, or on shutdown, the
//     replica cancels the engagement, then clears the fence's holder; on
//     shutdown it also deletes its peer Lease, so peers take over without
//     waiting for expiry. After a crash, takeover waits for LeaseDuration.
//   - Assignment: rendezvous hashing with bounded loads over the registered
//     clusters (connected or not, so an unreachable cluster has an owner
//     that keeps retrying it). Replicas agree while they see the same
//     registrations and peers; while they briefly disagree, the fences keep
//     one writer per cluster.
//   - One fence layout at a time (layout.go): replicas announce Buckets on
//     their peer Lease; one that sees a live peer or fence of another
//     layout (a rollout of another --shard-buckets) holds no fence until it
//     is gone, as two layouts guard a cluster with different Leases.
//   - Connections: Wanted is true for the clusters this replica is assigned
//     (holding or acquiring the fence) and for its standbys: the Standby
//     clusters, highest score first, that the assignment without their
//     owner would give to it. A replica that cannot renew its own peer Lease
//     keeps its connections as they are.
//   - All API calls but the heartbeat's happen in the decision loop's
//     steps — a step's fence writes run at most 16 at once, one per fence,
//     and the step waits for them (engagements start on their own
//     goroutines); the mutex is never held across an API call.
//
// Reads come from one label-selected informer on the hub's Leases; a renewal
// is one Update (no Get), half of upstream's coordinator's Get + Update.
package shard
