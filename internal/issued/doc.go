// Package issued is the hub's record of every certificate its issuers
// signed: for a Certificate, for a CertificateRequest, through an ACME
// order. The hub decides from it — which serials a revocation selects,
// whether the certificate in a Secret is the one it issued for that
// Certificate, which request an ordered certificate was made for — and
// never from what a tenant can write downstream (a tls.crt, an annotation).
//
//	signer ─▶ Record.Add(entry) ─▶ group commit ─▶ ConfigMap certhub-issued-<writer>-<n>
//	           (blocks until stored)                (hub namespace, label certhub.io/record)
//	       ─▶ only then: the certificate leaves the hub (Secret, request status)
//	every replica: informer on the record's ConfigMaps ─▶ in-memory index
//	  Lookup(issuer, serial) · Object(cluster, kind, namespace, name) · Entries()
//
// Contract:
//   - An entry is stored before its certificate leaves the hub: a signer
//     that cannot record does not deliver (ErrFull past MaxEntries).
//   - One entry per (issuer, serial): the ConfigMap key is the identity, so
//     a signature recorded twice (a retried write, two replicas signing one
//     CertificateRequest with its deterministic serial, an ACME order fetched
//     again) is one entry. A replica killed after Add and before delivery
//     leaves an entry whose certificate never left; the next issuance of the
//     same Certificate replaces the same predecessor, and Undelivered says so.
//   - Each replica appends to its own ConfigMaps (no write conflicts between
//     replicas); any replica prunes entries RetainAfterExpiry past notAfter.
//   - Rebuild: when the record's head (ConfigMap certhub-issued) does not
//     exist — a first start, an upgrade, a hub restored without it — the
//     record is rebuilding for RebuildWindow: certsync and crsign record the
//     certificates they find downstream that verify against the hub issuer
//     they name (why Rebuilt) instead of re-issuing them.
//   - Entries carry no private key. An ACME certificate's DER is kept (RFC
//     8555 revokeCert needs it); a CA's certificates need only the serial.
package issued
