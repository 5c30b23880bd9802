package app

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/inventory"
)

type clusterAddOptions struct {
	kubeconfig, context, name, argoNamespace, output, labels string
	namespaces                                               []string
	tokenDuration                                            time.Duration
}

func newClusterAddCommand() *cobra.Command {
	o := clusterAddOptions{argoNamespace: DefaultClusterSecretNamespace, tokenDuration: 365 * 24 * time.Hour}
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Give the hub access to a cluster and write its Argo CD cluster Secret for Git",
		Long: `Create, in the cluster the kubeconfig/context points at, the hub's
ServiceAccount (certhub-system/certhub-hub) with the least-privilege RBAC of
kustomize/downstream (a ClusterRole, or with --namespaces a Role in each), mint
a token for it (TokenRequest, --token-duration), and write the Argo CD cluster
Secret that registers the cluster, ready to commit. The token is a credential:
encrypt the file (SOPS, Sealed Secrets) or deliver it with External Secrets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if o.output != "" && o.output != "-" {
				f, err := os.OpenFile(o.output, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
				if err != nil {
					return err
				}
				defer f.Close()
				out = f
			}
			return clusterAdd(cmd, out, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Kubeconfig with admin access to the cluster to register (default: $KUBECONFIG)")
	f.StringVar(&o.context, "context", o.context, "Context in the kubeconfig (default: its current context)")
	f.StringVar(&o.name, "name", o.name, "Cluster name in the registration (required)")
	f.StringVar(&o.argoNamespace, "argocd-namespace", o.argoNamespace, "Namespace of the Secret in the hub")
	f.StringSliceVar(&o.namespaces, "namespaces", o.namespaces, "Register namespace-scoped: only these namespaces, with namespaced RBAC")
	f.StringVar(&o.labels, "labels", o.labels, "Extra labels on the Secret, e.g. certhub.io/enabled=true")
	f.DurationVar(&o.tokenDuration, "token-duration", o.tokenDuration, "Lifetime of the minted token")
	f.StringVarP(&o.output, "output", "o", "-", "Write the Secret manifest to this file (- for stdout)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func clusterAdd(cmd *cobra.Command, out io.Writer, o clusterAddOptions) error {
	ctx := cmd.Context()
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("failed to load the cluster's kubeconfig: %w", err)
	}
	extra, err := labels.ConvertSelectorToLabelsMap(o.labels)
	if err != nil {
		return fmt.Errorf("--labels: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	if err := inventory.GrantAccess(ctx, c, o.namespaces); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	token, err := inventory.MintToken(ctx, cs, o.tokenDuration)
	if err != nil {
		return err
	}
	caData, err := caDataOf(cfg)
	if err != nil {
		return err
	}
	s, err := inventory.NewSecret(o.argoNamespace, "cluster-"+o.name, o.name, cfg.Host,
		inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{CAData: caData, ServerName: cfg.ServerName, Insecure: cfg.Insecure}})
	if err != nil {
		return err
	}
	if len(o.namespaces) > 0 {
		s.Data["namespaces"] = []byte(strings.Join(o.namespaces, ","))
	}
	for k, v := range extra {
		s.Labels[k] = v
	}
	raw, err := yaml.Marshal(s)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "# Argo CD cluster Secret for %q, written by `certhub cluster add`.\n", o.name)
	fmt.Fprintln(out, "# It holds a bearer token: commit it encrypted (SOPS, Sealed Secrets) or deliver it with External Secrets.")
	fmt.Fprintf(out, "# Check it with: certhub cluster validate FILE\n")
	_, err = out.Write(raw)
	return err
}

func caDataOf(cfg *rest.Config) ([]byte, error) {
	if len(cfg.CAData) > 0 || cfg.CAFile == "" {
		return cfg.CAData, nil
	}
	b, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("failed to read the cluster CA %s: %w", cfg.CAFile, err)
	}
	return b, nil
}
