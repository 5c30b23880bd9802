// Package secretcache holds the data of the Secrets certhub manages
// downstream, by cluster and resourceVersion, for every reader of them
// (certsync's decisions, the CA rotation's and the revocation's leaves):
// the watches hold only metadata (Meta), and a Secret's data is read once
// per version it did not write.
//
// Contract:
//   - Nothing is read, nor kept, in a cluster whose mode keeps keys
//     downstream (SetReadable: external, off): Get returns
//     ErrKeysStayDownstream without a request.
//   - A Secret certhub did not write (no managed-by label) is read live
//     each time and never kept.
//   - Drop forgets a cluster (its mode changed, its engagement ended).
package secretcache
