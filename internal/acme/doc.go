// Package acme serves ClusterIssuers with spec.acme from the hub: one ACME
// account per ClusterIssuer, shared by every replica and every downstream
// cluster.
//
// This first part keeps the account (issue 16): the account key lives in a
// Secret in the hub namespace (spec.acme.privateKeySecretRef; created when
// absent — the replica whose create wins writes it, the others read it —
// unless disableAccountKeyGeneration), the account is registered once per
// key (registering an existing key returns the same account, so replicas
// racing register the same one), with externalAccountBinding when set, and
// the ClusterIssuer's status says so as cert-manager's does: status.acme.uri,
// lastRegisteredEmail, lastPrivateKeyHash and a Ready condition with
// cert-manager's reasons (ACMEAccountRegistered, ErrRegisterACMEAccount,
// InvalidConfig), so `kubectl get clusterissuer` shows READY. Nothing about
// the account or its key is ever written downstream.
//
// Contract: SetupWithManager(mgr, Options) adds the account reconciler to the
// hub's manager; it writes only the key Secret (create) and ClusterIssuer
// status. Orders, solvers and the budget come next; until then the resolver
// answers IssuerNotSupported for ACME ClusterIssuers.
package acme
