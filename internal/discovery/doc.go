// Package discovery finds every TLS certificate in every engaged
// downstream cluster, whoever wrote it — certhub, cert-manager or a person
// — and says what expires where: for each, its expiry, issuer, subject and
// names, key type and size, and who manages it.
//
//	per engaged cluster:
//	  once synced: every kubernetes.io/tls Secret LISTed, 100 a page ─▶ Records
//	  metadata-only watch of type kubernetes.io/tls Secrets ─┐ new resourceVersion
//	  the cluster's Ingresses (spec.tls[].secretName) ───────┴─▶ queue ─▶ Readers
//	  Readers: GET the Secret (own limiter, ReadQPS) ─▶ parse tls.crt's leaf ─▶ Record
//	                                                    (the Secret's data is dropped)
//	Records ──▶ metrics at scrape time (certhub_discovered_*)
//	        ──▶ every ReportInterval, when changed and owned:
//	            ConfigMap certhub-discovered-<cluster> (hub namespace) ──▶ `certhub status --discovered`
//
// Contract:
//   - Memory is bounded by one resourceVersion and one small Record per
//     TLS Secret: no Secret's data or metadata is cached or kept (the
//     metadata watch feeds no informer, and the first read pages through
//     the Secrets 100 at a time). A Secret is read again only when its
//     resourceVersion changes. Discovery adds one watch per cluster (per
//     namespace of a scoped registration) and no cache or client of its own.
//   - Reads in a cluster go through their own client-side limiter
//     (Options.ReadQPS, ReadBurst) and Options.Readers workers, so
//     discovery never takes the issuing clients' requests.
//   - Managed is decided from the Secret's metadata: certhub's ownership
//     label, else cert-manager's cert-manager.io/certificate-name
//     annotation, else none. Discovery never writes downstream.
//   - Problems: WeakKey (RSA < MinRSABits), SHA1Signature, Unparseable,
//     and at report or scrape time Expired and ExpiredServed (an Ingress
//     names the Secret).
//   - The replica that owns a cluster (Options.Fence) writes its report;
//     a report holds at most Options.MaxReportEntries records, the
//     soonest to expire, and stays under 1 MiB. The expiry series are
//     capped at Options.MaxSeries over all clusters, soonest first.
//   - Namespace-scoped registrations are watched in their namespaces only.
package discovery
