package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

type revokeOptions struct {
	kubeconfig                     string
	clusters, serials              []string
	namespace, certificate, issuer string
	issuedBefore, reason           string
	dryRun                         bool
}

func newRevokeCommand() *cobra.Command {
	o := revokeOptions{reason: string(hubapi.RevocationSuperseded)}
	cmd := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Create a CertificateRevocation in the hub: renew the certificates it selects everywhere, then revoke their old serials",
		Long: `Create the CertificateRevocation NAME in the hub. Every downstream certificate
the hub issued that it selects (every set flag must match) is renewed
first; then its old serial goes into its CA ClusterIssuer's CRL, or is
revoked at its ACME CA. Follow it with:

  kubectl get certificaterevocation NAME -o yaml   (status per cluster and per serial)

Examples:
  certhub revoke leaked-web --cluster prod-eu --namespace shop --certificate web --reason keyCompromise
  certhub revoke ca-incident --issuer platform-ca --issued-before 2026-12-01T00:00:00Z
  certhub revoke one-serial --serial 4E:00:90:1F...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rev, err := o.revocation(args[0])
			if err != nil {
				return err
			}
			if o.dryRun {
				return printYAML(cmd.OutOrStdout(), rev)
			}
			cfg, err := loadHubConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			scheme := runtime.NewScheme()
			if err := hubapi.AddToScheme(scheme); err != nil {
				return err
			}
			hubc, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return fmt.Errorf("failed to create hub client: %w", err)
			}
			return createRevocation(cmd.Context(), cmd.OutOrStdout(), hubc, rev)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Kubeconfig of the hub cluster (default: in-cluster, then $KUBECONFIG)")
	f.StringSliceVar(&o.clusters, "cluster", nil, "Downstream cluster names (`*` wildcards; repeat or comma-separate); none: every cluster")
	f.StringVar(&o.namespace, "namespace", "", "Downstream namespace of the Certificates (`*` wildcards)")
	f.StringVar(&o.certificate, "certificate", "", "Name of the downstream Certificates (`*` wildcards)")
	f.StringVar(&o.issuer, "issuer", "", "Hub ClusterIssuer the Certificates name")
	f.StringSliceVar(&o.serials, "serial", nil, "Serial numbers, hexadecimal (colons and case ignored)")
	f.StringVar(&o.issuedBefore, "issued-before", "", "Select certificates whose notBefore is before this time (RFC 3339)")
	f.StringVar(&o.reason, "reason", o.reason, "RFC 5280 reason: unspecified, keyCompromise, cACompromise, affiliationChanged, superseded, cessationOfOperation")
	f.BoolVar(&o.dryRun, "dry-run", false, "Print the CertificateRevocation (YAML, for Git) instead of creating it")
	return cmd
}

// revocation builds the CertificateRevocation the flags describe.
func (o revokeOptions) revocation(name string) (*hubapi.CertificateRevocation, error) {
	rev := &hubapi.CertificateRevocation{TypeMeta: metav1.TypeMeta{APIVersion: hubapi.SchemeGroupVersion.String(), Kind: hubapi.CertificateRevocationKind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: hubapi.CertificateRevocationSpec{Clusters: o.clusters, Namespace: o.namespace, Certificate: o.certificate,
			IssuerName: o.issuer, Serials: o.serials, Reason: hubapi.RevocationReason(o.reason)}}
	if o.issuedBefore != "" {
		t, err := time.Parse(time.RFC3339, o.issuedBefore)
		if err != nil {
			return nil, fmt.Errorf("--issued-before %q: %w", o.issuedBefore, err)
		}
		rev.Spec.IssuedBefore = &metav1.Time{Time: t}
	}
	switch rev.Spec.Reason {
	case hubapi.RevocationUnspecified, hubapi.RevocationKeyCompromise, hubapi.RevocationCACompromise, hubapi.RevocationAffiliationChanged,
		hubapi.RevocationSuperseded, hubapi.RevocationCessationOfOperation:
	default:
		return nil, fmt.Errorf("--reason %q is not an RFC 5280 reason certhub knows", o.reason)
	}
	s := rev.Spec
	if len(s.Clusters) == 0 && s.Namespace == "" && s.Certificate == "" && s.IssuerName == "" && len(s.Serials) == 0 && s.IssuedBefore == nil {
		return nil, errors.New("select something: --cluster, --namespace, --certificate, --issuer, --serial or --issued-before (a revocation of everything is refused)")
	}
	return rev, nil
}

// createRevocation creates rev in the hub and says how to follow it.
func createRevocation(ctx context.Context, w io.Writer, hubc client.Client, rev *hubapi.CertificateRevocation) error {
	if err := hubc.Create(ctx, rev); err != nil {
		return fmt.Errorf("failed to create CertificateRevocation %s: %w", rev.Name, err)
	}
	fmt.Fprintf(w, "certificaterevocation.certhub.io/%s created: the certificates it selects are renewed, then revoked\n", rev.Name)
	fmt.Fprintf(w, "follow it: kubectl get certificaterevocation %s -o yaml\n", rev.Name)
	return nil
}

// printYAML writes obj as YAML.
func printYAML(w io.Writer, obj any) error {
	_, err := printStructured(w, "yaml", obj)
	return err
}

// printStructured writes v as output asks: json or yaml (done true), or
// nothing for table ("" too), which the caller prints; an unknown output
// is an error.
func printStructured(w io.Writer, output string, v any) (done bool, err error) {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		raw, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = w.Write(raw)
		return true, err
	case "table", "":
		return false, nil
	}
	return true, fmt.Errorf("unknown output %q: use table, json or yaml", output)
}
