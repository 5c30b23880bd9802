// Package budget admits issuances at a rate set for the whole hub: each
// replica admits its share (the fraction of the clusters it owns) of
// --issuance-rate, so replicas together stay within it without talking to
// each other, and a replica's share follows ownership as clusters move.
//
// Waiting work is ordered by urgency: a caller asks with its due time (when
// it must be issued at the latest), and a token goes to the most urgent
// waiter, so 10,000 renewals due in the same hour are served nearest expiry
// first. A caller whose due time has passed is admitted at once (the budget
// goes negative and recovers): no certificate waits beyond the fraction of
// its life the caller states.
//
// Contract: Admit never blocks; it returns how long to wait before asking
// again (at most MaxWait, so a waiter is never forgotten for long), or 0 when
// admitted. Waiters that stop asking for StaleAfter are forgotten. Safe for
// concurrent use. The zero rate admits everything.
package budget
