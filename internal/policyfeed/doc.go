// Package policyfeed decides every Certificate of every engaged cluster
// again when the issuance policies change (or a CA rotation asks), and
// queues those whose outcome may have changed on the Certificate
// controller's queue: denied Certificates issue without a restart, issued
// ones the policies no longer allow are flagged.
//
//	policy.Engine ──Subscribe──▶ kick (a burst coalesces into one pass) ──▶
//	for each engaged cluster, each Certificate in its cache: evaluate (µs);
//	queue it if it is denied now, or its status carries a policy mark
//	(Ready=False/PolicyDenied, PolicyViolation) ──▶ the controller's queue
//
// A Certificate that is allowed and carries no mark is not queued: a policy
// change costs one evaluation per Certificate, and reconciles only where it
// matters (GitOps applying 100 policies at once is one pass, not 100 waves).
//
// It is engaged with each cluster by the manager (multicluster.Aware) and
// runs its loop as a Runnable; the controller hands it its queue through
// Source (certsync).
package policyfeed
