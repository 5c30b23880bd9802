// Package hub wires one certhub replica: Options (every setting, with its
// default; internal/app fills them from flags), the multicluster manager,
// the coordinator that decides which clusters this replica engages and
// writes (--shard-coordinator), and the setup of every controller:
//
//	inventory (Argo CD cluster Secrets → clusters; the coordinator: shard,
//	   which clusters this replica engages and writes) → manager
//	   → migration (the write gate: mode, cert-manager still active)
//	   → record (internal/issued: what the hub signed)
//	   → acme and the issuers (internal/issuers) → policy → rotation
//	   → revocation → certsync (Certificate → TLS Secret + status; the
//	     issuance budget) → crsign (CertificateRequests) → shim → trust
//	   → discovery → standby (DR pairs) → health
//
// New validates the Options once, waits for the hub API server and calls one
// setup function per component (the table in components.go, after the
// shared dependencies of setupShared), in dependency order. Every component
// package has one constructor shape: New(Options) (*T, error) validates and
// defaults, and (*T).SetupWithManager(mgr) adds it to the manager (the
// multicluster manager for what engages clusters, the hub's for the rest);
// a package logs through its Options.Log or the manager's logger. Start runs
// the manager until ctx ends and returns the first error that stopped it;
// Run is both. The coordinator is typed once: certhub's *shard.Coordinator
// is the fence, the inventory's Connector and the readiness check. This is the only
// production package that imports shard: the others see ownership through
// internal/fence.
package hub
