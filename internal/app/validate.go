package app

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/regcheck"
)

type validateOptions struct {
	namespace, selector, output string
	strict, show                bool
}

func newValidateCommand() *cobra.Command {
	o := validateOptions{namespace: hub.DefaultClusterSecretNamespace, output: "text"}
	cmd := &cobra.Command{
		Use:   "validate FILE|DIR|-...",
		Short: "Check cluster registrations offline, as the API server and Argo CD would take them (for CI and pre-commit)",
		Long: `Check every cluster registration in the given YAML/JSON files, directories
(*.yaml, *.yml, *.json, recursively) or standard input (-, e.g.
kustomize build overlays/prod | certhub cluster validate -):

  - decoded as the API server decodes a Secret: data values base64, stringData
    values strings (an unquoted shard: 1 is refused, as kubectl apply is),
    no unknown fields, a DNS-1123 name; a namespace other than
    --cluster-secret-namespace is a warning;
  - converted as Argo CD converts it: the argocd.argoproj.io/secret-type=cluster
    label, name/server and the optional config, the config JSON, decodable CA
    and client certificates, the server URL. The in-cluster server
    (https://kubernetes.default.svc) is valid offline, config or not: it is
    the cluster the hub reads its Secrets from. A remote server without config
    is valid with a warning (the hub connects anonymously, as Argo CD would);
  - a Secret that looks meant as a registration but that Argo CD and the hub
    ignore is an error naming the fix: a near-miss argocd.argoproj.io/secret-type
    label key or value, the label under annotations, or name/server/config
    keys without the label. Other Secrets are not reported;
  - across all inputs: two registrations naming one cluster, two Secrets with
    one name, a --cluster-selector that selects none of them.

SOPS-encrypted Secrets (ENC[...] values) and SealedSecrets are checked for
structure only (label, keys), as are External Secrets Operator ExternalSecrets
that template a cluster Secret (their config is rendered with placeholder
values and must be JSON).

One line per object: FILE:LINE: ok|warning|error: Kind namespace/name: message.
-o json prints the findings as a JSON array (for CI annotations). Exits
non-zero on any error, and with --strict on any warning.
--show-connection prints each plain registration's resulting connection as
JSON instead (it includes the credentials).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runValidate(cmd, args, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.namespace, "cluster-secret-namespace", o.namespace, "Namespace the hub reads cluster Secrets from; registrations setting another are warned about")
	f.StringVar(&o.selector, "cluster-selector", o.selector, "The hub's --cluster-selector: say which registrations it selects, and warn when it selects none")
	f.BoolVar(&o.strict, "strict", false, "Treat warnings as errors")
	f.StringVarP(&o.output, "output", "o", o.output, "text or json")
	f.BoolVar(&o.show, "show-connection", false, "Print each registration's resulting connection as JSON (includes credentials)")
	return cmd
}

func runValidate(cmd *cobra.Command, args []string, o validateOptions) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q must be text or json", o.output)
	}
	opts := regcheck.CheckOptions{Namespace: o.namespace}
	if o.selector != "" {
		sel, err := labels.Parse(o.selector)
		if err != nil {
			return fmt.Errorf("--cluster-selector: %w", err)
		}
		opts.Selector = sel
	}
	v := regcheck.NewChecker(opts)
	for _, arg := range args {
		if err := eachInput(cmd.InOrStdin(), arg, v.File); err != nil {
			v.Add(regcheck.Finding{File: arg, Severity: regcheck.SeverityError, Message: err.Error()})
		}
	}
	v.Finish(strings.Join(args, ","))
	out := cmd.OutOrStdout()
	switch {
	case o.show:
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v.Connections()); err != nil {
			return err
		}
	case o.output == "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v.Findings()); err != nil {
			return err
		}
	default:
		for _, f := range v.Findings() {
			fmt.Fprintln(out, f)
		}
	}
	errs, warns := v.Counts()
	if errs > 0 || (o.strict && warns > 0) {
		return fmt.Errorf("%d error(s), %d warning(s) in cluster registrations", errs, warns)
	}
	return nil
}

// eachInput calls fn with the file arg names: a file, a directory (its
// *.yaml, *.yml and *.json files, recursively, sorted) or "-" (stdin).
func eachInput(stdin io.Reader, arg string, fn func(name string, raw []byte)) error {
	if arg == "-" {
		raw, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("failed to read standard input: %w", err)
		}
		fn("-", raw)
		return nil
	}
	st, err := os.Stat(arg)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		raw, err := os.ReadFile(arg)
		if err != nil {
			return err
		}
		fn(arg, raw)
		return nil
	}
	var files []string
	err = filepath.WalkDir(arg, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				files = append(files, p)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fn(f, raw)
	}
	return nil
}
