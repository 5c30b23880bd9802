// Package budget admits issuances at a rate set for the whole hub: each
// replica admits its share (the fraction of the clusters it owns) of
// --issuance-rate, so replicas together stay within it without talking to
// each other, and a replica's share follows ownership as clusters move.
//
// Waiting work is queued fairly, in the manner of Kubernetes' API Priority
// and Fairness: clusters share each budget by weight (WeightLabel on their
// Secret, 1 by default), a cluster's namespaces share its part equally, and
// within a namespace the nearest due goes first (a caller asks with its due
// time, when it must be issued at the latest), so 10,000 renewals due in
// the same hour are served nearest expiry first and one namespace's backlog
// takes its share, not the budget. What a tenant leaves idle goes to the
// others. Nobody jumps the queue: an overdue caller is first of its own
// namespace, not of the hub.
//
// The Ledger keeps a hub-wide set of token buckets (an ACME account's rate
// limits) in one ConfigMap, queued the same way; its size is bounded
// whatever the number of names and tenants.
//
// Bounded work: a Budget remembers at most MaxTenantWaiters waiters per
// tenant (the nearest due; the others are told to ask again after MaxWait),
// and an Admit costs O(log n) in the waiters remembered: a binary search in
// its tenant's queue and a walk, in start order, over only the tenants
// that go before it, stopped once it could not be admitted within MaxWait.
// One namespace with 30,000 Certificates costs its neighbours nothing
// (`go test -bench Admit ./internal/budget`).
//
// Contract: Admit never blocks; it returns how long to wait before asking
// again (at most MaxWait, so a waiter is never forgotten for long), or 0 when
// admitted. Waiters that stop asking for StaleAfter are forgotten. Safe for
// concurrent use. The zero rate admits everything.
package budget
