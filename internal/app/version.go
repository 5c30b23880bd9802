package app

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is certhub's release version, stamped at build time from the
// VERSION file by the Makefile (-ldflags -X); "dev" in an unstamped build.
// The kustomize base deploys the image of the same version.
var Version = "dev"

// versionString is the version, the VCS revision the binary was built from
// (when the build recorded it) and the Go version.
func versionString() string {
	rev, dirty := "unknown", ""
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
	}
	return fmt.Sprintf("certhub %s (revision %s%s, %s)", Version, rev, dirty, goVersion)
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print certhub's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), versionString())
		},
	}
}
