// Package inventory turns Argo CD cluster Secrets in the hub into engaged
// downstream clusters.
//
// It is a multicluster-runtime Provider. A controller on the hub's local
// manager watches Secrets labelled argocd.argoproj.io/secret-type=cluster in
// one namespace; each Secret is parsed (ParseSecret) into a cluster name and a
// rest.Config, a controller-runtime cluster is built for it, and the cluster is
// handed to the multicluster manager's Engage.
//
// Contract:
//   - The per-cluster context passed to Engage derives from the context given
//     to Start, never from a reconcile context, and is cancelled when the
//     Secret is deleted, when its connection data changes (the cluster is then
//     re-engaged with the new data), or when the provider stops.
//   - A Secret whose connection data (server + config) is unchanged is a no-op.
//   - A Secret that cannot be parsed never disengages a cluster already running
//     from an earlier, valid version of it: the error is reported as a Warning
//     Event on the Secret and a log line carrying `cluster`, and the next valid
//     version heals it.
//   - Deleting a Secret never deletes anything downstream.
//   - With a Connector (internal/shard's Coordinator), every valid registration
//     is registered with it, but only the clusters it wants are connected,
//     cached and watched; when its answer changes the Secret is reconciled
//     again, and a cluster no longer wanted is disconnected (cache and
//     connections closed). An unreachable wanted cluster keeps its
//     registration and is retried with back-off (MaxReconnectDelay). The
//     gate hears RegistrationsSynced once every cluster Secret (or file)
//     present at the start has been handled once (initial.go), so it
//     decides on the whole fleet, not on the part registered so far.
//   - A registration with `namespaces` is watched (and so written) only in
//     those namespaces; the cluster options the caller passes (certsync's
//     label-selected Secret cache) apply to every cluster.
//   - Each connected cluster is lean: Events are written by the hub's own
//     recorder (events.go: one per occurrence, isomorphic ones within six
//     minutes folded into a series as client-go does, each cluster draining
//     its own bounded queue so a hanging cluster delays only its own
//     Events), the kinds the hub maps that are the same in every cluster
//     come from a fixed table (mapper.go), caches drop managedFields, and
//     each informer serves all the controllers' handlers from one client-go
//     registration (fanout.go: one event ring and two goroutines per
//     informer, not per handler; a handler added late is given the objects
//     held first, so it may see one twice, never miss one).
//   - The Secret format and its conversion to a rest.Config follow Argo CD's
//     (util/db SecretToCluster, (*Cluster).RawRestConfig): bearer token,
//     basic auth, client certificates, exec plugins, AWS via argocd-k8s-auth,
//     proxies, the in-cluster server.
package inventory
