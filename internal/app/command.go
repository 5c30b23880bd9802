package app

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
)

// NewCommand returns the certhub root command with its subcommands.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "certhub",
		Short:         "Issue cert-manager Certificates in many Kubernetes clusters from one hub",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newRunCommand(), newStatusCommand(), newClusterCommand(), newPolicyCommand(), newMigrateCommand(), newRevokeCommand(), newIssuedCommand(), newVersionCommand(), newExecShimCommand())
	return root
}

func newRunCommand() *cobra.Command {
	o := hub.NewOptions()
	o.UserAgent = "certhub/" + Version
	zo := zap.Options{}
	memoryLimitRatio := defaultMemoryLimitRatio
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
			if err := setMemoryLimit(memoryLimitRatio, ctrl.Log.WithName("memlimit")); err != nil {
				return err
			}
			if err := o.Complete(); err != nil {
				return err
			}
			cfg, err := loadHubConfig(o.Kubeconfig)
			if err != nil {
				return err
			}
			if o.ExecShim, err = os.Executable(); err != nil {
				return fmt.Errorf("failed to find the certhub binary (it runs exec plugins): %w", err)
			}
			return hub.Run(ctrl.SetupSignalHandler(), cfg, o)
		},
	}
	addRunFlags(cmd.Flags(), o)
	cmd.Flags().Float64Var(&memoryLimitRatio, "memory-limit-ratio", memoryLimitRatio, "Set the Go runtime's soft memory limit (GOMEMLIMIT) to this share of the container's memory limit (its cgroup's), so the GC works harder before the replica is OOM-killed; 0 disables; GOMEMLIMIT or AUTOMEMLIMIT in the environment win")
	gfs := flag.NewFlagSet("zap", flag.ContinueOnError)
	zo.BindFlags(gfs)
	cmd.Flags().AddGoFlagSet(gfs)
	cmd.SetUsageFunc(groupedUsage)
	return cmd
}

// newExecShimCommand is how the hub runs exec credential plugins
// (inventory/execshim.go); not for users.
func newExecShimCommand() *cobra.Command {
	return &cobra.Command{
		Use:                inventory.ExecShimCommand + " [--timeout D] [--keep NAME]... -- COMMAND [ARG]...",
		Short:              "Run an exec credential plugin with a minimal environment and a deadline (used by the hub)",
		Hidden:             true,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := inventory.RunExecShim(cmd.Context(), args, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			if te := (*inventory.ExecTimeoutError)(nil); errors.As(err, &te) {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				os.Exit(inventory.ExecShimTimeoutExit) // the code the hub reads back from client-go
			}
			return err
		},
	}
}
