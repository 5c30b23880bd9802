package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The Argo CD cluster Secret format (argo-cd util/db/cluster.go).
const (
	// SecretTypeLabel marks Argo CD cluster Secrets.
	SecretTypeLabel = "argocd.argoproj.io/secret-type"
	// SecretTypeCluster is SecretTypeLabel's value for cluster Secrets.
	SecretTypeCluster = "cluster"

	keyName   = "name"
	keyServer = "server"
	keyConfig = "config"
)

// ClusterConfig is the JSON in a cluster Secret's `config` key, as Argo CD
// defines it (v1alpha1.ClusterConfig). []byte fields are base64 in JSON.
type ClusterConfig struct {
	Username           string           `json:"username,omitempty"`
	Password           string           `json:"password,omitempty"`
	BearerToken        string           `json:"bearerToken,omitempty"`
	TLSClientConfig    TLSClientConfig  `json:"tlsClientConfig"`
	AWSAuthConfig      *json.RawMessage `json:"awsAuthConfig,omitempty"`
	ExecProviderConfig *json.RawMessage `json:"execProviderConfig,omitempty"`
	DisableCompression bool             `json:"disableCompression,omitempty"`
	ProxyURL           string           `json:"proxyUrl,omitempty"`
}

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
// *FieldError naming the offending field.
func ParseSecret(s *corev1.Secret) (*Cluster, error) {
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
	if name == "" {
		name = server // Argo CD's CLI falls back to the server URL
	}
	rawConfig := s.Data[keyConfig]
	if len(rawConfig) == 0 {
		return nil, &FieldError{Field: keyConfig, Reason: "is required"}
	}
	var cc ClusterConfig
	if err := json.Unmarshal(rawConfig, &cc); err != nil {
		return nil, &FieldError{Field: keyConfig, Reason: "is not valid JSON for Argo CD's ClusterConfig", Err: err}
	}
	cfg, err := restConfig(server, &cc)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte(server))
	h.Write([]byte{0})
	h.Write(rawConfig)
	return &Cluster{Name: name, Server: server, Config: cfg, Hash: hex.EncodeToString(h.Sum(nil))}, nil
}

func restConfig(server string, cc *ClusterConfig) (*rest.Config, error) {
	if cc.ExecProviderConfig != nil {
		return nil, &FieldError{Field: "config.execProviderConfig", Reason: "is not supported yet"}
	}
	if cc.AWSAuthConfig != nil {
		return nil, &FieldError{Field: "config.awsAuthConfig", Reason: "is not supported yet"}
	}
	if cc.ProxyURL != "" {
		return nil, &FieldError{Field: "config.proxyUrl", Reason: "is not supported yet"}
	}
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
	if cc.BearerToken == "" && cc.Username == "" && len(tls.CertData) == 0 {
		return nil, &FieldError{Field: "config", Reason: "has no credentials: set bearerToken, username/password or tlsClientConfig.certData/keyData"}
	}
	return &rest.Config{
		Host:               server,
		Username:           cc.Username,
		Password:           cc.Password,
		BearerToken:        cc.BearerToken,
		DisableCompression: cc.DisableCompression,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   tls.Insecure,
			ServerName: tls.ServerName,
			CertData:   tls.CertData,
			KeyData:    tls.KeyData,
			CAData:     tls.CAData,
		},
	}, nil
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
