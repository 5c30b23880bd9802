package app

import (
	"github.com/spf13/cobra"
)

func newClusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Work with cluster registrations (Argo CD cluster Secrets) for Git",
	}
	cmd.AddCommand(newClusterAddCommand(), newValidateCommand())
	return cmd
}
