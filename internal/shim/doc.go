// Package shim maintains, in every engaged downstream cluster, the
// Certificates cert-manager's certificate-shim would maintain for annotated
// Ingresses and Gateways: it runs cert-manager's own translation and sync
// (pkg/controller/certificate-shim SyncFnFor) against the downstream API, so
// names, specs, owner references, updates and deletions are cert-manager's.
// The Certificates then flow through certsync like any other.
//
// Flow of one reconcile (cluster, namespace/name of an Ingress or Gateway):
//
//	object ──▶ this replica owns the cluster? (Fence; else skip)
//	       ──▶ annotated (cert-manager.io/cluster-issuer, issuer, or an
//	           auto annotation such as kubernetes.io/tls-acme on Ingresses)?
//	             │ yes                               │ no
//	             ▼                                   ▼
//	   cert-manager's SyncFn: create, update,   delete the Certificates this
//	   delete Certificates it controls;         object controls (the annotation
//	   Events on the object                     went; cert-manager leaves them)
//
// Contract:
//   - SetupWithManager registers an Ingress controller (Options.Ingress) and
//     a Gateway controller (Options.Gateway) that engages only clusters
//     serving gateway.networking.k8s.io/v1 Gateways when they are engaged:
//     a cluster without the Gateway API CRDs is not an error.
//   - certhub deletes only Certificates an Ingress or Gateway controls (its
//     controller owner reference), cert-manager's rule; Secrets are left as
//     cert-manager leaves them.
//   - Writes happen only while this replica owns the cluster, each within
//     the owner's deadline (fence.WriteContext).
//   - Reads come from the cluster's cache: Certificates are listed from the
//     same unstructured informer certsync uses (no second copy), and an
//     undecodable Certificate is skipped, not fatal.
package shim
