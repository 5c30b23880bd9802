// Package fleet runs hub replicas as separate `certhub run` processes and
// watches what they do, for the integration tiers that need several replicas
// at once (shard, chaos):
//
//   - Config.Start starts one replica for a test (Launch, without a test,
//     for the benchmarks); Replica.Stop signals it (SIGKILL or SIGTERM) and
//     waits for its exit; Replica.RSS reads its memory.
//   - StartAuditor records every version of every certhub-managed Secret in
//     the downstream clusters; Auditor.Check fails the test when two replicas
//     wrote one cluster within one fence period.
//   - SampleOwnership lists the fence Leases every 250ms; the samples show who
//     held each cluster when, and for how long a cluster had no owner.
package fleet
