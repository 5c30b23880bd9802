package v1alpha1

import "sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"

// Every certhub.io/* key certhub reads or writes, by where it is set and by
// whom. Keys users set are input: they may narrow what certhub does, never
// widen what one tenant gets from another (docs/security.md).
const (
	// KeyPrefix starts every key below; downstream users may not set keys
	// with it (secretTemplate refuses them).
	KeyPrefix = GroupName + "/"
)

// On the Argo CD cluster Secrets in the hub (set by the platform team, in Git).
const (
	// IssuanceWeightLabel sets the cluster's share of every shared budget
	// (--issuance-rate, each ACME issuer's rate limits) relative to other
	// clusters: a positive number, 1 when absent or invalid.
	IssuanceWeightLabel = KeyPrefix + "issuance-weight"
	// WaveLabel orders the clusters into CA rotation waves (numeric).
	WaveLabel = KeyPrefix + "wave"
	// ModeLabel is what the hub does in the cluster (internal/writegate):
	// ModeIssue (the default, also when absent), ModeObserve (decide and
	// report, write nothing), ModeOff (leave the cluster alone, keep it in
	// the inventory), ModeForceIssue (issue although cert-manager looks
	// active there) or ModeExternal (cert-manager runs the cluster's
	// Certificates; the hub only signs its CertificateRequests of group
	// certhub.io, internal/crsign). A label, so waves move by `kubectl label` or a Git
	// change and clusters are listed by mode (-l certhub.io/mode=observe).
	// Any other value is read as ModeObserve: a typo never writes.
	ModeLabel = KeyPrefix + "mode"
	// StandbyForLabel makes the cluster a DR standby of the named primary
	// cluster (internal/drpair): every Certificate of the primary — or
	// those StandbySelectorAnnotation selects — is also issued here
	// before any failover.
	StandbyForLabel = KeyPrefix + "standby-for"
	// StandbySelectorAnnotation on a standby's Secret is a label selector
	// (kubectl syntax) over the primary's Certificates' labels: only
	// those it selects are mirrored. Unset: all. One that does not parse
	// selects none (reported), so a typo narrows, never widens.
	StandbySelectorAnnotation = KeyPrefix + "standby-selector"
)

// ModeLabel's values.
const (
	ModeIssue      = "issue"
	ModeObserve    = "observe"
	ModeOff        = "off"
	ModeForceIssue = "force-issue"
	ModeExternal   = "external"
)

// On ClusterIssuers in the hub (set by the platform team).
const (
	// NextCAAnnotation on a CA ClusterIssuer names the Secret (hub
	// namespace) holding the next CA key pair; setting it starts a rotation.
	NextCAAnnotation = KeyPrefix + "next-ca-secret"
	// RotationResumeAnnotation: a new value resumes a halted rotation.
	RotationResumeAnnotation = KeyPrefix + "rotation-resume"
	// RotationForceAnnotation: a new value retires the old CA although
	// clusters that were unreachable have not moved yet, or ends an abort
	// although certificates on the new CA could not all be seen.
	RotationForceAnnotation = KeyPrefix + "rotation-force"
	// TrustBundleAnnotation set to "false" leaves the issuer's CA out of
	// every trust bundle.
	TrustBundleAnnotation = KeyPrefix + "trust-bundle"
	// TrustClustersAnnotation is a label selector (kubectl syntax, e.g.
	// "env=prod" or "env in (dev,staging)") over the labels of the
	// clusters' Argo CD Secrets: the CA is published only to the clusters
	// it selects. Unset: every cluster. A selector that does not parse
	// publishes it nowhere (logged), so a typo narrows, never widens.
	TrustClustersAnnotation = KeyPrefix + "trust-clusters"
	// TrustNamespacesAnnotation is a comma-separated list of namespace name
	// globs ("team-*,payments"): within a selected cluster, the CA is
	// published only to those namespaces (among those the bundle's
	// namespace selector picks). Unset: every such namespace.
	TrustNamespacesAnnotation = KeyPrefix + "trust-namespaces"
	// ACMELimitsAnnotation on an ACME ClusterIssuer sets its rate-limit
	// budget, e.g. "orders=300/3h, domain=50/168h, set=5/168h,
	// authz-failures=5/1h", or "none" (docs/acme.md).
	ACMELimitsAnnotation = KeyPrefix + "acme-limits"
	// ShareIdenticalRequestsAnnotation "true" on an ACME ClusterIssuer lets
	// Certificates (in any cluster or namespace) with identical requests
	// share one order and key (docs/acme.md). Off by default.
	ShareIdenticalRequestsAnnotation = KeyPrefix + "share-identical-requests"
)

// On downstream Secrets.
const (
	// ManagedByLabel marks Secrets written by certhub (value
	// ManagedByValue); the downstream Secret cache selects on it.
	ManagedByLabel = KeyPrefix + "managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "certhub"
	// WrittenByAnnotation names the hub replica that last wrote the Secret.
	WrittenByAnnotation = KeyPrefix + "written-by"
	// AdoptSecretAnnotation on an existing Secret certhub did not create,
	// set to a Certificate's name, lets that Certificate take the Secret
	// over. It is granted on the Secret, by someone allowed to write it —
	// never self-served from the Certificate. Without it such a Secret is
	// never overwritten, and typed Secrets (service-account tokens, registry
	// credentials, ...) never are.
	AdoptSecretAnnotation = KeyPrefix + "adopt-secret"
	// IssuancesAnnotation counts the issuances of the Certificate's current
	// generation for the loop guard ("generation=G,count=N,since=RFC3339,
	// trips=T"), written with each issuance.
	IssuancesAnnotation = KeyPrefix + "issuances"
)

// On downstream Certificates.
const (
	// StandbyMirrorLabel ("true") marks the Certificates certhub created in
	// a standby cluster from its primary's; only those are ever updated or
	// deleted there. StandbyOfAnnotation names the primary.
	StandbyMirrorLabel  = KeyPrefix + "standby-mirror"
	StandbyOfAnnotation = KeyPrefix + "standby-of"
)

// On downstream ConfigMaps.
const (
	// TrustBundleLabel marks the trust bundle ConfigMaps certhub writes
	// (value "true"); only those are ever changed or deleted.
	TrustBundleLabel = KeyPrefix + "trust-bundle"
)

// On certhub's own objects in the hub namespace.
const (
	// LeaseKindLabel on a Lease is "peer" or "fence"; the informer selects on it.
	LeaseKindLabel = KeyPrefix + "lease"
	// ReplicaWeightAnnotation on a peer Lease carries the replica's weight.
	ReplicaWeightAnnotation = KeyPrefix + "weight"
	// FenceKeyAnnotation on a fence Lease names the cluster (or bucket) it guards.
	FenceKeyAnnotation = KeyPrefix + "fence-key"
	// ShardBucketsAnnotation on a bucket fence Lease is the bucket count
	// (--shard-buckets), so readers can map a cluster to its bucket; on a
	// peer Lease it is the replica's fence layout ("0": a fence per cluster).
	ShardBucketsAnnotation = KeyPrefix + "shard-buckets"
	// BudgetLabel marks the ACME budget ledger ConfigMaps (value "ledger").
	BudgetLabel = KeyPrefix + "budget"
	// RotationStateLabel marks the CA rotation state ConfigMaps.
	RotationStateLabel = KeyPrefix + "rotation"
	// MigrationReportLabel marks the per-cluster migration reports
	// (ConfigMaps certhub-migration-<cluster>: mode, conflict, the plan
	// of an observed cluster), value "true".
	MigrationReportLabel = KeyPrefix + "migration-report"
	// DiscoveryReportLabel marks the per-cluster discovery reports
	// (ConfigMaps certhub-discovered-<cluster>: every TLS certificate
	// found in the cluster, whoever wrote it), value "true".
	DiscoveryReportLabel = KeyPrefix + "discovery-report"
	// StandbySourceLabel and StandbyStatusLabel mark the DR pairs'
	// ConfigMaps (value "true"): certhub-standby-source-<primary> (the
	// primary's Certificates) and certhub-standby-<standby> (its readiness).
	StandbySourceLabel = KeyPrefix + "standby-source"
	StandbyStatusLabel = KeyPrefix + "standby-status"
	// CRLLabel marks the CRL ConfigMaps the hub keeps per CA ClusterIssuer
	// (certhub-crl-<issuer>, value "true"); CRLIssuerAnnotation names the issuer.
	CRLLabel            = KeyPrefix + "crl"
	CRLIssuerAnnotation = KeyPrefix + "crl-issuer"
	// CRLPrefix names a CA ClusterIssuer's CRL ConfigMap in the hub
	// namespace: CRLPrefix + the issuer's name, sanitized (CRLName).
	CRLPrefix = "certhub-crl-"
	// CRLKey holds the signed CRL in it, PEM ("X509 CRL").
	CRLKey = "crl.pem"
	// RotationReportLabel marks the rotation progress report ConfigMaps
	// (value "true").
	RotationReportLabel = KeyPrefix + "rotation-report"
	// ACMEOrderLabel marks the Secrets that hold an ACMEOrder's leaf key;
	// its value is the order's name.
	ACMEOrderLabel = KeyPrefix + "acme-order"
	// TXTCleanupFinalizer on an ACMEOrder holds its deletion until the TXT
	// records it wrote are gone from the zone.
	TXTCleanupFinalizer = KeyPrefix + "txt-cleanup"
	// ResumeOrderAnnotation is left on the key Secret of an ACMEOrder
	// deleted while its order ran at the CA (the Secret is kept, no longer
	// owned by the order): the CA order's URL. The issuance's next
	// ACMEOrder (same name) continues that CA order with the same key
	// instead of ordering again: one CA order per issuance.
	ResumeOrderAnnotation = KeyPrefix + "resume-order"
	// ResumeUntilAnnotation (RFC 3339) is when such a Secret is of no use
	// any more and is deleted.
	ResumeUntilAnnotation = KeyPrefix + "resume-until"
)

// CRLName is the ConfigMap in the hub namespace that holds issuer's CRL.
func CRLName(issuer string) string { return CRLPrefix + sanitize.DNS1123(issuer) }
