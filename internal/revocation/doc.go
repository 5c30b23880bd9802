// Package revocation pulls certificates back everywhere: each
// CertificateRevocation in the hub selects downstream certificates (by
// cluster, namespace, Certificate, issuer, serial or "issued before"),
// has each renewed, and only then revokes its old serial — in the CRL the
// hub keeps for a CA ClusterIssuer, or at an ACME ClusterIssuer's CA with
// RFC 8555 revokeCert.
//
//	CertificateRevocation (hub) ──▶ every Interval, per cluster this replica owns:
//	  Certificates naming hub issuers ─▶ their Secret's leaf selected? (issued
//	  no later than the revocation was created)
//	     new ─▶ status entry Renewing ─▶ certsync: MustRenew ─▶ RevocationRequested re-issue
//	  entry whose Certificate holds another certificate now (or is gone)
//	     CA   ─▶ serial added to ConfigMap certhub-crl-<issuer>, CRL signed again
//	     ACME ─▶ revokeCert at the CA (the certificate kept in the entry until then)
//	     ─▶ entry Revoked; status row per cluster; Complete once nothing is
//	        pending and every registered cluster it selects was looked at
//	CRLs: signed with the CA's key, valid CRLValidity, signed again with half
//	      left; served over HTTP at CRLPath<issuer> (--crl-bind-address).
//
// Contract:
//   - A revocation is a hub object: what it selects is decided from the
//     hub's spec and the certificates the hub issued (Secrets carrying
//     certhub's ownership label); nothing downstream can start or widen one.
//   - Renew first: a serial is revoked only once its Certificate holds
//     another certificate (or no longer exists), so nothing served is
//     revoked before its replacement is in place.
//   - Status entries only advance (Renewing, Failed → Revoked) and are
//     merged one by one with optimistic concurrency; each replica writes
//     the rows and entries of the clusters it owns.
//   - Self-signed certificates are renewed and reported Failed: nothing
//     can revoke them.
package revocation
