package writegate

import (
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Mode is what the hub does in a cluster (hubapi.ModeLabel).
type Mode string

// The modes.
const (
	// Issue: the hub issues and writes, once cert-manager is seen inactive.
	Issue Mode = hubapi.ModeIssue
	// Observe: the hub decides everything and writes nothing; it reports
	// what it would do (the plan).
	Observe Mode = hubapi.ModeObserve
	// Off: the hub leaves the cluster alone (it stays in the inventory).
	Off Mode = hubapi.ModeOff
	// ForceIssue: Issue, even while cert-manager looks active.
	ForceIssue Mode = hubapi.ModeForceIssue
	// External: cert-manager runs the cluster's Certificates and keeps
	// their keys; the hub only signs the CertificateRequests that name
	// its issuers (issuerRef.group certhub.io), cert-manager running or not.
	External Mode = hubapi.ModeExternal
)

// ModeOf reads a cluster's mode from its Secret's labels. valid is false
// for a value that is none of the modes, which reads as Observe: a typo
// never writes.
func ModeOf(labels map[string]string) (m Mode, valid bool) {
	v, ok := labels[hubapi.ModeLabel]
	if !ok || v == "" {
		return Issue, true
	}
	switch m := Mode(v); m {
	case Issue, Observe, Off, ForceIssue, External:
		return m, true
	default:
		return Observe, false
	}
}

// Writes reports whether the mode lets the hub write Certificates'
// Secrets and status (not External: there it only signs requests).
func (m Mode) Writes() bool { return m == Issue || m == ForceIssue }

// Signs reports whether the mode lets the hub sign CertificateRequests.
func (m Mode) Signs() bool { return m.Writes() || m == External }
