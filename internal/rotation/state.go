package rotation

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Annotations and labels users set.
const (
	// StatePrefix names the state ConfigMap: StatePrefix + issuer.
	StatePrefix = "certhub-rotation-"
	// ReasonHalted and ReasonProgress are the Event reasons on the ClusterIssuer.
	ReasonHalted   = "RotationHalted"
	ReasonProgress = "RotationProgress"
)

// Phase of a rotation.
type Phase string

// The phases, in order (Halted interrupts Rolling).
const (
	Publishing Phase = "Publishing"
	Soaking    Phase = "Soaking"
	Rolling    Phase = "Rolling"
	Halted     Phase = "Halted"
	Pausing    Phase = "Pausing"
	Grace      Phase = "Grace"
	Complete   Phase = "Complete"
	// Aborting: the next CA was withdrawn after it signed; bundles keep
	// both CAs and every cluster signs with the current one again until no
	// certificate is on the next CA, then the rotation's state goes.
	Aborting Phase = "Aborting"
)

// State is one rotation, as its ConfigMap holds it.
type State struct {
	Issuer, Next string
	Phase        Phase
	// Wave is the wave being rolled (index into the ordered waves); Waves their number.
	Wave, Waves int
	Since       time.Time
	Reason      string
	// Resume and Force are the ResumeAnnotation and ForceAnnotation
	// values last honoured.
	Resume, Force string
	// From is the phase a Halted rotation resumes (Publishing or Rolling).
	From Phase
	// Moved of Total Certificates of the issuer are signed by the new CA
	// and Ready; Stuck cannot move for reasons of their own (listed in
	// Reason) and hold no wave.
	Moved, Total, Stuck int
}

// signsWithNext reports whether a cluster in wave w signs with the new CA.
func (s *State) signsWithNext(w int) bool {
	switch s.Phase {
	case Halted:
		return s.From != Publishing && w <= s.Wave // halted while publishing: nothing signs with it yet
	case Rolling, Pausing:
		return w <= s.Wave
	case Grace, Complete:
		return true
	}
	return false
}

// Data is the state as its ConfigMap holds it.
func (s *State) Data() map[string]string {
	return map[string]string{"issuer": s.Issuer, "next": s.Next, "phase": string(s.Phase), "wave": strconv.Itoa(s.Wave),
		"waves": strconv.Itoa(s.Waves), "since": s.Since.UTC().Format(time.RFC3339Nano), "reason": s.Reason, "resume": s.Resume,
		"moved": strconv.Itoa(s.Moved), "total": strconv.Itoa(s.Total), "stuck": strconv.Itoa(s.Stuck), "force": s.Force, "from": string(s.From)}
}

// StateFrom reads a state ConfigMap.
func StateFrom(cm *corev1.ConfigMap) *State {
	d := cm.Data
	s := &State{Issuer: d["issuer"], Next: d["next"], Phase: Phase(d["phase"]), Reason: d["reason"], Resume: d["resume"], Force: d["force"], From: Phase(d["from"])}
	s.Stuck, _ = strconv.Atoi(d["stuck"])
	s.Wave, _ = strconv.Atoi(d["wave"])
	s.Waves, _ = strconv.Atoi(d["waves"])
	s.Moved, _ = strconv.Atoi(d["moved"])
	s.Total, _ = strconv.Atoi(d["total"])
	s.Since, _ = time.Parse(time.RFC3339Nano, d["since"])
	return s
}

// action names the step s is at, for its Events: the phase and wave,
// e.g. "Pausing-wave-2".
func (s *State) action() string {
	return string(s.Phase) + "-wave-" + strconv.Itoa(s.Wave+1)
}

// String is the status line: "wave 2/3, 340/1000 re-issued, halted: …".
func (s *State) String() string {
	out := string(s.Phase)
	if s.Phase == Rolling || s.Phase == Halted || s.Phase == Pausing {
		out += ", wave " + strconv.Itoa(s.Wave+1) + "/" + strconv.Itoa(s.Waves)
	}
	out += ", " + strconv.Itoa(s.Moved) + "/" + strconv.Itoa(s.Total) + " re-issued"
	if s.Stuck > 0 {
		out += ", " + strconv.Itoa(s.Stuck) + " cannot move"
	}
	if s.Reason != "" {
		out += ": " + s.Reason
	}
	return out
}
