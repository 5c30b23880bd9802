// Package engaged remembers the downstream clusters a multicluster
// runnable has been told of (mcmanager calls Engage with a context that
// ends when the cluster is disengaged), for runnables that work on every
// engaged cluster in passes (revocation, DR pairs) rather than through a
// per-cluster controller.
//
// Its Source is the per-cluster watch of a multicluster controller: the
// builder's For and Watches, on the engagement's context alone, so that a
// disengaged cluster leaves no goroutine behind (source.go says why).
//
// Contract: a cluster engaged again under the same name replaces the old
// one, and the end of the old engagement does not forget the new. A
// Source's watch in a cluster starts when the cluster is engaged (or when
// the controller starts, for clusters engaged before) and stops when the
// engagement ends.
package engaged
