package app

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/certhub/certhub/internal/hub"
)

// renamedFlags are flags renamed for consistent prefixes; the old names
// work for one release, deprecated (hidden, with a warning when used).
var renamedFlags = map[string]string{
	"lease-duration": "shard-lease-duration", "renew-deadline": "shard-renew-deadline", "retry-period": "shard-retry-period",
	"renew-interval": "shard-renew-interval", "max-clock-skew": "shard-max-clock-skew", "standby": "shard-standby",
	"weight": "shard-weight", "coordinator": "shard-coordinator",
	"dns01-recursive-nameservers": "acme-dns01-recursive-nameservers", "dns01-recursive-nameservers-only": "acme-dns01-recursive-nameservers-only",
	"dns01-settle-delay": "acme-dns01-settle-delay", "dns01-propagation-timeout": "acme-dns01-propagation-timeout",
}

// addDeprecatedFlags adds the old names of renamed flags, sharing the new
// flags' values, and the three controller switches --controllers replaces.
func addDeprecatedFlags(fs *pflag.FlagSet, o *hub.Options) {
	for old, renamed := range renamedFlags {
		f := fs.Lookup(renamed)
		fs.AddFlag(&pflag.Flag{Name: old, Usage: f.Usage, Value: f.Value, DefValue: f.DefValue, NoOptDefVal: f.NoOptDefVal,
			Deprecated: "use --" + renamed, Hidden: true})
	}
	for _, c := range hub.OptionalControllers {
		fs.AddFlag(&pflag.Flag{Name: c, Usage: "turn the " + c + " controller on or off", Value: &controllerSwitch{o: o, name: c},
			DefValue: "true", NoOptDefVal: "true", Deprecated: fmt.Sprintf("use --controllers=*,-%s to turn it off", c), Hidden: true})
	}
}

// controllerSwitch is a deprecated boolean flag that appends to --controllers.
type controllerSwitch struct {
	o    *hub.Options
	name string
}

func (c *controllerSwitch) String() string { return "true" }
func (c *controllerSwitch) Type() string   { return "bool" }
func (c *controllerSwitch) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	item := c.name
	if !on {
		item = "-" + item
	}
	c.o.Controllers += "," + item
	return nil
}

// flagGroups are the sections of `certhub run --help`, in order, with the
// flags (or name prefixes ending in "-") each holds; the rest is "Hub".
var flagGroups = []struct {
	title string
	flags []string
}{
	{"Hub", []string{"kubeconfig", "namespace", "identity", "controllers", "metrics-bind-address", "certificate-metrics", "health-probe-bind-address", "pprof-bind-address", "memory-limit-ratio"}},
	{"Inventory (Argo CD cluster Secrets)", []string{"cluster-secret-namespace", "cluster-selector", "kubeconfig-dir", "downstream-compression",
		"request-timeout", "exec-plugin-allowlist", "allow-plain-http-clusters", "allow-link-local-clusters"}},
	{"Sharding", []string{"shard-"}},
	{"Certificates", []string{"issuer-retry-interval", "concurrent-workers", "concurrent-workers-per-cluster", "reconcile-timeout", "renewal-jitter", "max-names-per-certificate",
		"loop-max-issuances", "loop-window"}},
	{"Issuance policy", []string{"default-policy"}},
	{"Issuance budget", []string{"issuance-rate", "issuance-reserve", "max-budget-delay"}},
	{"ACME", []string{"acme-", "cluster-issuer-ambient-credentials"}},
	{"Trust bundles", []string{"trust-bundle-"}},
	{"CA rotation", []string{"rotation-"}},
	{"Discovery", []string{"discovery-"}},
	{"DR pairs", []string{"standby-pair-"}},
	{"Revocation", []string{"revocation-", "crl-"}},
	{"Record of issued certificates", []string{"issued-"}},
	{"Ingress and Gateway shims", []string{"default-issuer-", "auto-certificate-annotations"}},
	{"Logging", []string{"zap-"}},
}

// groupOf is the section of flag name.
func groupOf(name string) string {
	for _, g := range flagGroups {
		for _, f := range g.flags {
			if name == f || (strings.HasSuffix(f, "-") && strings.HasPrefix(name, f)) {
				return g.title
			}
		}
	}
	return flagGroups[0].title
}

// groupedUsage prints cmd's usage with its flags by section.
func groupedUsage(cmd *cobra.Command) error {
	w := cmd.OutOrStderr()
	fmt.Fprintf(w, "Usage:\n  %s\n", cmd.UseLine())
	for _, g := range flagGroups {
		set := pflag.NewFlagSet(g.title, pflag.ContinueOnError)
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && groupOf(f.Name) == g.title {
				set.AddFlag(f)
			}
		})
		if set.HasFlags() {
			printSection(w, g.title, set)
		}
	}
	return nil
}

func printSection(w io.Writer, title string, set *pflag.FlagSet) {
	fmt.Fprintf(w, "\n%s flags:\n%s", title, set.FlagUsages())
}
