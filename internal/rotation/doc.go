// Package rotation rotates a CA ClusterIssuer's key pair without an outage,
// wave by wave across the downstream clusters:
//
//	annotate the ClusterIssuer certhub.io/next-ca-secret: <Secret in the hub namespace>
//	  Publishing  trust bundles carry old + new CA; wait until every
//	              reachable cluster's bundles (those the issuer's trust
//	              scope reaches) hold the new CA as trust publishes it
//	              (ca.crt: a root above an intermediate is enough); not
//	              within Options.Deadline → Halted
//	  Soaking     hold for Options.Soak
//	  Rolling w   clusters of wave w (label certhub.io/wave on the cluster
//	              Secret, numeric order; unlabelled clusters last) sign
//	              with the new CA once their own bundles hold it: certsync
//	              re-issues what the old one signed. Every Certificate of
//	              the issuer in reachable clusters of waves ≤ w Ready and
//	              signed by the new CA, or unable to move for reasons of its
//	              own (PolicyDenied, SecretNotOwned, … : listed, counted in
//	              certhub_ca_rotation_stuck_certificates) → Pausing (or
//	              Grace after the last wave); not within Options.Deadline
//	              → Halted. An unreachable cluster holds no wave: it is
//	              rotated when it is back, bundle first
//	  Halted      Warning Event on the ClusterIssuer, metric, certhub
//	              status line; resumed when certhub.io/rotation-resume changes
//	  Pausing     Options.Pause, then Rolling w+1
//	  Grace       Options.Grace, then — once every cluster was seen moved,
//	              or certhub.io/rotation-force changes —
//	  Complete    bundles carry the new CA only. Finish in Git: point
//	              spec.ca.secretName at the new Secret, then drop the annotation.
//
//	remove the annotation before Complete (or before pointing the issuer at
//	the new CA): withdrawn before anything was signed, the rotation just
//	ends; after, it is Aborting — bundles keep both CAs and every cluster
//	signs with the issuer's CA again until no certificate is on the new CA
//	(every cluster seen, or forced), then the new CA leaves the bundles.
//
// The transitions are one pure function (advance) of the state and what
// the replicas observed, unit-tested step by step.
//
// Contract: the state of each rotation is a ConfigMap certhub-rotation-<issuer>
// in the hub namespace, visible with kubectl and updated with optimistic
// concurrency by whichever replica steps first (every replica computes the
// same transitions from the same inputs). At every phase a certificate is
// signed by a CA every bundle of its cluster already trusts: the new CA
// signs in a cluster only after that cluster's bundles hold it, and a CA
// leaves the bundles only after every certificate seen moved off it.
package rotation
