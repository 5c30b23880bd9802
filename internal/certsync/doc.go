// Package certsync keeps cert-manager Certificates in downstream clusters
// issued: it is the per-cluster reconciler that turns a Certificate into a TLS
// Secret and a Certificate status, exactly as cert-manager would write them.
//
// Flow of one reconcile (cluster, namespace/name):
//
//	Certificate ──▶ this replica owns the cluster? (Fence; else skip)
//	            ──▶ validate spec (the webhook downstream clusters lack)
//	            ──▶ gather (Secret: metadata watch + data by version, Secrets)
//	            ──▶ Secret ownership (never overwrite a Secret certhub did not write)
//	            ──▶ policy chain: first func that says "reissue" wins
//	                  │ no                              │ yes
//	                  ▼                                 ▼
//	          repair Secret metadata/outputs     loop guard (loopguard.go): too many
//	          if they drifted; status Ready      issuances of this generation? pause
//	          requeue at renewalTime                    │ no
//	                                                    ▼
//	                                             resolve issuer (hub ClusterIssuer or
//	                                             downstream Issuer) ─▶ key ─▶ sign
//	                                             ─▶ apply Secret (SSA, field manager certhub)
//	                                             ─▶ status Ready=True, revision+1, Event
//
// Contract:
//   - SetupWithManager registers one multicluster controller; it engages every
//     cluster the manager engages, never the hub itself.
//   - Every Secret written carries ManagedLabel and WriterAnnotation
//     ("<replica>/<fence transition>"), plus cert-manager's annotations,
//     label, additional output formats and keystores (internal/outputs), so cert-manager tooling
//     and workloads read it as if cert-manager wrote it.
//   - The fence is asked before every downstream write, not only when the
//     cluster is engaged.
//   - Bad input (invalid spec, missing issuer, foreign Secret) ends as
//     Ready=False with a reason from internal/apis/reasons and a Warning Event; nothing is
//     written to the Secret.
//   - Certificates are read unstructured and decoded one by one, validated
//     and compared with what was issued by internal/certspec (as
//     cert-manager's webhook and issuing path would): issuing never makes
//     its own result look stale (FuzzIssuedCertificateStaysPut).
//   - The workers take clusters and namespaces in turn (internal/fairqueue).
//   - One generation is issued at most LoopMaxIssuances times within
//     LoopWindow unless a spec change, Secret deletion or manual trigger
//     intervenes; then Ready=False/IssuanceLoopDetected and back-off.
//   - Only the metadata of Secrets labelled ManagedLabel is watched (see
//     CacheOptions); their data is read once per version certhub did not
//     write (Secrets), never in a cluster in external or off mode.
package certsync
