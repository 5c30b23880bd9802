// Package engaged remembers the downstream clusters a multicluster
// runnable has been told of (mcmanager calls Engage with a context that
// ends when the cluster is disengaged), for runnables that work on every
// engaged cluster in passes (revocation, DR pairs) rather than through a
// per-cluster controller.
//
// Contract: a cluster engaged again under the same name replaces the old
// one, and the end of the old engagement does not forget the new.
package engaged
