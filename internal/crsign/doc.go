// Package crsign makes the hub a cert-manager external issuer for the
// whole fleet: in every engaged cluster it signs the CertificateRequests
// whose issuerRef.group is certhub.io, with the hub ClusterIssuer their
// name names. Clusters that keep cert-manager keep their keys: cert-manager
// (or istio-csr, csi-driver, any client of its API) generates the key and
// sends a CSR; the hub never generates, receives or stores a private key
// for these requests (it reads no Secret downstream).
//
// Contract, as cert-manager's own issuers keep it (its
// pkg/controller/certificaterequests and their Reporter, reused here):
//   - a Denied request is marked Ready=False/Denied with a failureTime and
//     never signed; an unapproved one waits (an Event says so);
//   - a request already Issued or Failed, or with a certificate, is left;
//   - the CSR is verified (signature, key type and size), the IssuancePolicy
//     decides on the certificate exactly as it will be signed (the same
//     engine as Certificates: cluster, namespace, issuer, every name and
//     attribute), and the issuance budget admits it;
//   - the certificate is a function of the request (tbs.go): its serial an
//     HMAC under a key derived from the CA's, its validity from the
//     request's creation and approval; a replica that finishes a request
//     after the signer died signs the same certificate, never a second;
//   - signed: status.certificate, status.ca, Ready=True/Issued; refused:
//     Ready=False/Failed with the reason's Warning Event and failureTime
//     (terminal, as cert-manager's); an issuer missing or not ready:
//     Ready=False/Pending, retried.
//
// Bounded work: the workers take clusters in turn, one cluster in at most
// MaxConcurrentReconcilesPerCluster of them (internal/fairqueue, as for
// Certificates), so a cluster that stalls its writes holds half the
// signers, not all; only requests naming certhub.io are cached whole
// (CacheOptions), every other as its name and issuerRef.
//
// Writes go through Options.Fence (ownership, the write's deadline, and the
// cluster's mode: migrate's RequestFence). CA ClusterIssuers sign; a
// SelfSigned one cannot (it needs the key) and fails the request saying
// so. ACME ClusterIssuers order (order.go): one ACMEOrder in the hub per
// request, finalized with the request's own CSR (no key in the hub), under
// the account's ledger and shared DNS-01 like every order; the request is
// Pending while it runs and Failed when it fails, as cert-manager's ACME
// issuer reports it.
package crsign
