package rotation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// timings are the rotation's waits (Options).
type timings struct {
	Soak, Pause, Deadline, Grace time.Duration
}

// stepInput is everything one step decides on.
type stepInput struct {
	// view is every replica's fresh observation, by cluster; a cluster not
	// in it is unreachable.
	view map[multicluster.ClusterName]progress
	// waveOf orders the registered clusters; waves is how many waves.
	waveOf map[multicluster.ClusterName]int
	waves  int
	// resume and force are the annotations' values now; withdrawn is true
	// when NextCAAnnotation was removed; finished when it was removed
	// after the ClusterIssuer was pointed at the next CA.
	resume, force       string
	withdrawn, finished bool
}

// note is an Event (and log line) a step emits on the ClusterIssuer.
type note struct {
	typ, reason, message string
}

// tallied sums a view for the rotation's decisions.
type tallied struct {
	moved, total, stuck, onNext int
	// missing: reachable clusters of the waves rolled so far with
	// Certificates neither moved nor stuck, and how many.
	missing map[multicluster.ClusterName]int
	// late: reachable clusters of any wave with Certificates not moved nor
	// stuck (a cluster that was unreachable while its wave rolled).
	late []multicluster.ClusterName
	// unreachable: registered clusters nobody observed; unpublished:
	// reachable clusters whose bundles lack the new CA.
	unreachable, unpublished []multicluster.ClusterName
	stuckNames               []string
}

func tally(in stepInput, upTo int) tallied {
	t := tallied{missing: map[multicluster.ClusterName]int{}}
	for name, w := range in.waveOf {
		p, seen := in.view[name]
		if !seen {
			t.unreachable = append(t.unreachable, name)
			continue
		}
		t.moved += p.Moved
		t.total += p.Total
		t.stuck += p.Stuck
		t.onNext += p.OnNext
		for _, n := range p.StuckNames {
			t.stuckNames = append(t.stuckNames, string(name)+"/"+n)
		}
		if !p.Published {
			t.unpublished = append(t.unpublished, name)
		}
		if left := p.Total - p.Moved - p.Stuck; left > 0 {
			t.late = append(t.late, name)
			if w <= upTo {
				t.missing[name] = left
			}
		}
	}
	slices.Sort(t.unreachable)
	slices.Sort(t.unpublished)
	slices.Sort(t.late)
	slices.Sort(t.stuckNames)
	return t
}

// advance moves s one step at now and returns what to tell; remove is
// true when the rotation's state is to go (withdrawn before anything was
// signed, finished, or an abort done). Pure: the caller observes and
// writes.
func advance(s *State, in stepInput, tm timings, now time.Time) (notes []note, remove bool) {
	progressf := func(format string, args ...any) {
		notes = append(notes, note{corev1.EventTypeNormal, ReasonProgress, fmt.Sprintf(format, args...)})
	}
	t := tally(in, s.Wave)
	s.Waves = in.waves
	s.Total, s.Stuck = t.total, t.stuck
	s.Moved = t.moved
	if in.withdrawn {
		switch {
		case in.finished, s.Phase == Publishing, s.Phase == Soaking, s.Phase == Halted && s.From == Publishing:
			return notes, true // nothing signed by the next CA, or it is the issuer's CA now
		case s.Phase != Aborting:
			s.Phase, s.Since, s.Reason, s.Force = Aborting, now, "", in.force
			notes = append(notes, note{corev1.EventTypeWarning, ReasonHalted, fmt.Sprintf(
				"CA rotation to %s withdrawn after it signed: both CAs stay in every bundle while the %d certificate(s) on the new CA are issued by the current one again", s.Next, t.onNext)})
			return notes, false
		}
		// Aborting: done when every cluster was seen with nothing on the new CA.
		if (t.onNext == 0 && len(t.unreachable) == 0) || in.force != s.Force {
			progressf("CA rotation to %s rolled back: no certificate left on it; it leaves the bundles", s.Next)
			return notes, true
		}
		s.Reason = fmt.Sprintf("rolling back: %d certificate(s) still on the new CA", t.onNext)
		if len(t.unreachable) > 0 {
			s.Reason += "; waiting to see " + names(t.unreachable) + " (annotate " + hubapi.RotationForceAnnotation + " to end anyway)"
		}
		return notes, false
	}
	if s.Phase != Halted {
		s.Reason = ""
	}
	stuck := func() string {
		if len(t.stuckNames) == 0 {
			return ""
		}
		return fmt.Sprintf("; %d cannot move for reasons of their own: %s", len(t.stuckNames), strings.Join(t.stuckNames, ", "))
	}
	switch s.Phase {
	case Publishing:
		if len(t.unpublished) == 0 {
			s.Phase, s.Since = Soaking, now
			progressf("New CA published in every reachable cluster's trust bundle; soaking for %s%s", tm.Soak, deferred(t.unreachable))
		} else if now.Sub(s.Since) >= tm.Deadline {
			s.Phase, s.From, s.Since = Halted, Publishing, now
			s.Reason = fmt.Sprintf("publishing: the new CA is not in the trust bundles of %s after %s; annotate %s to resume", names(t.unpublished), tm.Deadline, hubapi.RotationResumeAnnotation)
			notes = append(notes, note{corev1.EventTypeWarning, ReasonHalted, "CA rotation halted at " + s.Reason})
		}
	case Soaking:
		if now.Sub(s.Since) >= tm.Soak {
			s.Phase, s.Wave, s.Since = Rolling, 0, now
			progressf("Wave %d/%d: its clusters sign with the new CA; re-issuing what the old one signed", s.Wave+1, s.Waves)
		}
	case Rolling:
		if len(t.missing) == 0 {
			s.Since = now
			if s.Wave+1 < s.Waves {
				s.Phase = Pausing
				progressf("Wave %d/%d done; pausing %s%s%s", s.Wave+1, s.Waves, tm.Pause, deferred(t.unreachable), stuck())
			} else {
				s.Phase = Grace
				progressf("Every wave done (%d Certificates on the new CA); grace period %s before the old CA leaves the bundles%s%s", s.Moved, tm.Grace, deferred(t.unreachable), stuck())
			}
		} else if now.Sub(s.Since) >= tm.Deadline {
			s.Phase, s.From, s.Since = Halted, Rolling, now
			s.Reason = fmt.Sprintf("wave %d/%d: Certificates not re-issued and Ready within %s: %s; annotate %s to resume", s.Wave+1, s.Waves, tm.Deadline, summarize(t.missing), hubapi.RotationResumeAnnotation)
			notes = append(notes, note{corev1.EventTypeWarning, ReasonHalted, "CA rotation halted at " + s.Reason})
		}
	case Halted:
		if in.resume != s.Resume {
			from := s.From
			if from == "" {
				from = Rolling
			}
			s.Resume, s.Phase, s.Since, s.Reason = in.resume, from, now, ""
			progressf("CA rotation resumed (%s)", from)
		}
	case Pausing:
		if now.Sub(s.Since) >= tm.Pause {
			s.Phase, s.Wave, s.Since = Rolling, s.Wave+1, now
			progressf("Wave %d/%d: its clusters sign with the new CA; re-issuing what the old one signed", s.Wave+1, s.Waves)
		}
	case Grace:
		if now.Sub(s.Since) < tm.Grace {
			break
		}
		waiting := slices.Concat(t.unreachable, t.late)
		if len(waiting) > 0 && in.force == s.Force {
			s.Reason = fmt.Sprintf("retiring the old CA waits for %s; annotate %s to retire it anyway", names(waiting), hubapi.RotationForceAnnotation)
			break
		}
		s.Force = in.force
		s.Phase, s.Since = Complete, now
		progressf("CA rotation complete: the old CA left the trust bundles%s. Point spec.ca.secretName at %s, then remove %s", stuck(), s.Next, hubapi.NextCAAnnotation)
	}
	if s.Reason == "" && len(t.stuckNames) > 0 { // listed for `certhub status` too
		s.Reason = fmt.Sprintf("cannot move for reasons of their own: %s", strings.Join(t.stuckNames[:min(len(t.stuckNames), maxStuckNames)], ", "))
	}
	return notes, false
}

// deferred says which unreachable clusters a wave went on without.
func deferred(unreachable []multicluster.ClusterName) string {
	if len(unreachable) == 0 {
		return ""
	}
	return "; " + names(unreachable) + " unreachable: rotated when back, bundle first"
}

func names(list []multicluster.ClusterName) string {
	s := make([]string, len(list))
	for i, n := range list {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}
