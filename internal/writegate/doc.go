// Package writegate decides, per downstream cluster, whether the hub may write
// there: the cluster's mode (certhub.io/mode on its Argo CD Secret) and
// whether cert-manager's own controller is still active there. It is how a
// fleet that runs cert-manager moves onto the hub in waves, and back.
//
//	cluster Secret label certhub.io/mode ──▶ Mode: issue | observe | off | force-issue
//	every Interval, per cluster this replica owns (not off):
//	  Lease kube-system/cert-manager-controller held and fresh? ──▶ conflict (cluster)
//	  a Certificate written by a field manager named cert-manager-*
//	  since the last look (managedFields)?                       ──▶ held (its namespace)
//	Writes(cluster) = owned ∧ (force-issue ∨ (issue ∧ looked ∧ ¬conflict))
//	HoldsStatus(cluster, ns) = held[ns] (¬force-issue): certsync writes
//	  that namespace's Secrets, not its Certificates' status
//	certsync, in a cluster it may not write: decides everything, writes
//	nothing, and records a Verdict per Certificate (the plan)
//	report ConfigMap certhub-migration-<cluster> (hub namespace): mode,
//	conflict, plan ──▶ `certhub migrate plan`, `certhub status`
//
// Contract:
//   - Gate is a fence.Fence: every writer that holds it (trust, shim) stops
//     writing in a cluster the moment its mode or a conflict says so;
//     certsync holds the plain fence for ownership and asks Writes.
//   - A cluster is not written before one look found cert-manager inactive
//     (or the mode is force-issue); a look that fails keeps the previous
//     answer, and a cluster never looked at stays closed.
//   - Only what tenants cannot write stops a cluster: cert-manager's Lease.
//     A field-manager name anyone can use holds back status writes in its
//     own namespace only, until a look finds no new such write.
//   - A signal the registration may not read (a namespace-scoped one cannot
//     read kube-system's Lease) is skipped, logged once per cluster, never
//     taken as a conflict: such clusters have only the namespace signal.
//   - A conflict is reported as the ClusterConflict Warning Event on the
//     cluster's Argo CD Secret (once per conflict), the metric
//     certhub_cluster_conflict and the cluster's report.
//   - Subscribers are told, without blocking, when a cluster's Writes or
//     Mode changes (certsync then decides its Certificates again).
//   - Reports are written only by the replica that owns the cluster, and
//     only when their content changes; a plan holds at most MaxPlanRows
//     rows (counts are always complete).
package writegate
