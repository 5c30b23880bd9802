// Package trust puts the hub's CAs where workloads can trust them: it keeps a
// trust bundle — the CA certificates of the hub's CA ClusterIssuers, PEM,
// in trust-manager's target layout (one ConfigMap, one key) — in the
// namespaces of every engaged downstream cluster, exact: edited or deleted
// copies are repaired, and copies are removed where no longer wanted.
//
//	hub: ClusterIssuers (spec.ca) + their CA Secrets ──▶ bundle (PEM, sorted, deduplicated)
//	       │ changed
//	       ▼
//	every engaged cluster ──▶ for each Namespace matching the selector:
//	                            ConfigMap <name> {<key>: bundle}, labelled certhub.io/trust-bundle
//	                          elsewhere (or an empty bundle): the labelled ConfigMap deleted
//
// Contract:
//   - The bundle holds each CA ClusterIssuer's ca.crt (the root), or its
//     tls.crt when ca.crt is empty; an issuer annotated
//     certhub.io/trust-bundle: "false" is left out. Bundles never carry keys.
//   - Beside the bundle, key CRLKey holds the CRLs the hub keeps for the
//     CAs in it (internal/revocation), when any has revoked something.
//   - Only ConfigMaps carrying ManagedLabel are written or deleted; a
//     ConfigMap of the same name that certhub did not create is left alone
//     and reported (Event on the Namespace, log line naming the cluster).
//   - Writes happen only while this replica owns the cluster, each within
//     the owner's deadline (Options.Fence).
//   - The downstream cache holds only labelled ConfigMaps (CacheOptions).
//   - Clusters the hub reaches through a namespace-scoped registration are
//     skipped (Options.Engage): listing Namespaces needs cluster-wide read.
package trust
