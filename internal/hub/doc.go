// Package hub wires one certhub replica: Options (every setting, with its
// default; internal/app fills them from flags), the multicluster manager,
// the coordinator that decides which clusters this replica engages and
// writes (--shard-coordinator), and the setup of every controller:
//
//	inventory (Argo CD cluster Secrets → clusters)
//	   → shard (which clusters this replica engages and writes)
//	   → certsync (Certificate → TLS Secret + status)
//	   → issuance (ClusterIssuers in the hub), with policy, budget, acme,
//	     trust, rotation and shim beside them
//
// New validates the Options once, waits for the hub API server and calls one
// setup function per component (setup.go), in dependency order; Start runs
// the manager until ctx ends and returns the first error that stopped it;
// Run is both. The coordinator is typed once: certhub's *shard.Coordinator
// is the fence, the inventory's gate and the readiness check. This is the only
// production package that imports shard: the others see ownership through
// internal/fence.
package hub
