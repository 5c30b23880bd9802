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
// Contract: Run validates its Options once, blocks until ctx ends, and
// returns the first error that stopped the manager. It is the only
// production package that imports shard: the others see ownership through
// internal/fence.
package hub
