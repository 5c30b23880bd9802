// Package certspec decides whether a downstream Certificate, as an API
// server stores it, is one the hub can issue: it decodes the object
// (Decode: a field cert-manager's Go types cannot read, such as
// `duration: "1 day"`, is named, never a failure of a whole list) and
// validates the spec as cert-manager's webhook would (ValidateSpec;
// downstream clusters run no webhook). Both answer with an *Error whose
// Reason is the condition reason of the first invalid field.
//
// Contract:
//   - Pure functions, safe for concurrent use; nothing is read or written.
//   - Validate is the hub's one verdict on a stored object: certsync
//     refuses what it refuses, and the downstream ValidatingAdmissionPolicy
//     is held to agree with it (test/integration/admission).
package certspec
