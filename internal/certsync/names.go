package certsync

import (
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/certhub/certhub/internal/apis/reasons"
)

// The names certhub writes under (its reasons are internal/apis/reasons).
const (
	// FieldManager is the server-side apply field manager for everything certhub writes.
	FieldManager = "certhub"
)

// ConditionPolicyViolation is a Certificate condition, True while its issued
// certificate is one the issuance policies no longer allow (Ready stays as
// it is: nothing is revoked; the next renewal is denied).
const ConditionPolicyViolation = cmapi.CertificateConditionType(reasons.PolicyViolationCondition)
