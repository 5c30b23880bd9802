package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/regcheck"
)

type policyCheckOptions struct {
	cluster, clusterLabels, namespace, defaultPolicy string
	policyFiles                                      []string
	kubeconfig, clusterSecretNamespace               string
}

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with IssuancePolicies (which cluster and namespace may get which certificate)",
	}
	cmd.AddCommand(newPolicyCheckCommand())
	return cmd
}

func newPolicyCheckCommand() *cobra.Command {
	o := policyCheckOptions{defaultPolicy: string(policy.Deny), clusterSecretNamespace: hub.DefaultClusterSecretNamespace}
	cmd := &cobra.Command{
		Use:   "check --cluster NAME [--namespace NS] [--policies FILE|DIR]... CERT.yaml|DIR|-...",
		Short: "Evaluate Certificate manifests against issuance policies, offline or against the live hub (for application repositories' CI)",
		Long: `Evaluate every cert-manager Certificate in the given files, directories or
standard input (-) as the hub would for cluster --cluster: the IssuancePolicies
from --policies files (offline), or else from the hub (--kubeconfig, read-only).
The cluster's labels come from --cluster-labels, or else, against the live hub,
from its Argo CD cluster Secret. A Certificate without a namespace is taken to
be in --namespace.

Prints one line per Certificate (ALLOWED, with the policy, or DENIED, with the
field, the value and the policies considered) and exits 1 if any is denied.
Only the policy is checked: spec errors are for the hub's validation (and the
downstream ValidatingAdmissionPolicy).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyCheck(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), args, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cluster, "cluster", "", "Name of the downstream cluster the Certificates go to (required)")
	f.StringVar(&o.clusterLabels, "cluster-labels", "", "Labels of the cluster's Argo CD Secret, k=v,... (default: read from the live hub)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "Namespace of Certificates whose manifest has none")
	f.StringArrayVar(&o.policyFiles, "policies", nil, "IssuancePolicy files or directories (repeatable); without it, the hub's policies are read")
	f.StringVar(&o.defaultPolicy, "default-policy", o.defaultPolicy, "What the hub does with Certificates no policy selects: allow or deny (the hub's --default-policy)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Hub kubeconfig, when policies or labels are read from the hub (default: in-cluster, then $KUBECONFIG)")
	f.StringVar(&o.clusterSecretNamespace, "cluster-secret-namespace", o.clusterSecretNamespace, "Namespace of Argo CD cluster Secrets in the hub")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

// errDenied makes the command exit non-zero after printing its verdicts.
var errDenied = errors.New("some Certificates are denied by the issuance policies")

func runPolicyCheck(ctx context.Context, stdin io.Reader, out io.Writer, args []string, o policyCheckOptions) error {
	mode, err := policy.ParseMode(o.defaultPolicy)
	if err != nil {
		return err
	}
	var crts []*cmapi.Certificate
	for _, arg := range args {
		var perr error
		if err := eachInput(stdin, arg, func(name string, raw []byte) {
			cs, err := decodeCertificates(raw, o.namespace)
			if err != nil {
				perr = errors.Join(perr, fmt.Errorf("%s: %w", name, err))
			}
			crts = append(crts, cs...)
		}); err != nil {
			return err
		}
		if perr != nil {
			return perr
		}
	}
	if len(crts) == 0 {
		return errors.New("no Certificate found in the input")
	}

	var hubc client.Client
	needHub := len(o.policyFiles) == 0 || o.clusterLabels == ""
	if needHub {
		cfg, err := loadHubConfig(o.kubeconfig)
		if err != nil {
			return fmt.Errorf("reading policies or cluster labels from the hub: %w (give --policies and --cluster-labels to check offline)", err)
		}
		scheme, err := hub.NewScheme()
		if err != nil {
			return err
		}
		if hubc, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
			return fmt.Errorf("failed to create hub client: %w", err)
		}
	}
	policies, err := loadPolicies(ctx, stdin, hubc, o.policyFiles)
	if err != nil {
		return err
	}
	clusterLabels, err := labelsOf(ctx, hubc, o)
	if err != nil {
		return err
	}
	set, err := policy.Compile(policies, mode)
	if err != nil {
		fmt.Fprintf(out, "warning: %v (an invalid policy selects every Certificate and allows nothing)\n", err)
	}
	bad := 0
	for _, crt := range crts {
		d := set.Evaluate(policy.Request{Cluster: o.cluster, ClusterLabels: clusterLabels, Certificate: crt})
		if d.Allowed {
			fmt.Fprintf(out, "ALLOWED %s/%s: %s\n", crt.Namespace, crt.Name, d.Message)
			continue
		}
		bad++
		fmt.Fprintf(out, "DENIED  %s/%s: %s\n", crt.Namespace, crt.Name, d.Message)
	}
	fmt.Fprintf(out, "%d Certificate(s) checked against %d IssuancePolicies for cluster %q: %d denied\n", len(crts), set.Len(), o.cluster, bad)
	if bad > 0 {
		return errDenied
	}
	return nil
}

// decodeCertificates returns the cert-manager Certificates in a YAML stream
// (other kinds are skipped), in namespace ns when they name none.
func decodeCertificates(raw []byte, ns string) ([]*cmapi.Certificate, error) {
	var out []*cmapi.Certificate
	for _, doc := range regcheck.SplitDocuments(raw) {
		if len(bytes.TrimSpace(doc.Raw)) == 0 {
			continue
		}
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc.Raw, &tm); err != nil {
			return nil, fmt.Errorf("line %d: %w", doc.Line, err)
		}
		if tm.Kind != cmapi.CertificateKind || !strings.HasPrefix(tm.APIVersion, cmapi.SchemeGroupVersion.Group+"/") {
			continue
		}
		crt := &cmapi.Certificate{}
		if err := yaml.UnmarshalStrict(doc.Raw, crt); err != nil {
			return nil, fmt.Errorf("line %d: Certificate: %w", doc.Line, err)
		}
		if crt.Namespace == "" {
			if ns == "" {
				return nil, fmt.Errorf("line %d: Certificate %s has no namespace; give --namespace", doc.Line, crt.Name)
			}
			crt.Namespace = ns
		}
		out = append(out, crt)
	}
	return out, nil
}

// loadPolicies reads IssuancePolicies from files, or from the hub when none are given.
func loadPolicies(ctx context.Context, stdin io.Reader, hubc client.Client, files []string) ([]hubapi.IssuancePolicy, error) {
	if len(files) == 0 {
		list := &hubapi.IssuancePolicyList{}
		if err := hubc.List(ctx, list); err != nil {
			return nil, fmt.Errorf("failed to list IssuancePolicies in the hub: %w", err)
		}
		return list.Items, nil
	}
	var out []hubapi.IssuancePolicy
	for _, f := range files {
		var perr error
		if err := eachInput(stdin, f, func(name string, raw []byte) {
			ps, err := policy.Parse(raw)
			if err != nil {
				perr = errors.Join(perr, fmt.Errorf("%s: %w", name, err))
			}
			out = append(out, ps...)
		}); err != nil {
			return nil, err
		}
		if perr != nil {
			return nil, perr
		}
	}
	return out, nil
}

// labelsOf returns --cluster-labels, or the labels of the cluster's Secret in the hub.
func labelsOf(ctx context.Context, hubc client.Client, o policyCheckOptions) (map[string]string, error) {
	if o.clusterLabels != "" {
		set, err := labels.ConvertSelectorToLabelsMap(o.clusterLabels)
		if err != nil {
			return nil, fmt.Errorf("--cluster-labels: %w", err)
		}
		return set, nil
	}
	list := &corev1.SecretList{}
	if err := hubc.List(ctx, list, client.InNamespace(o.clusterSecretNamespace), client.MatchingLabels{inventory.SecretTypeLabel: inventory.SecretTypeCluster}); err != nil {
		return nil, fmt.Errorf("failed to list cluster Secrets in the hub: %w", err)
	}
	for _, s := range list.Items {
		if string(s.Data["name"]) == o.cluster {
			return s.Labels, nil
		}
	}
	return nil, fmt.Errorf("no cluster Secret in %s registers cluster %q; give --cluster-labels", o.clusterSecretNamespace, o.cluster)
}
