// Package app is certhub's command line: flags become Options, Options are
// validated once, and the manager is wired from the other packages. It is the
// only package that knows them all:
//
//	inventory (Argo CD cluster Secrets → clusters)
//	   → shard (which clusters this replica engages and writes: --coordinator)
//	   → certsync (Certificate → TLS Secret + status)
//	   → issuance (ClusterIssuers in the hub)
//
// Subcommands: `run` (the controller) and `demo` (the same controller on local
// control planes started in-process).
package app
