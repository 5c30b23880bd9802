// Package issuers signs certificates with the issuers that live in the hub.
//
// A downstream Certificate names its issuer through spec.issuerRef. The hub
// resolves that reference against objects in the hub cluster (ClusterIssuer)
// so CA keys never leave the hub; downstream clusters only ever receive the
// leaf key, the signed chain and the CA certificate.
//
// Contract:
//   - New(Options) returns a Resolver. Resolve turns an issuerRef into an
//     Issuer or a typed *Error whose Reason says why it could not
//     (IssuerNotFound, IssuerNotReady, IssuerNotSupported).
//   - Issuer.Sign is safe for concurrent use and never writes to any API
//     server: callers decide where the result goes.
//   - Supported kinds: ClusterIssuer (in the hub) and Issuer (in the
//     downstream Certificate's namespace, for parity), each with spec.selfSigned
//     or spec.ca. A ClusterIssuer's CA key pair is read from a kubernetes.io/tls
//     Secret in the hub's cluster-resource namespace (Options.Namespace); an
//     Issuer's from its own namespace downstream, as cert-manager does.
//   - ACME ClusterIssuers are served by Options.ACME (internal/acme) as an
//     Orderer: Order never waits; it returns *Pending while the order runs,
//     an *Error with RetryAfter when it failed, and the chain with the key
//     it generated and kept in the hub when issued.
//
// All x509 work is done by cert-manager's pkg/util/pki.
package issuers
