package regcheck

import (
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/certhub/certhub/internal/inventory"
)

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

// clusterLabels are a registration's labels as Argo CD gives them to its
// Cluster: all but the secret-type label (nil when none is left).
func clusterLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if k != inventory.SecretTypeLabel {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// connectionOf is the Connection registration s (read from file) turns into.
func connectionOf(file string, s *corev1.Secret, c *inventory.Cluster) Connection {
	cfg := c.Config
	conn := Connection{File: file, Secret: s.Namespace + "/" + s.Name, Name: c.Name, Host: cfg.Host, Username: cfg.Username,
		Password: cfg.Password, BearerToken: cfg.BearerToken, Insecure: cfg.Insecure, ServerName: cfg.ServerName,
		CAData: cfg.CAData, CertData: cfg.CertData, KeyData: cfg.KeyData, DisableCompression: cfg.DisableCompression,
		Namespaces: c.Namespaces, Labels: clusterLabels(s.Labels)}
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
