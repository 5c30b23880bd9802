// Package acme serves ClusterIssuers with spec.acme from the hub: one ACME
// account per ClusterIssuer, shared by every replica and every downstream
// cluster, and DNS-01 solved in the hub, so account keys and DNS
// credentials never leave it.
//
// Accounts: the account key lives in a Secret in the hub namespace
// (spec.acme.privateKeySecretRef; created when absent — the replica whose
// create wins writes it, the others read it — unless
// disableAccountKeyGeneration), the account is registered once per key
// (registering an existing key returns the same account), with
// externalAccountBinding when set, and the ClusterIssuer's status says so
// as cert-manager's does (status.acme, Ready with ACMEAccountRegistered,
// ErrRegisterACMEAccount or InvalidConfig).
//
// Orders: Service.Issuer is the resolver's hook (issuers.Options.ACME); it
// returns an issuers.Orderer. Order finds or creates the ACMEOrder of one
// issuance (certhub.io/v1alpha1, hub namespace; its name is the same on
// every replica: issuer, cluster, Certificate and UID, names, replaced
// serial) with the leaf key in a Secret of the same name, and reports
// Pending, the failure (with back-off), or the certificate and key. The
// order controller moves each order one step per reconcile:
//
//	Ordering ─▶ Presenting ─▶ Propagating ─▶ Validating ─▶ Finalizing ─▶ Valid
//	   (new order,   (TXT via the    (TXT served by     (authorizations  (CSR, fetch
//	    challenges)   solver)         the nameservers?)  polled)          the chain)
//	any step ─▶ Errored (TXT cleaned up first)
//
// Only the replica holding the order acts on it (the claim is in its status,
// renewed on every write, optimistic concurrency); another takes it over
// when the claim is HoldDuration old, and resumes the same CA order. Steps
// never wait for the CA or for DNS: they ask to be called again. Finished
// orders wake their Certificate (Subscribe) on every replica and are
// deleted, with their key, after OrderRetention.
//
// Identical requests (opt-in, ShareAnnotation) share one order: its name
// then hashes the request (names, subject, extensions, key parameters,
// replaced serial) instead of the Certificate, so every Certificate asking
// the same reaches the same order and gets its certificate and key.
//
// Renewal information (ARI, ari.go): RenewalTime is certsync's
// RenewalAdvisor; it answers from a per-replica cache refreshed in the
// background after the CA's Retry-After (at most RenewalInfoInterval) and
// wakes the Certificate when the CA's window moved. A renewal's first
// order carries "replaces" and takes no budget (Let's Encrypt exempts it);
// refused, it is ordered as new and takes its budget then.
//
// Contract: New(Options) returns the Service; its SetupWithManager(mgr)
// adds both controllers to the hub's manager; the package writes only the account key Secret (create),
// ClusterIssuer status, ACMEOrders and their key Secrets, all in the hub.
package acme
