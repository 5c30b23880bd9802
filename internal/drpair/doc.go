// Package drpair makes a standby cluster hold valid certificates for its
// primary's names before any failover (DR pairs): the platform team labels
// the standby's Argo CD Secret certhub.io/standby-for=<primary>, and every
// Certificate of the primary — or those the standby's
// certhub.io/standby-selector annotation selects — is also issued in the
// standby, by the hub, under the standby's own policy.
//
//	the primary's owner, every Interval:
//	  the primary's Certificates (cache) + their Secrets' leaves
//	    ─▶ ConfigMap certhub-standby-source-<primary> (hub namespace, gzip JSON)
//	the standby's owner, every Interval:
//	  source ─▶ selected, issued in the primary ─▶ a Certificate of the same
//	  namespace/name in the standby (created or kept in step; marked
//	  certhub.io/standby-mirror) ─▶ certsync issues it like any other
//	  ─▶ each checked against its Secret's leaf: same names, valid, not
//	     expiring before the primary's unless not yet due for renewal
//	  ─▶ ConfigMap certhub-standby-<standby>, certhub_standby_* metrics,
//	     `certhub status --standbys`, alert CerthubStandbyNotReady
//
// Contract:
//   - One writer per cluster: the source is written by the primary's owner,
//     the standby's Certificates and status by the standby's owner, through
//     its Fence (the migration gate: a standby in observe mode is reported,
//     never written).
//   - The standby is never given more than the primary was: only
//     Certificates Ready in the primary at their current generation, with a
//     leaf in their Secret, are mirrored. The standby's IssuancePolicies
//     judge them again (its key material lands there). A Certificate that
//     already exists in the standby without the mirror's mark is left
//     alone: it is checked, never written.
//   - Nothing is deleted because something is missing: a source that is
//     absent, truncated or older than the mirrored Certificate deletes
//     nothing, and an unreachable or deregistered primary leaves the
//     standby as it is. Only a Certificate deleted in the primary, seen so
//     in a complete source, is deleted in the standby.
//   - Keys never cross: the standby's key is generated for the standby
//     (with an ACME issuer that opts into sharing identical requests, the
//     pair may share one order and key, docs/acme.md).
package drpair
