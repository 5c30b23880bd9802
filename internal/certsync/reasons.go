package certsync

import (
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	"github.com/certhub/certhub/internal/certspec"
)

// Reasons used for both Certificate condition reasons and Event reasons.
// The Ready/Issuing values mirror cert-manager's so tools keyed on them work.
const (
	// ReasonReady: the Secret holds a valid certificate for the current spec.
	ReasonReady = "Ready"
	// ReasonIssuing: certhub is issuing a certificate (Event reason when issued, as cert-manager).
	ReasonIssuing = "Issuing"
	// ReasonIssued: a new certificate was written (Event).
	ReasonIssued = "Issued"
	// The spec reasons are certspec's (the validation that decides them).
	ReasonInvalidSpec          = certspec.ReasonInvalidSpec
	ReasonInvalidNames         = certspec.ReasonInvalidNames
	ReasonInvalidSubject       = certspec.ReasonInvalidSubject
	ReasonInvalidLifetime      = certspec.ReasonInvalidLifetime
	ReasonInvalidPrivateKey    = certspec.ReasonInvalidPrivateKey
	ReasonInvalidUsages        = certspec.ReasonInvalidUsages
	ReasonInvalidKeystores     = certspec.ReasonInvalidKeystores
	ReasonInvalidOutputFormats = certspec.ReasonInvalidOutputFormats
	ReasonInvalidSecretName    = certspec.ReasonInvalidSecretName
	ReasonInvalidIssuerRef     = certspec.ReasonInvalidIssuerRef
	// ReasonKeystorePasswordNotFound: the keystore password Secret or key does not exist downstream.
	ReasonKeystorePasswordNotFound = "KeystorePasswordSecretNotFound"
	// ReasonSecretNotOwned: the target Secret exists and was not written by certhub.
	ReasonSecretNotOwned = "SecretNotOwned"
	// ReasonDuplicateSecretName: another Certificate in the namespace names the
	// same secretName and owns the Secret (cert-manager's CertificateOwnsSecret
	// rule); this one is not issued. cert-manager only logs this; certhub says
	// it in the status.
	ReasonDuplicateSecretName = "DuplicateSecretName"
	// ReasonPolicyDenied: no IssuancePolicy in the hub allows the Certificate
	// (Ready=False, nothing signed), or, on the PolicyViolation condition, no
	// longer allows the certificate already issued.
	ReasonPolicyDenied = "PolicyDenied"
	// ReasonIssuanceFailed: signing or writing failed; retried with backoff.
	ReasonIssuanceFailed = "IssuanceFailed"
	// ReasonIssuanceLoop: one generation was issued more than the loop guard
	// allows without a spec change, Secret deletion or manual trigger;
	// issuance is paused with exponential back-off (loopguard.go).
	ReasonIssuanceLoop = "IssuanceLoopDetected"
	// ReasonRateLimited (Issuing=True): the issuance waits for the hub's
	// issuance budget (--issuance-rate); the most urgent go first.
	ReasonRateLimited = "RateLimited"
	// ReasonCARotation (Issuing): the cluster's wave of a CA rotation signs
	// with the new CA, and this certificate was signed by the old one.
	ReasonCARotation = "CARotation"
	// ReasonRevocation: a CertificateRevocation in the hub selects the
	// issued certificate; a new one is issued before the old is revoked.
	ReasonRevocation = "RevocationRequested"
	// ReasonPolicyChanged (Issuing): the issuance policy now signs the
	// certificate with other CA powers (path length, name constraints)
	// than the kept one carries: it is re-issued under today's policy.
	ReasonPolicyChanged = "PolicyChanged"

	// Reasons the policy chain gives for (re)issuance; they appear in the
	// Issuing condition and Events like cert-manager's trigger policies.
	ReasonManuallyTriggered    = "ManuallyTriggered"
	ReasonDoesNotExist         = "DoesNotExist"
	ReasonMissingData          = "MissingData"
	ReasonInvalidCertificate   = "InvalidCertificate"
	ReasonInvalidKey           = "InvalidKey"
	ReasonKeyMismatch          = "KeyMismatch"
	ReasonIncorrectIssuer      = "IncorrectIssuer"
	ReasonIncorrectCertificate = "IncorrectCertificate"
	ReasonSecretMismatch       = "SecretMismatch"
	ReasonRenewing             = "Renewing"
	ReasonExpired              = "Expired"
)

// Labels and annotations certhub puts on the Secrets it writes.
const (
	// FieldManager is the server-side apply field manager for everything certhub writes.
	FieldManager = "certhub"
)

// ConditionPolicyViolation is a Certificate condition, True while its issued
// certificate is one the issuance policies no longer allow (Ready stays as
// it is: nothing is revoked; the next renewal is denied).
const ConditionPolicyViolation cmapi.CertificateConditionType = "PolicyViolation"
