package acme

import (
	"fmt"
	"slices"
	"strings"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
)

// Reasons of a Certificate that no solver can serve.
const (
	// ReasonUnsupportedSolver: the solver chosen for a name is of a type the
	// hub does not run (http01, or a dns01 solver naming no provider).
	ReasonUnsupportedSolver = "UnsupportedSolver"
	// ReasonNoSolver: no solver of the ClusterIssuer selects the name.
	ReasonNoSolver = "NoSolverFound"
	// ReasonSolverConfig: the chosen solver's configuration or credentials
	// are unusable (e.g. its TSIG Secret is missing).
	ReasonSolverConfig = "InvalidSolverConfig"
)

// SupportedSolvers says what the hub solves, for messages.
const SupportedSolvers = "dns01 with rfc2136, route53, cloudDNS, azureDNS, akamai, cloudflare, digitalocean, acmeDNS or a webhook solver"

// solverError is a solver problem a Certificate's condition reports.
type solverError struct{ reason, message string }

func (e *solverError) Error() string { return e.reason + ": " + e.message }

// chooseSolver returns the index of the solver that serves dnsName for a
// Certificate with labels, as cert-manager chooses: a solver whose
// selector lists the name exactly wins over one whose dnsZones contain it
// (the longest zone first), which wins over one matching only labels (the
// most labels first), which wins over one without a selector; among equals
// the first listed. Solvers whose matchLabels do not all match are skipped.
func chooseSolver(solvers []cmacme.ACMEChallengeSolver, dnsName string, labels map[string]string) (int, error) {
	best, bestScore := -1, [3]int{-1, -1, -1}
	name := strings.TrimPrefix(dnsName, "*.")
	for i, s := range solvers {
		score := [3]int{0, 0, 0} // exact name, zone length, labels
		if sel := s.Selector; sel != nil {
			ok := true
			for k, v := range sel.MatchLabels {
				if labels[k] != v {
					ok = false
				}
			}
			score[2] = len(sel.MatchLabels)
			if len(sel.DNSNames) > 0 {
				ok = ok && slices.Contains(sel.DNSNames, dnsName)
				score[0] = 1
			}
			if len(sel.DNSZones) > 0 && score[0] == 0 {
				zl := -1
				for _, z := range sel.DNSZones {
					z = strings.TrimSuffix(z, ".")
					if (name == z || strings.HasSuffix(name, "."+z)) && len(z) > zl {
						zl = len(z)
					}
				}
				ok = ok && zl >= 0
				score[1] = zl
			}
			if !ok {
				continue
			}
		}
		if less(bestScore, score) {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return -1, &solverError{ReasonNoSolver, fmt.Sprintf("no solver of the ClusterIssuer selects %q (check spec.acme.solvers[].selector)", dnsName)}
	}
	return best, nil
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// checkSolver says whether the hub can run solver s: any dns01 solver with
// exactly one provider (a webhook names its group and solver); never
// http01, which needs a solver in every downstream cluster.
func checkSolver(s cmacme.ACMEChallengeSolver, index int) error {
	switch {
	case s.HTTP01 != nil:
		return &solverError{ReasonUnsupportedSolver, fmt.Sprintf("solver %d is http01; the hub solves only %s (HTTP-01 would need a solver in every downstream cluster)", index, SupportedSolvers)}
	case s.DNS01 == nil:
		return &solverError{ReasonUnsupportedSolver, fmt.Sprintf("solver %d has no dns01 configuration; the hub solves %s", index, SupportedSolvers)}
	}
	d := s.DNS01
	n := 0
	for _, set := range []bool{d.RFC2136 != nil, d.AcmeDNS != nil, d.Cloudflare != nil, d.DigitalOcean != nil, d.Route53 != nil,
		d.CloudDNS != nil, d.AzureDNS != nil, d.Akamai != nil, d.Webhook != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return &solverError{ReasonUnsupportedSolver, fmt.Sprintf("solver %d names no dns01 provider; the hub solves %s", index, SupportedSolvers)}
	case n > 1:
		return &solverError{ReasonSolverConfig, fmt.Sprintf("solver %d names %d dns01 providers; exactly one is allowed", index, n)}
	case d.Webhook != nil && (d.Webhook.GroupName == "" || d.Webhook.SolverName == ""):
		return &solverError{ReasonSolverConfig, fmt.Sprintf("solver %d: a dns01 webhook needs groupName and solverName", index)}
	}
	return nil
}
