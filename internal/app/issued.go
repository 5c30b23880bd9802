package app

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/issued"
)

type issuedOptions struct {
	kubeconfig, hubNamespace, output string
	cluster, namespace, name, issuer string
	serial, dns, since               string
}

func newIssuedCommand() *cobra.Command {
	o := issuedOptions{hubNamespace: hub.DefaultNamespace, output: "table"}
	cmd := &cobra.Command{
		Use:   "issued",
		Short: "List the hub's record of the certificates its issuers signed",
		Long: `List the hub's record of every certificate its issuers signed (for a
Certificate, a CertificateRequest, an ACME order), from the ConfigMaps
certhub-issued-* in the hub namespace: serial, issuer, where it went,
names, validity and why it was signed. Each set flag must match.
Revocations select from this record, never from downstream Secrets.

UNDELIVERED marks a certificate recorded by a replica stopped before it
wrote it: the next issuance of the same Certificate replaced it.

Examples:
  certhub issued --cluster prod-eu --namespace shop
  certhub issued --dns '*.example.com' --since 2026-12-01T00:00:00Z -o json
  certhub issued --serial 4E:00:90:1F...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadHubConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{})
			if err != nil {
				return fmt.Errorf("failed to create hub client: %w", err)
			}
			return runIssued(cmd.Context(), cmd.OutOrStdout(), c, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster, then $KUBECONFIG)")
	f.StringVar(&o.hubNamespace, "hub-namespace", o.hubNamespace, "Hub namespace of the record (certhub's --namespace)")
	f.StringVar(&o.cluster, "cluster", "", "Downstream cluster (`*` wildcards)")
	f.StringVar(&o.namespace, "namespace", "", "Downstream namespace (`*` wildcards)")
	f.StringVar(&o.name, "name", "", "Certificate or CertificateRequest name (`*` wildcards)")
	f.StringVar(&o.issuer, "issuer", "", "Issuer: a ClusterIssuer's name, or Issuer/<namespace>/<name>")
	f.StringVar(&o.serial, "serial", "", "Serial number, hexadecimal (colons and case ignored)")
	f.StringVar(&o.dns, "dns", "", "A name of the certificate matches this glob (`*.example.com`)")
	f.StringVar(&o.since, "since", "", "Recorded at or after this time (RFC 3339) or this long ago (24h)")
	f.StringVarP(&o.output, "output", "o", o.output, "table, json or yaml")
	return cmd
}

// issuedRow is one entry as printed: the entry and whether it was delivered.
type issuedRow struct {
	issued.Entry `json:",inline"`
	Undelivered  bool `json:"undelivered,omitempty"`
}

func runIssued(ctx context.Context, w io.Writer, c client.Reader, o issuedOptions) error {
	match, err := o.matcher(time.Now())
	if err != nil {
		return err
	}
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.InNamespace(o.hubNamespace), client.MatchingLabels{issued.RecordLabel: issued.RecordChunk}); err != nil {
		return fmt.Errorf("failed to read the record in %s: %w", o.hubNamespace, err)
	}
	all, bad := issued.Entries(list.Items)
	undelivered := issued.Undelivered(all)
	rows := []issuedRow{}
	for _, e := range all {
		if match(e) {
			rows = append(rows, issuedRow{Entry: e, Undelivered: undelivered[e.Key()]})
		}
	}
	if done, err := printStructured(w, o.output, rows); done {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNAMESPACE\tKIND\tNAME\tISSUER\tSERIAL\tNOT AFTER\tWHY\tNAMES")
	for _, r := range rows {
		why := r.Why
		if r.Undelivered {
			why += " (UNDELIVERED)"
		}
		names := strings.Join(r.Names, ",")
		if r.NamesOmitted > 0 {
			names += fmt.Sprintf(" (+%d)", r.NamesOmitted)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Cluster, r.Namespace, r.Kind, r.Name, r.Issuer, r.Serial,
			r.NotAfter.Format(time.RFC3339), why, names)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d of %d certificates in the record\n", len(rows), len(all))
	if len(bad) > 0 {
		fmt.Fprintf(w, "%d entries could not be read\n", len(bad))
	}
	return nil
}

// matcher is the filter the flags describe.
func (o issuedOptions) matcher(now time.Time) (func(issued.Entry) bool, error) {
	var since time.Time
	if o.since != "" {
		if d, err := time.ParseDuration(o.since); err == nil {
			since = now.Add(-d)
		} else if since, err = time.Parse(time.RFC3339, o.since); err != nil {
			return nil, fmt.Errorf("--since %q: neither a duration nor an RFC 3339 time", o.since)
		}
	}
	for _, p := range []string{o.cluster, o.namespace, o.name, o.dns} {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("bad pattern %q: %w", p, err)
		}
	}
	issuer := o.issuer
	if issuer != "" && !strings.Contains(issuer, "/") {
		issuer = issued.ClusterIssuer(issuer)
	}
	serial := ""
	if o.serial != "" {
		serial = issued.NormalSerial(o.serial)
	}
	return func(e issued.Entry) bool {
		if !glob(o.cluster, e.Cluster) || !glob(o.namespace, e.Namespace) || !glob(o.name, e.Name) {
			return false
		}
		if issuer != "" && e.Issuer != issuer || serial != "" && e.Serial != serial || e.RecordedAt.Before(since) {
			return false
		}
		if o.dns == "" {
			return true
		}
		for _, n := range e.Names {
			if glob(o.dns, n) {
				return true
			}
		}
		return false
	}, nil
}

func glob(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	ok, _ := path.Match(pattern, s)
	return ok
}
