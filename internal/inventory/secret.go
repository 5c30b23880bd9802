package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// The Argo CD cluster Secret format (argo-cd util/db/cluster.go).
const (
	// SecretTypeLabel marks Argo CD cluster Secrets.
	SecretTypeLabel = "argocd.argoproj.io/secret-type"
	// SecretTypeCluster is SecretTypeLabel's value for cluster Secrets.
	SecretTypeCluster = "cluster"

	keyName             = "name"
	keyServer           = "server"
	keyConfig           = "config"
	keyNamespaces       = "namespaces"
	keyClusterResources = "clusterResources"
	keyProject          = "project"
	keyShard            = "shard"
)

// ClusterConfig is the JSON in a cluster Secret's `config` key, as Argo CD
// defines it (v1alpha1.ClusterConfig). []byte fields are base64 in JSON.
type ClusterConfig struct {
	Username           string              `json:"username,omitempty"`
	Password           string              `json:"password,omitempty"`
	BearerToken        string              `json:"bearerToken,omitempty"`
	TLSClientConfig    TLSClientConfig     `json:"tlsClientConfig"`
	AWSAuthConfig      *AWSAuthConfig      `json:"awsAuthConfig,omitempty"`
	ExecProviderConfig *ExecProviderConfig `json:"execProviderConfig,omitempty"`
	DisableCompression bool                `json:"disableCompression,omitempty"`
	ProxyURL           string              `json:"proxyUrl,omitempty"`
}

// AWSAuthConfig mirrors Argo CD's: EKS authentication through
// `argocd-k8s-auth aws`, which must then be on the hub's PATH.
type AWSAuthConfig struct {
	ClusterName string `json:"clusterName,omitempty"`
	RoleARN     string `json:"roleARN,omitempty"`
	Profile     string `json:"profile,omitempty"`
}

// ExecProviderConfig mirrors Argo CD's exec credential plugin settings.
type ExecProviderConfig struct {
	Command            string            `json:"command,omitempty"`
	Args               []string          `json:"args,omitempty"`
	Env                map[string]string `json:"env,omitempty"`
	APIVersion         string            `json:"apiVersion,omitempty"`
	InstallHint        string            `json:"installHint,omitempty"`
	ProvideClusterInfo bool              `json:"provideClusterInfo,omitempty"`
	Config             json.RawMessage   `json:"config,omitempty"`
}

// InClusterServer is the API server address Argo CD means by "the cluster I run in".
const InClusterServer = "https://kubernetes.default.svc"

// TLSClientConfig mirrors Argo CD's TLSClientConfig.
type TLSClientConfig struct {
	Insecure   bool   `json:"insecure"`
	ServerName string `json:"serverName,omitempty"`
	CertData   []byte `json:"certData,omitempty"`
	KeyData    []byte `json:"keyData,omitempty"`
	CAData     []byte `json:"caData,omitempty"`
}

// Cluster is a parsed cluster Secret.
type Cluster struct {
	// Name is the cluster's name (data.name), the multicluster ClusterName.
	Name string
	// Server is the API server URL with any trailing "/" trimmed.
	Server string
	// Config is the client configuration for the cluster.
	Config *rest.Config
	// Hash identifies the connection data; a change means re-engage.
	Hash string
	// Namespaces, when set, limits the hub to these namespaces of the cluster
	// (data.namespaces, comma-separated), as Argo CD does.
	Namespaces []string
	// ClusterResources is data.clusterResources ("true").
	ClusterResources bool
	// Project is data.project (an Argo CD project-scoped cluster).
	Project string
	// Shard is data.shard for Argo CD's controller sharding, nil when absent
	// or not an integer. certhub's own sharding does not use it.
	Shard *int
	// InCluster is true for the in-cluster server (InClusterServer): the
	// connection uses the hub's own ServiceAccount. From ValidateSecret,
	// Config holds only what the Secret says (Host and any credentials that
	// override the ServiceAccount's).
	InCluster bool
	// Labels are the cluster Secret's labels (issuance policies select
	// clusters by them); nil for kubeconfig files. Not part of Hash.
	Labels map[string]string
	// Warnings are consequences of the registration its author may not
	// expect (a remote server without config is reached anonymously).
	Warnings []string
}

// FieldError says which field of a cluster Secret is wrong.
type FieldError struct {
	// Field is the data key or JSON path, e.g. "server" or "config.tlsClientConfig.caData".
	Field string
	// Reason says what is wrong with it.
	Reason string
	Err    error
}

func (e *FieldError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("invalid cluster Secret field %s: %s: %v", e.Field, e.Reason, e.Err)
	}
	return fmt.Sprintf("invalid cluster Secret field %s: %s", e.Field, e.Reason)
}

func (e *FieldError) Unwrap() error { return e.Err }

// ParseSecret converts an Argo CD cluster Secret into a Cluster, or returns a
// *FieldError naming the offending field. The in-cluster server is resolved
// with this process's ServiceAccount, so it fails outside a cluster.
func ParseSecret(s *corev1.Secret) (*Cluster, error) {
	return parseSecret(s, rest.InClusterConfig)
}

// ValidateSecret checks a cluster Secret as ParseSecret does, offline: the
// in-cluster server is valid anywhere and left to be resolved at run time
// (Cluster.InCluster). For `certhub cluster validate` in CI.
func ValidateSecret(s *corev1.Secret) (*Cluster, error) {
	return parseSecret(s, nil)
}

// parseSecret parses s; inCluster resolves Argo CD's in-cluster server
// (nil: offline, left unresolved).
func parseSecret(s *corev1.Secret, inCluster func() (*rest.Config, error)) (*Cluster, error) {
	if s.Labels[SecretTypeLabel] != SecretTypeCluster {
		return nil, &FieldError{Field: "metadata.labels[" + SecretTypeLabel + "]", Reason: "must be \"cluster\""}
	}
	server := strings.TrimRight(string(s.Data[keyServer]), "/")
	if server == "" {
		return nil, &FieldError{Field: keyServer, Reason: "is required"}
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, &FieldError{Field: keyServer, Reason: "must be an http(s) URL with a host", Err: err}
	}
	name := string(s.Data[keyName])
	var warnings []string
	if strings.ContainsFunc(name, unicode.IsControl) {
		// No real name holds one, and the hub's work queue uses a NUL-named
		// sentinel cluster (internal/fairqueue).
		return nil, &FieldError{Field: keyName, Reason: fmt.Sprintf("%q must not contain control characters", name)}
	}
	if name == "" {
		name = server // Argo CD's CLI falls back to the server URL
	} else if why := hubapi.UnsafeClusterName(name); why != "" {
		// Argo CD accepts any name ("mycluster.example.com" in its own
		// examples), so the hub serves it; only {{cluster}} in an
		// IssuancePolicy pattern, which would put it into DNS names where
		// it could cover another cluster's, matches it never.
		warnings = append(warnings, fmt.Sprintf("name %q %s: served, but no IssuancePolicy pattern with {{cluster}} matches it", name, why))
	}
	// config is optional, as in Argo CD's SecretToCluster, which reads it
	// only when present: the in-cluster server needs none, and a remote
	// server without one is reached without credentials.
	rawConfig := s.Data[keyConfig]
	var cc ClusterConfig
	if len(rawConfig) > 0 {
		if err := json.Unmarshal(rawConfig, &cc); err != nil {
			return nil, &FieldError{Field: keyConfig, Reason: "is not valid JSON for Argo CD's ClusterConfig", Err: err}
		}
	}
	cfg, err := restConfig(server, &cc, inCluster)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, Server: server, Config: cfg, Project: string(s.Data[keyProject]),
		ClusterResources: string(s.Data[keyClusterResources]) == "true", InCluster: server == InClusterServer, Labels: s.Labels, Warnings: warnings}
	if len(rawConfig) == 0 && !c.InCluster {
		c.Warnings = append(c.Warnings, fmt.Sprintf("no config: the hub connects to %s anonymously (no credentials; TLS verified against the system roots), as Argo CD would", server))
	}
	for _, ns := range strings.Split(string(s.Data[keyNamespaces]), ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			c.Namespaces = append(c.Namespaces, ns)
		}
	}
	if raw := strings.TrimSpace(string(s.Data[keyShard])); raw != "" {
		if n, err := strconv.Atoi(raw); err == nil {
			c.Shard = &n
		}
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(server), rawConfig, s.Data[keyNamespaces], s.Data[keyClusterResources]} {
		h.Write(part)
		h.Write([]byte{0})
	}
	c.Hash = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// restConfig converts the config the way Argo CD's (*Cluster).RawRestConfig
// does: AWS auth becomes an exec of `argocd-k8s-auth aws`, an exec provider
// config becomes an ExecConfig (env map → list, config → runtime.Unknown),
// both ignoring username/password/token; the in-cluster server uses the
// pod's service account (with username/password/token overriding it); then
// the proxy and disableCompression apply. QPS, burst and timeouts are the
// hub's own settings and are applied by the Provider.
func restConfig(server string, cc *ClusterConfig, inCluster func() (*rest.Config, error)) (*rest.Config, error) {
	tls := cc.TLSClientConfig
	if len(tls.CAData) > 0 {
		if err := checkPEM(tls.CAData, "CERTIFICATE"); err != nil {
			return nil, &FieldError{Field: "config.tlsClientConfig.caData", Reason: "is not a PEM certificate", Err: err}
		}
	}
	if (len(tls.CertData) > 0) != (len(tls.KeyData) > 0) {
		return nil, &FieldError{Field: "config.tlsClientConfig.certData", Reason: "certData and keyData must be set together"}
	}
	if len(tls.CertData) > 0 {
		if err := checkPEM(tls.CertData, "CERTIFICATE"); err != nil {
			return nil, &FieldError{Field: "config.tlsClientConfig.certData", Reason: "is not a PEM certificate", Err: err}
		}
		if err := checkPEM(tls.KeyData, ""); err != nil {
			return nil, &FieldError{Field: "config.tlsClientConfig.keyData", Reason: "is not a PEM key", Err: err}
		}
	}
	tlsConfig := rest.TLSClientConfig{Insecure: tls.Insecure, ServerName: tls.ServerName, CertData: tls.CertData, KeyData: tls.KeyData, CAData: tls.CAData}

	var cfg *rest.Config
	switch {
	case server == InClusterServer:
		ic := &rest.Config{Host: InClusterServer}
		if inCluster != nil {
			var err error
			if ic, err = inCluster(); err != nil {
				return nil, &FieldError{Field: keyServer, Reason: "is the in-cluster address, but certhub is not running in a cluster", Err: err}
			}
			ic = rest.CopyConfig(ic)
		}
		if cc.Username != "" || cc.Password != "" || cc.BearerToken != "" {
			// The Secret's credentials replace the hub's (Argo CD overrides
			// the ServiceAccount token the same way): no client certificate
			// or plugin of the hub's own connection is kept beside them.
			ic.Username, ic.Password, ic.BearerToken, ic.BearerTokenFile = cc.Username, cc.Password, cc.BearerToken, ""
			ic.CertData, ic.KeyData, ic.CertFile, ic.KeyFile, ic.ExecProvider, ic.AuthProvider = nil, nil, "", "", nil, nil
		}
		cfg = ic
	case cc.AWSAuthConfig != nil:
		args := []string{"aws", "--cluster-name", cc.AWSAuthConfig.ClusterName}
		if cc.AWSAuthConfig.RoleARN != "" {
			args = append(args, "--role-arn", cc.AWSAuthConfig.RoleARN)
		}
		if cc.AWSAuthConfig.Profile != "" {
			args = append(args, "--profile", cc.AWSAuthConfig.Profile)
		}
		cfg = &rest.Config{Host: server, TLSClientConfig: tlsConfig, ExecProvider: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1beta1", Command: "argocd-k8s-auth", Args: args,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}}
	case cc.ExecProviderConfig != nil:
		e := cc.ExecProviderConfig
		if e.Command == "" {
			return nil, &FieldError{Field: "config.execProviderConfig.command", Reason: "is required"}
		}
		exec := &clientcmdapi.ExecConfig{APIVersion: e.APIVersion, Command: e.Command, Args: e.Args, InstallHint: e.InstallHint,
			ProvideClusterInfo: e.ProvideClusterInfo, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		for k, v := range e.Env {
			exec.Env = append(exec.Env, clientcmdapi.ExecEnvVar{Name: k, Value: v})
		}
		sort.Slice(exec.Env, func(i, j int) bool { return exec.Env[i].Name < exec.Env[j].Name })
		if len(e.Config) > 0 {
			exec.Config = &runtime.Unknown{Raw: e.Config, ContentType: runtime.ContentTypeJSON}
		}
		cfg = &rest.Config{Host: server, TLSClientConfig: tlsConfig, ExecProvider: exec}
	default:
		cfg = &rest.Config{Host: server, Username: cc.Username, Password: cc.Password, BearerToken: cc.BearerToken, TLSClientConfig: tlsConfig}
	}
	if cc.ProxyURL != "" {
		u, err := url.Parse(cc.ProxyURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5") {
			return nil, &FieldError{Field: "config.proxyUrl", Reason: "must be an http, https or socks5 URL", Err: err}
		}
		cfg.Proxy = http.ProxyURL(u)
	}
	cfg.DisableCompression = cc.DisableCompression
	return cfg, nil
}

var errNoPEM = errors.New("no PEM block found")

// checkPEM reports whether data holds at least one PEM block, of blockType
// when it is not empty.
func checkPEM(data []byte, blockType string) error {
	block, _ := pem.Decode(data)
	if block == nil {
		return errNoPEM
	}
	if blockType != "" && block.Type != blockType {
		return fmt.Errorf("PEM block is %q, want %q", block.Type, blockType)
	}
	return nil
}

// SecretName is the object name of the cluster Secret registering
// cluster: "cluster-<name>" when that is a valid Secret name, else the
// name lower-cased with every other character a '-' and a hash of the
// cluster name appended, so that "Prod-EU" and "prod-eu" get two Secrets
// (Argo CD's CLI likewise names Secrets after a hash of the server).
func SecretName(cluster string) string {
	name := "cluster-" + cluster
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	b := []byte(strings.ToLower(cluster))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-.")
	if len(s) > 200 {
		s = strings.Trim(s[:200], "-.")
	}
	sum := sha256.Sum256([]byte(cluster))
	if s == "" {
		return "cluster-" + hex.EncodeToString(sum[:5])
	}
	return "cluster-" + s + "-" + hex.EncodeToString(sum[:5])
}

// NewSecret encodes a cluster registration as the Argo CD cluster Secret
// that ParseSecret reads back: the form committed to Git.
func NewSecret(namespace, secretName, clusterName, server string, cc ClusterConfig) (*corev1.Secret, error) {
	raw, err := json.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("failed to encode cluster config: %w", err)
	}
	s := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      secretName,
			Namespace: namespace,
			Labels:    map[string]string{SecretTypeLabel: SecretTypeCluster},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			keyName:   []byte(clusterName),
			keyServer: []byte(strings.TrimRight(server, "/")),
			keyConfig: raw,
		},
	}
	return s, nil
}
