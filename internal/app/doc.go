// Package app is certhub's command line: flags become hub.Options, and each
// subcommand does its one job. The wiring of a running replica is
// internal/hub's; this package only parses, validates and hands over.
//
// Subcommands: `run` (a hub replica: internal/hub), `status` (the hub's
// view of every registered cluster and its Certificates), `cluster add`
// (grant the hub access to a cluster and write its registration: a Secret or
// an ExternalSecret) and `cluster validate` (check registrations offline,
// for CI), `policy check`, and `version`. The demo is its own command
// (cmd/certhub-demo, internal/demo), so this package links no test machinery.
package app
