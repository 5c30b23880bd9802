package app

import (
	"flag"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// NewCommand returns the certhub root command with its subcommands.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "certhub",
		Short:         "Issue cert-manager Certificates in many Kubernetes clusters from one hub",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newRunCommand(), newDemoCommand(), newStatusCommand(), newClusterCommand(), newPolicyCommand(), newVersionCommand())
	return root
}

func newRunCommand() *cobra.Command {
	o := NewOptions()
	zo := zap.Options{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the hub controller",
		Long: `Run the hub controller against the hub cluster.

The hub reads Argo CD cluster Secrets (label argocd.argoproj.io/secret-type=cluster)
in --cluster-secret-namespace, connects to each cluster they describe, and issues
every cert-manager Certificate found there with the ClusterIssuers of the hub.`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
			cfg, err := loadHubConfig(o.Kubeconfig)
			if err != nil {
				return err
			}
			return Run(ctrl.SetupSignalHandler(), cfg, o)
		},
	}
	o.AddFlags(cmd.Flags())
	gfs := flag.NewFlagSet("zap", flag.ContinueOnError)
	zo.BindFlags(gfs)
	cmd.Flags().AddGoFlagSet(gfs)
	return cmd
}
