// Package reasons holds the reasons certhub writes on cert-manager
// Certificates: their Ready and Issuing conditions and the Events beside
// them. The Ready and Issuing values mirror cert-manager's, so tools keyed
// on them work. A leaf package: every component that reads or writes a
// Certificate's condition names them from here.
package reasons

// The spec's reasons, by the field that is invalid (internal/certspec
// decides them).
const (
	// InvalidSpec: the Certificate spec cannot be turned into a certificate.
	// The Invalid* reasons below narrow it down by field; the message lists every field error.
	InvalidSpec = "InvalidSpec"
	// InvalidNames: commonName, dnsNames, ipAddresses, uris, emailAddresses or otherNames (or none at all).
	InvalidNames = "InvalidNames"
	// InvalidSubject: subject / literalSubject.
	InvalidSubject = "InvalidSubject"
	// InvalidLifetime: duration, renewBefore, renewBeforePercentage, renewal.
	InvalidLifetime = "InvalidLifetime"
	// InvalidPrivateKey: privateKey algorithm, size, encoding or rotationPolicy.
	InvalidPrivateKey = "InvalidPrivateKey"
	// InvalidUsages: an unknown key usage.
	InvalidUsages = "InvalidUsages"
	// InvalidKeystores: keystores without (or with two) passwords, or an unknown profile.
	InvalidKeystores = "InvalidKeystores"
	// InvalidOutputFormats: an unknown additionalOutputFormats type.
	InvalidOutputFormats = "InvalidOutputFormats"
	// InvalidSecretName: secretName, or secretTemplate trying to set cert-manager.io annotations.
	InvalidSecretName = "InvalidSecretName"
	// InvalidIssuerRef: issuerRef without a name.
	InvalidIssuerRef = "InvalidIssuerRef"
)

// The issuance's reasons.
const (
	// Ready: the Secret holds a valid certificate for the current spec.
	Ready = "Ready"
	// Issuing: certhub is issuing a certificate (Event reason when issued, as cert-manager).
	Issuing = "Issuing"
	// Issued: a new certificate was written (Event).
	Issued = "Issued"
	// KeystorePasswordNotFound: the keystore password Secret or key does not exist downstream.
	KeystorePasswordNotFound = "KeystorePasswordSecretNotFound"
	// SecretNotOwned: the target Secret exists and was not written by certhub.
	SecretNotOwned = "SecretNotOwned"
	// DuplicateSecretName: another Certificate in the namespace names the
	// same secretName and owns the Secret (cert-manager's CertificateOwnsSecret
	// rule); this one is not issued. cert-manager only logs this; certhub says
	// it in the status.
	DuplicateSecretName = "DuplicateSecretName"
	// PolicyDenied: no IssuancePolicy in the hub allows the Certificate
	// (Ready=False, nothing signed), or, on the PolicyViolation condition, no
	// longer allows the certificate already issued.
	PolicyDenied = "PolicyDenied"
	// NotRecorded: the Secret's certificate is not the one the hub's record
	// holds for this Certificate (internal/issued): a pasted tls.crt, another
	// Certificate's, one the hub never issued. Re-issued.
	NotRecorded = "CertificateNotRecorded"
	// IssuanceFailed: signing or writing failed; retried with backoff.
	IssuanceFailed = "IssuanceFailed"
	// IssuanceLoop: one generation was issued more than the loop guard
	// allows without a spec change, Secret deletion or manual trigger;
	// issuance is paused with exponential back-off (loopguard.go).
	IssuanceLoop = "IssuanceLoopDetected"
	// RateLimited (Issuing=True): the issuance waits for the hub's
	// issuance budget (--issuance-rate); the most urgent go first.
	RateLimited = "RateLimited"
	// CARotation (Issuing): the cluster's wave of a CA rotation signs
	// with the new CA, and this certificate was signed by the old one.
	CARotation = "CARotation"
	// Revocation: a CertificateRevocation in the hub selects the
	// issued certificate; a new one is issued before the old is revoked.
	Revocation = "RevocationRequested"
	// PolicyChanged (Issuing): the issuance policy now signs the
	// certificate with other CA powers (path length, name constraints)
	// than the kept one carries: it is re-issued under today's policy.
	PolicyChanged = "PolicyChanged"

	// Reasons the policy chain gives for (re)issuance; they appear in the
	// Issuing condition and Events like cert-manager's trigger policies.
	ManuallyTriggered    = "ManuallyTriggered"
	DoesNotExist         = "DoesNotExist"
	MissingData          = "MissingData"
	InvalidCertificate   = "InvalidCertificate"
	InvalidKey           = "InvalidKey"
	KeyMismatch          = "KeyMismatch"
	IncorrectIssuer      = "IncorrectIssuer"
	IncorrectCertificate = "IncorrectCertificate"
	SecretMismatch       = "SecretMismatch"
	Renewing             = "Renewing"
	Expired              = "Expired"
)

// PolicyViolationCondition is the Certificate condition certhub sets True
// (reason PolicyDenied) while its issued certificate is one the issuance
// policies no longer allow: Ready stays as it is, nothing is revoked, the
// next renewal is denied.
const PolicyViolationCondition = "PolicyViolation"
