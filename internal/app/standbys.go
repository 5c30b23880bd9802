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
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/drpair"
	"github.com/certhub/certhub/internal/inventory"
)

// StandbyRow is one DR pair in `certhub status --standbys`.
type StandbyRow struct {
	Standby string `json:"standby"`
	Primary string `json:"primary"`
	// Status is the standby owner's last report; nil when none yet.
	Status *drpair.Status `json:"status,omitempty"`
}

// runStandbys prints `certhub status --standbys`.
func runStandbys(ctx context.Context, w io.Writer, cfg *rest.Config, o statusOptions) error {
	hubc, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("failed to create hub client: %w", err)
	}
	rows, err := collectStandbys(ctx, hubc, o)
	if err != nil {
		return err
	}
	return printStandbys(w, rows, o, time.Now())
}

// collectStandbys lists the registered standbys (o.cluster: that one) with
// their status, sorted by standby.
func collectStandbys(ctx context.Context, hubc client.Reader, o statusOptions) ([]StandbyRow, error) {
	secrets := &corev1.SecretList{}
	if err := hubc.List(ctx, secrets, client.InNamespace(o.secretNamespace), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
		return nil, fmt.Errorf("failed to list cluster Secrets in %s: %w", o.secretNamespace, err)
	}
	sts, err := drpair.ReadStatuses(ctx, hubc, o.namespace)
	if err != nil {
		return nil, err
	}
	rows := []StandbyRow{}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		prim := s.Labels[hubapi.StandbyForLabel]
		c, err := inventory.ParseSecret(s)
		if prim == "" || err != nil || (o.cluster != "" && o.cluster != c.Name) {
			continue
		}
		row := StandbyRow{Standby: c.Name, Primary: prim}
		if st := sts[c.Name]; st != nil && st.Primary == prim {
			row.Status = st
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b StandbyRow) int { return strings.Compare(a.Standby, b.Standby) })
	return rows, nil
}

// printStandbys prints one row per pair; with --cluster, the standby's
// Certificates that are not ready too.
func printStandbys(w io.Writer, rows []StandbyRow, o statusOptions, now time.Time) error {
	if done, err := printStructured(w, o.output, rows); done {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STANDBY\tPRIMARY\tREADY\tCERTIFICATES\tPRIMARY READ\tBY\tNOT READY")
	for _, r := range rows {
		st := r.Status
		if st == nil {
			fmt.Fprintf(tw, "%s\t%s\tUnknown\t-\t-\t-\tno report yet (is controller standby-pairs on?)\n", r.Standby, r.Primary)
			continue
		}
		read := "never"
		if !st.SourceAt.IsZero() {
			read = now.Sub(st.SourceAt).Round(time.Second).String() + " ago"
		}
		var reasons []string
		for reason, n := range st.Reasons {
			reasons = append(reasons, fmt.Sprintf("%s=%d", reason, n))
		}
		slices.Sort(reasons)
		notReady := strings.Join(reasons, ",")
		if notReady == "" {
			notReady = "-"
		}
		ready := "False"
		if st.Ready {
			ready = "True"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.Standby, r.Primary, ready, st.ReadyCertificates, st.Selected, read, st.By, notReady)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.cluster == "" || len(rows) != 1 || rows[0].Status == nil || len(rows[0].Status.Problems) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tREASON\tMESSAGE")
	for _, p := range rows[0].Status.Problems {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", dash(p.Namespace), dash(p.Name), p.Reason, p.Message)
	}
	return tw.Flush()
}
