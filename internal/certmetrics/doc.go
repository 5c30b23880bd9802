// Package certmetrics holds the certhub_certificate_* metrics of the
// Certificates certsync writes, budgeted for fleets.
//
// Per Certificate, for the Certificates Options.Mode selects (All, the
// default Problems: not Ready, past their renewal time or expiring within
// ProblemWindow; None): expiration, renewal, ready (one series: the
// current condition), info (the issuer labels), and at All not_before and
// not_after. Per cluster, always: certificates by readiness, the soonest
// expiry, violations (while any), issuances by result, loop guard trips
// and budget waits. The issuance histogram has no cluster label.
//
// Contract: New(Options) registers them. The per-Certificate series are
// made at scrape time from one record per Certificate (Observe, Forget);
// ForgetCluster deletes every series labelled with a cluster that left the
// replica.
package certmetrics
