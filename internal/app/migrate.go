package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/writegate"
)

type migrateOptions struct {
	kubeconfig, namespace, output, cluster string
}

func newMigrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Move clusters from cert-manager onto the hub: see what the hub would do",
	}
	cmd.AddCommand(newMigratePlanCommand())
	return cmd
}

func newMigratePlanCommand() *cobra.Command {
	o := migrateOptions{namespace: hub.DefaultNamespace, output: "table"}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show, per cluster the hub does not write in, what it would do with each Certificate",
		Long: `Read the migration reports the hub publishes (ConfigMaps certhub-migration-<cluster>
in its namespace). A cluster labelled certhub.io/mode=observe, or one where cert-manager
is still active (ClusterConflict), has a plan: for every Certificate, Adopt (take the
Secret cert-manager wrote over, keeping its certificate), Keep, Reissue (through the
issuance budget), Issue (none yet) or Refuse (with the Ready=False reason the hub
would write). Without --cluster, one line per cluster that has a report.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadHubConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			scheme, err := hub.NewScheme()
			if err != nil {
				return err
			}
			hubc, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return fmt.Errorf("failed to create hub client: %w", err)
			}
			return runMigratePlan(cmd.Context(), cmd.OutOrStdout(), hubc, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster, then $KUBECONFIG)")
	f.StringVar(&o.namespace, "namespace", o.namespace, "Hub namespace of certhub (its migration reports)")
	f.StringVarP(&o.output, "output", "o", o.output, "table or json")
	f.StringVar(&o.cluster, "cluster", o.cluster, "Show this cluster's plan, one row per Certificate")
	return cmd
}

// runMigratePlan prints the reports in o.namespace: every cluster's summary,
// or o.cluster's plan.
func runMigratePlan(ctx context.Context, w io.Writer, hubc client.Reader, o migrateOptions) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("unknown output %q: use table or json", o.output)
	}
	reports, err := writegate.ReadReports(ctx, hubc, o.namespace)
	if err != nil {
		return err
	}
	if o.cluster == "" {
		var all []writegate.Report
		for _, r := range reports {
			r.Plan = nil // the summary: counts only
			all = append(all, r)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].Cluster < all[j].Cluster })
		if o.output == "json" {
			return writeJSON(w, all)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tMODE\tWRITES\tCONFLICT\tPLAN\tBY")
		for _, r := range all {
			fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%s\n", r.Cluster, modeOf(r), r.Writes, conflictOf(r), countsOf(r.Counts), r.By)
		}
		if len(all) == 0 {
			fmt.Fprintln(tw, "(no cluster has a plan: every cluster is in mode issue and written by the hub)")
		}
		return tw.Flush()
	}
	r, ok := reports[o.cluster]
	if !ok {
		// The common case: nothing to plan. Say whether the cluster exists.
		return fmt.Errorf("no migration report for cluster %q: the hub writes there in mode issue (or no replica owns it, or it is not registered); see certhub status", o.cluster)
	}
	if o.output == "json" {
		return writeJSON(w, r)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster %s: mode %s, writes %t, by %s\n", r.Cluster, modeOf(r), r.Writes, r.By)
	if r.Conflict {
		fmt.Fprintf(tw, "%s since %s: %s\n", writegate.ReasonClusterConflict, r.Since.UTC().Format(time.RFC3339), r.Message)
	}
	fmt.Fprintf(tw, "plan: %s\n\n", countsOf(r.Counts))
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tACTION\tFROM CERT-MANAGER\tREASON\tMESSAGE")
	for _, v := range r.Plan {
		from := "-"
		if v.Adopting {
			from = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Namespace, v.Name, v.Action, from, dash(v.Reason), dash(v.Message))
	}
	if r.Truncated > 0 {
		fmt.Fprintf(tw, "… %d more rows (reports keep %d; counts are complete)\n", r.Truncated, writegate.MaxPlanRows)
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func modeOf(r writegate.Report) string {
	if r.InvalidMode != "" {
		return fmt.Sprintf("%s (label %q is no mode)", r.Mode, r.InvalidMode)
	}
	return string(r.Mode)
}

func conflictOf(r writegate.Report) string {
	if !r.Conflict {
		return "-"
	}
	return writegate.ReasonClusterConflict
}

// countsOf is "Adopt=35 Reissue=15", in the actions' order.
func countsOf(c map[writegate.Action]int) string {
	var parts []string
	for _, a := range []writegate.Action{writegate.ActionKeep, writegate.ActionAdopt, writegate.ActionReissue, writegate.ActionIssue, writegate.ActionRefuse} {
		if n := c[a]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", a, n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clusterMode is the MODE column of `certhub status`: the Secret's label,
// and the hub's report when it has one (conflict, an unknown value).
func clusterMode(s *corev1.Secret, reports map[string]writegate.Report, cluster string) (mode, conflict string) {
	m, valid := writegate.ModeOf(s.Labels)
	mode = string(m)
	if !valid {
		mode += "?"
	}
	if r, ok := reports[cluster]; ok && r.Conflict {
		conflict = r.Message
	}
	return mode, conflict
}
