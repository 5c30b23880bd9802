// Package rotation rotates a CA ClusterIssuer's key pair without an outage,
// wave by wave across the downstream clusters:
//
//	annotate the ClusterIssuer certhub.io/next-ca-secret: <Secret in the hub namespace>
//	  Publishing  trust bundles carry old + new CA; wait until every
//	              engaged cluster's bundle ConfigMaps hold the new one
//	  Soaking     hold for Options.Soak
//	  Rolling w   clusters of wave w (label certhub.io/wave on the cluster
//	              Secret, numeric order; unlabelled clusters last) sign
//	              with the new CA: certsync re-issues what the old one
//	              signed. Every Certificate of the issuer in waves ≤ w
//	              Ready and signed by the new CA → Pausing (or Grace after
//	              the last wave); not within Options.Deadline → Halted
//	  Halted      Warning Event on the ClusterIssuer, metric, certhub
//	              status line; resumed (Rolling w again) when
//	              certhub.io/rotation-resume changes
//	  Pausing     Options.Pause, then Rolling w+1
//	  Grace       Options.Grace, then
//	  Complete    bundles carry the new CA only. Finish in Git: point
//	              spec.ca.secretName at the new Secret, then drop the annotation.
//
// Contract: the state of each rotation is a ConfigMap certhub-rotation-<issuer>
// in the hub namespace, visible with kubectl and updated with optimistic
// concurrency by whichever replica steps first (every replica computes the
// same transitions from the same inputs). At every phase a certificate is
// signed by a CA every bundle downstream already trusts: the new CA signs
// only after it is published everywhere, and the old CA leaves the bundles
// only after every certificate moved.
package rotation
