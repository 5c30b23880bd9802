package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/inventory"
)

func newClusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Work with cluster registrations (Argo CD cluster Secrets) for Git",
	}
	cmd.AddCommand(newClusterAddCommand(), newValidateCommand())
	return cmd
}

// Connection is what a registration turns into, as `certhub cluster validate
// --show-connection` prints it (credentials included: the flag is for
// debugging and conformance checks).
type Connection struct {
	File               string            `json:"file"`
	Secret             string            `json:"secret"`
	Name               string            `json:"name"`
	Host               string            `json:"host"`
	Username           string            `json:"username,omitempty"`
	Password           string            `json:"password,omitempty"`
	BearerToken        string            `json:"bearerToken,omitempty"`
	Insecure           bool              `json:"insecure,omitempty"`
	ServerName         string            `json:"serverName,omitempty"`
	CAData             []byte            `json:"caData,omitempty"`
	CertData           []byte            `json:"certData,omitempty"`
	KeyData            []byte            `json:"keyData,omitempty"`
	Exec               *ExecConnection   `json:"exec,omitempty"`
	ProxyURL           string            `json:"proxyURL,omitempty"`
	DisableCompression bool              `json:"disableCompression,omitempty"`
	Namespaces         []string          `json:"namespaces,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
}

// ExecConnection is the exec credential plugin part of a Connection.
type ExecConnection struct {
	Command            string   `json:"command"`
	Args               []string `json:"args,omitempty"`
	Env                []string `json:"env,omitempty"`
	APIVersion         string   `json:"apiVersion,omitempty"`
	InstallHint        string   `json:"installHint,omitempty"`
	ProvideClusterInfo bool     `json:"provideClusterInfo,omitempty"`
	InteractiveMode    string   `json:"interactiveMode,omitempty"`
	Config             string   `json:"config,omitempty"`
}

func newValidateCommand() *cobra.Command {
	var show bool
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check Argo CD cluster Secret manifests offline (for CI and pre-commit)",
		Long: `Check every Secret in the given YAML files as certhub would read it: the
argocd.argoproj.io/secret-type=cluster label, the name/server/config keys, the
config JSON, decodable CA/client certificates, the server URL. Prints one line
per Secret and exits non-zero if any is invalid. --show-connection prints the
resulting connection as JSON instead (it includes the credentials).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			var conns []Connection
			var bad int
			for _, f := range files {
				n, cs, err := validateFile(cmd.OutOrStdout(), f, !show)
				bad += n
				conns = append(conns, cs...)
				if err != nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %v\n", f, err)
					bad++
				}
			}
			if show {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(conns); err != nil {
					return err
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d invalid cluster registration(s)", bad)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&show, "show-connection", false, "Print each registration's resulting connection as JSON (includes credentials)")
	return cmd
}

// validateFile checks every Secret document in path; it returns the number of invalid ones.
func validateFile(out io.Writer, path string, report bool) (int, []Connection, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var bad int
	var conns []Connection
	for doc := 1; ; doc++ {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return bad, conns, fmt.Errorf("document %d is not YAML: %w", doc, err)
		}
		if obj == nil || obj["kind"] != "Secret" {
			continue
		}
		s, err := secretFromYAML(obj)
		if err != nil {
			bad++
			fmt.Fprintf(out, "%s: document %d: %v\n", path, doc, err)
			continue
		}
		c, err := inventory.ParseSecret(s)
		if err != nil {
			bad++
			fmt.Fprintf(out, "%s: Secret %s/%s: %v\n", path, s.Namespace, s.Name, err)
			continue
		}
		if report {
			fmt.Fprintf(out, "%s: Secret %s/%s: ok (cluster %q at %s)\n", path, s.Namespace, s.Name, c.Name, c.Server)
		}
		conns = append(conns, connectionOf(path, s, c))
	}
	return bad, conns, nil
}

// secretFromYAML decodes a Secret manifest, folding stringData into data as
// the API server would.
func secretFromYAML(obj map[string]any) (*corev1.Secret, error) {
	raw, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{}
	if err := yaml.UnmarshalStrict(raw, s); err != nil {
		return nil, fmt.Errorf("not a valid Secret: %w", err)
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	return s, nil
}

func connectionOf(file string, s *corev1.Secret, c *inventory.Cluster) Connection {
	cfg := c.Config
	conn := Connection{File: file, Secret: s.Namespace + "/" + s.Name, Name: c.Name, Host: cfg.Host, Username: cfg.Username,
		Password: cfg.Password, BearerToken: cfg.BearerToken, Insecure: cfg.Insecure, ServerName: cfg.ServerName,
		CAData: cfg.CAData, CertData: cfg.CertData, KeyData: cfg.KeyData, DisableCompression: cfg.DisableCompression,
		Namespaces: c.Namespaces, Labels: s.Labels}
	if cfg.Proxy != nil {
		if u, err := cfg.Proxy(&http.Request{URL: mustURL(cfg.Host)}); err == nil && u != nil {
			conn.ProxyURL = u.String()
		}
	}
	if e := cfg.ExecProvider; e != nil {
		ec := &ExecConnection{Command: e.Command, Args: e.Args, APIVersion: e.APIVersion, InstallHint: e.InstallHint,
			ProvideClusterInfo: e.ProvideClusterInfo, InteractiveMode: string(e.InteractiveMode)}
		for _, v := range e.Env {
			ec.Env = append(ec.Env, v.Name+"="+v.Value)
		}
		if u, ok := e.Config.(*runtime.Unknown); ok && u != nil {
			ec.Config = strings.TrimSpace(string(u.Raw))
		}
		conn.Exec = ec
	}
	return conn
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{}
	}
	return u
}
