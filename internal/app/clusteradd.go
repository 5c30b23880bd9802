package app

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
)

// DefaultTokenDuration is the lifetime of the token `certhub cluster add`
// mints: short enough that a leaked registration does not stay useful for
// long, long enough for a quarterly rotation.
const DefaultTokenDuration = 90 * 24 * time.Hour

type clusterAddOptions struct {
	kubeconfig, context, name, argoNamespace, output, labels string
	namespaces                                               []string
	tokenDuration                                            time.Duration
	// format is formatSecret or formatExternalSecret; the store fields are
	// for the latter.
	format, secretStore, storeKind, remoteKey string
}

// Output formats of `certhub cluster add`.
const (
	formatSecret         = "secret"
	formatExternalSecret = "external-secret"
)

func newClusterAddCommand() *cobra.Command {
	o := clusterAddOptions{argoNamespace: hub.DefaultClusterSecretNamespace, tokenDuration: DefaultTokenDuration, format: formatSecret, storeKind: "SecretStore"}
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Give the hub access to a cluster and write its Argo CD cluster Secret for Git",
		Long: `Create, in the cluster the kubeconfig/context points at, the hub's
ServiceAccount (certhub-system/certhub-hub) with the least-privilege RBAC of
kustomize/downstream (a ClusterRole, or with --namespaces a Role in each), mint
a token for it (TokenRequest, --token-duration), and write the Argo CD cluster
Secret that registers the cluster, ready to commit. The token is a credential:
encrypt the file (SOPS, Sealed Secrets) or deliver it with External Secrets.

The token lives 90 days by default (--token-duration). Rotate it before then:
run 'certhub cluster add' again (it is idempotent for the ServiceAccount and
RBAC and mints a fresh token) and commit the new Secret, or put the new token
into the secret store; the hub picks up changed credentials without a restart.
Old tokens stay valid until they expire; to revoke one at once, delete and
recreate the ServiceAccount certhub-system/certhub-hub.

--format external-secret writes no credential to the file: an External Secrets
Operator ExternalSecret (external-secrets.io/v1) whose template yields exactly
the cluster Secret, with the token and the CA taken from the secret store
--secret-store (kind --store-kind) under --remote-key, properties "token" and
"caData". The values to put into the store are printed on standard error.`,
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
	f.DurationVar(&o.tokenDuration, "token-duration", o.tokenDuration, "Lifetime of the minted token (rotate before it ends: run this again)")
	f.StringVarP(&o.output, "output", "o", "-", "Write the Secret manifest to this file (- for stdout)")
	f.StringVar(&o.format, "format", o.format, "secret (a cluster Secret holding the token) or external-secret (an ExternalSecret: the token stays in a secret store)")
	f.StringVar(&o.secretStore, "secret-store", o.secretStore, "With --format external-secret: the name of the SecretStore or ClusterSecretStore holding the token")
	f.StringVar(&o.storeKind, "store-kind", o.storeKind, "With --format external-secret: SecretStore or ClusterSecretStore")
	f.StringVar(&o.remoteKey, "remote-key", o.remoteKey, "With --format external-secret: the key in the store (default certhub/clusters/NAME)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func clusterAdd(cmd *cobra.Command, out io.Writer, o clusterAddOptions) error {
	ctx := cmd.Context()
	switch o.format {
	case formatSecret:
	case formatExternalSecret:
		if o.secretStore == "" {
			return fmt.Errorf("--format external-secret needs --secret-store")
		}
		if o.storeKind != "SecretStore" && o.storeKind != "ClusterSecretStore" {
			return fmt.Errorf("--store-kind %q must be SecretStore or ClusterSecretStore", o.storeKind)
		}
		if o.remoteKey == "" {
			o.remoteKey = "certhub/clusters/" + o.name
		}
	default:
		return fmt.Errorf("--format %q must be %s or %s", o.format, formatSecret, formatExternalSecret)
	}
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
	s, err := inventory.NewSecret(o.argoNamespace, inventory.SecretName(o.name), o.name, cfg.Host,
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
	if o.format == formatExternalSecret {
		return writeExternalSecret(out, cmd.ErrOrStderr(), o, s, token, caData)
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

// writeExternalSecret writes an ExternalSecret whose target template yields
// the cluster Secret s with the token and CA taken from the store, and prints
// the store values on errOut.
func writeExternalSecret(out, errOut io.Writer, o clusterAddOptions, s *corev1.Secret, token string, caData []byte) error {
	tls := map[string]any{"insecure": false}
	if len(caData) > 0 {
		tls["caData"] = "{{ .caData }}"
	}
	cc := map[string]any{"bearerToken": "{{ .token }}", "tlsClientConfig": tls}
	config, err := json.Marshal(cc)
	if err != nil {
		return err
	}
	data := map[string]string{"config": string(config)}
	for k, v := range s.Data {
		if k != "config" {
			data[k] = string(v)
		}
	}
	remote := []map[string]any{{"secretKey": "token", "remoteRef": map[string]any{"key": o.remoteKey, "property": "token"}}}
	if len(caData) > 0 {
		remote = append(remote, map[string]any{"secretKey": "caData", "remoteRef": map[string]any{"key": o.remoteKey, "property": "caData"}})
	}
	es := map[string]any{
		"apiVersion": "external-secrets.io/v1",
		"kind":       "ExternalSecret",
		"metadata":   map[string]any{"name": s.Name, "namespace": s.Namespace},
		"spec": map[string]any{
			"refreshInterval": "1h",
			"secretStoreRef":  map[string]any{"name": o.secretStore, "kind": o.storeKind},
			"target": map[string]any{
				"name":           s.Name,
				"creationPolicy": "Owner",
				"template": map[string]any{
					"engineVersion": "v2",
					"type":          string(corev1.SecretTypeOpaque),
					"metadata":      map[string]any{"labels": s.Labels},
					"data":          data,
				},
			},
			"data": remote,
		},
	}
	raw, err := yaml.Marshal(es)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "# External Secrets Operator ExternalSecret for cluster %q, written by `certhub cluster add`.\n", o.name)
	fmt.Fprintf(out, "# It holds no credential: the token and CA come from %s %q, key %q.\n", o.storeKind, o.secretStore, o.remoteKey)
	fmt.Fprintf(out, "# Check it with: certhub cluster validate FILE\n")
	if _, err := out.Write(raw); err != nil {
		return err
	}
	fmt.Fprintf(errOut, "Put these values into %s %q under key %q (the token expires in %s):\n", o.storeKind, o.secretStore, o.remoteKey, o.tokenDuration)
	fmt.Fprintf(errOut, "  token=%s\n", token)
	if len(caData) > 0 {
		fmt.Fprintf(errOut, "  caData=%s\n", base64.StdEncoding.EncodeToString(caData))
	}
	return nil
}
