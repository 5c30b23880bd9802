// Package app is certhub's command line: flags become Options, Options are
// validated once, and the manager is wired from the other packages. It is the
// only package that knows them all:
//
//	inventory (Argo CD cluster Secrets → clusters)
//	   → shard (which clusters this replica engages and writes: --shard-coordinator)
//	   → certsync (Certificate → TLS Secret + status)
//	   → issuance (ClusterIssuers in the hub)
//
// Subcommands: `run` (the controller), `status` (the hub's view of every
// registered cluster and its Certificates), `cluster add` (grant the hub
// access to a cluster and write its registration: a Secret or an
// ExternalSecret) and `cluster validate` (check registrations offline, for
// CI), `policy check`, and `version`. The demo is its own command
// (cmd/certhub-demo, internal/demo), so this package links no test machinery.
package app
