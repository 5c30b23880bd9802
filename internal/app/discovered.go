package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/discovery"
	"github.com/certhub/certhub/internal/inventory"
)

// The --managed filters of `certhub status --discovered`, besides the
// discovery.Managed values themselves.
const (
	managedAll       = "all"
	managedAny       = "managed"   // certhub or cert-manager
	managedUnmanaged = "unmanaged" // none
)

// DiscoveredRow is one certificate in `certhub status --discovered`.
type DiscoveredRow struct {
	Cluster string `json:"cluster"`
	discovery.Record
}

// DiscoveredStatus is `certhub status --discovered -o json`.
type DiscoveredStatus struct {
	Certificates []DiscoveredRow `json:"certificates"`
	// Clusters are the registered clusters' report summaries (no rows).
	Clusters []discovery.Report `json:"clusters"`
	// Unreported are registered clusters without a report yet.
	Unreported []string `json:"unreported,omitempty"`
}

// keepManaged reports whether filter keeps m.
func keepManaged(filter string, m discovery.Managed) bool {
	switch filter {
	case managedAll, "":
		return true
	case managedAny:
		return m != discovery.ManagedByNone
	case managedUnmanaged:
		return m == discovery.ManagedByNone
	}
	return string(m) == filter
}

// validManaged checks --managed.
func validManaged(filter string) error {
	switch filter {
	case managedAll, managedAny, managedUnmanaged, string(discovery.ManagedByCerthub), string(discovery.ManagedByCertManager), string(discovery.ManagedByNone):
		return nil
	}
	return fmt.Errorf("--managed %q: use all, managed, unmanaged, certhub, cert-manager or none", filter)
}

// collectDiscovered reads the discovery reports of the registered clusters
// (filtered by o.cluster and o.managed), sorted by o.sort.
func collectDiscovered(ctx context.Context, hubc client.Reader, o statusOptions, now time.Time) (*DiscoveredStatus, error) {
	if err := validManaged(o.managed); err != nil {
		return nil, err
	}
	secrets := &corev1.SecretList{}
	if err := hubc.List(ctx, secrets, client.InNamespace(o.secretNamespace), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
		return nil, fmt.Errorf("failed to list cluster Secrets in %s: %w", o.secretNamespace, err)
	}
	reports, err := discovery.ReadReports(ctx, hubc, o.namespace, now)
	if err != nil {
		return nil, err
	}
	out := &DiscoveredStatus{Certificates: []DiscoveredRow{}}
	var names []string
	for i := range secrets.Items {
		if c, err := inventory.ParseSecret(&secrets.Items[i]); err == nil && (o.cluster == "" || o.cluster == c.Name) {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		r, ok := reports[name]
		if !ok {
			out.Unreported = append(out.Unreported, name)
			continue
		}
		for _, rec := range r.Certificates {
			if keepManaged(o.managed, rec.Managed) {
				out.Certificates = append(out.Certificates, DiscoveredRow{Cluster: name, Record: rec})
			}
		}
		r.Certificates = nil
		out.Clusters = append(out.Clusters, r)
	}
	switch o.sort {
	case "cluster":
		slices.SortStableFunc(out.Certificates, func(a, b DiscoveredRow) int {
			return strings.Compare(a.Cluster+"/"+a.Namespace+"/"+a.Secret, b.Cluster+"/"+b.Namespace+"/"+b.Secret)
		})
	case "expiry", "":
		slices.SortStableFunc(out.Certificates, func(a, b DiscoveredRow) int { return a.NotAfter.Compare(b.NotAfter) })
	default:
		return nil, fmt.Errorf("--sort %q: use expiry or cluster", o.sort)
	}
	return out, nil
}

// printDiscovered prints the discovered certificates.
func printDiscovered(w io.Writer, s *DiscoveredStatus, output string, now time.Time) error {
	if done, err := printStructured(w, output, s); done {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNAMESPACE\tSECRET\tMANAGED\tEXPIRES\tNOT AFTER\tKEY\tISSUER\tNAMES\tPROBLEMS")
	for _, r := range s.Certificates {
		expires, notAfter := "-", "-"
		if !r.NotAfter.IsZero() {
			expires, notAfter = relative(r.NotAfter.Sub(now)), r.NotAfter.UTC().Format(time.RFC3339)
		}
		key := "-"
		if r.KeyAlgorithm != "" {
			key = fmt.Sprintf("%s-%d", r.KeyAlgorithm, r.KeySize)
		}
		problems := "-"
		if len(r.Problems) > 0 {
			problems = fmt.Sprint(r.Problems)
			problems = strings.Trim(strings.ReplaceAll(problems, " ", ","), "[]")
		}
		issuer := r.Issuer
		if len(issuer) > 40 {
			issuer = issuer[:37] + "..."
		}
		names := strings.Join(r.DNSNames, ",")
		if r.NameCount > len(r.DNSNames) {
			names += fmt.Sprintf(" (+%d)", r.NameCount-len(r.DNSNames))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Cluster, r.Namespace, r.Secret, r.Managed, expires, notAfter, key, orDash(issuer), orDash(names), problems)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range s.Clusters {
		switch {
		case !c.Synced:
			fmt.Fprintf(w, "cluster %s: discovery has not listed every Secret yet\n", c.Cluster)
		case c.Truncated > 0:
			fmt.Fprintf(w, "cluster %s: %d of %d certificates listed (the soonest to expire); the metrics count them all\n", c.Cluster, c.Total-c.Truncated, c.Total)
		}
	}
	if len(s.Unreported) > 0 {
		fmt.Fprintf(w, "no discovery report yet (not engaged, or discovery is off): %s\n", strings.Join(s.Unreported, ", "))
	}
	return nil
}

// relative is "in 3d4h", "in 45m", or "expired 2d ago".
func relative(d time.Duration) string {
	past := d < 0
	if past {
		d = -d
	}
	var s string
	switch {
	case d >= 48*time.Hour:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	case d >= time.Hour:
		s = fmt.Sprintf("%dh", int(d.Hours()))
	default:
		s = fmt.Sprintf("%dm", int(d.Minutes()))
	}
	if past {
		return "expired " + s + " ago"
	}
	return "in " + s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
