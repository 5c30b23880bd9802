// Package certsync keeps cert-manager Certificates in downstream clusters
// issued: it is the per-cluster reconciler that turns a Certificate into a TLS
// Secret and a Certificate status, exactly as cert-manager would write them.
//
// Flow of one reconcile (cluster, namespace/name):
//
//	Certificate ──▶ gather (Secret from the label-selected cache, live read on a miss)
//	            ──▶ ownership check (never overwrite a Secret certhub does not own)
//	            ──▶ policy Chain: first Func that says "reissue" wins
//	                  │ no                         │ yes
//	                  ▼                            ▼
//	          status Ready=True            resolve issuer in the hub ─▶ key ─▶ sign
//	          requeue at renewalTime        ─▶ apply Secret (SSA, field manager certhub)
//	                                        ─▶ status Ready=True, revision+1, Event
//
// Contract:
//   - SetupWithManager registers one multicluster controller; it engages every
//     cluster the manager engages, never the hub itself.
//   - Every Secret written carries ManagedLabel and WriterAnnotation, plus
//     cert-manager's annotations and label, so cert-manager tooling reads it.
//   - Bad input (invalid spec, missing issuer, foreign Secret) ends as
//     Ready=False with a reason from reasons.go and a Warning Event; nothing is
//     written to the Secret.
//   - Only Secrets labelled ManagedLabel are cached (see CacheOptions).
package certsync
