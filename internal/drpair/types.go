package drpair

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"

	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"
)

// Well-known names of the ConfigMaps in the hub namespace.
const (
	// SourcePrefix + primary is the primary's Certificates, as its owner saw them.
	SourcePrefix = "certhub-standby-source-"
	// StatusPrefix + standby is the standby's readiness, as its owner saw it.
	StatusPrefix = "certhub-standby-"
	// SourceKey holds the gzip'd JSON Source (BinaryData).
	SourceKey = "source.json.gz"
	// StatusKey holds the JSON Status.
	StatusKey = "status.json"
	// maxSourceBytes bounds the gzip'd source (a ConfigMap holds 1 MiB).
	maxSourceBytes = 900 << 10
	// maxProblems bounds the problems a Status lists.
	maxProblems = 100
)

// SourceName is the name of primary's source ConfigMap.
func SourceName(primary string) string { return SourcePrefix + sanitize.DNS1123(primary) }

// StatusName is the name of standby's status ConfigMap.
func StatusName(standby string) string { return StatusPrefix + sanitize.DNS1123(standby) }

// Entry is one Certificate of the primary.
type Entry struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Spec is the Certificate's spec, verbatim.
	Spec json.RawMessage `json:"spec"`
	// Issued: Ready at its current generation, with a leaf in its Secret;
	// only those are mirrored.
	Issued bool `json:"issued,omitempty"`
	// NotAfter and Names are the primary's leaf's (when Issued).
	NotAfter time.Time `json:"notAfter,omitzero"`
	Names    []string  `json:"names,omitempty"`
}

// Source is the primary's Certificates, as its owner read them at At.
type Source struct {
	Primary      string    `json:"primary"`
	By           string    `json:"by,omitempty"`
	At           time.Time `json:"at"`
	Certificates []Entry   `json:"certificates"`
	// Truncated counts the Certificates left out to fit; a truncated
	// source deletes nothing in the standby.
	Truncated int `json:"truncated,omitempty"`
}

// encode gzips s's JSON, halving the entries until it fits.
func (s Source) encode() ([]byte, error) {
	for {
		raw, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(raw); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		if buf.Len() <= maxSourceBytes || len(s.Certificates) == 0 {
			return buf.Bytes(), nil
		}
		keep := len(s.Certificates) / 2
		s.Truncated += len(s.Certificates) - keep
		s.Certificates = s.Certificates[:keep]
	}
}

// decodeSource reads a source written by encode.
func decodeSource(b []byte) (*Source, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("failed to read the standby source: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("failed to read the standby source: %w", err)
	}
	s := &Source{}
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("failed to decode the standby source: %w", err)
	}
	return s, nil
}

// Reasons a selected Certificate is not ready in the standby (Problem.Reason).
const (
	// ReasonPrimaryNotSeen: no source of the primary yet.
	ReasonPrimaryNotSeen = "PrimaryNotSeen"
	// ReasonNotIssuedInPrimary: not Ready in the primary, so not mirrored.
	ReasonNotIssuedInPrimary = "NotIssuedInPrimary"
	// ReasonNamespaceMissing: the namespace does not exist in the standby.
	ReasonNamespaceMissing = "NamespaceMissing"
	// ReasonMissing: no Certificate of that name in the standby (yet).
	ReasonMissing = "Missing"
	// ReasonNotIssued: its Secret holds no certificate (yet).
	ReasonNotIssued = "NotIssued"
	// ReasonNamesDiffer: the standby's certificate is for other names.
	ReasonNamesDiffer = "NamesDiffer"
	// ReasonNotValid: the standby's certificate expired or is not valid yet.
	ReasonNotValid = "NotValid"
	// ReasonExpiresFirst: it expires before the primary's and is due for renewal.
	ReasonExpiresFirst = "ExpiresFirst"
)

// Problem is one selected Certificate not ready in the standby.
type Problem struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Reason    string `json:"reason"`
	Message   string `json:"message,omitempty"`
}

// Status is a standby's readiness, as its owner saw it at At.
type Status struct {
	Standby string    `json:"standby"`
	Primary string    `json:"primary"`
	By      string    `json:"by,omitempty"`
	At      time.Time `json:"at"`
	// SourceAt is when the primary was last read (zero: never).
	SourceAt time.Time `json:"sourceAt,omitzero"`
	// Ready: every selected Certificate of the primary is ready here.
	Ready             bool           `json:"ready"`
	Selected          int            `json:"selected"`
	ReadyCertificates int            `json:"readyCertificates"`
	Reasons           map[string]int `json:"reasons,omitempty"`
	Problems          []Problem      `json:"problems,omitempty"`
}

// ReadStatuses returns every standby's status in namespace, by standby.
func ReadStatuses(ctx context.Context, c client.Reader, namespace string) (map[string]*Status, error) {
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{hubapi.StandbyStatusLabel: "true"}); err != nil {
		return nil, fmt.Errorf("failed to list the standby statuses in %s: %w", namespace, err)
	}
	out := make(map[string]*Status, len(list.Items))
	for _, cm := range list.Items {
		st := &Status{}
		if err := json.Unmarshal([]byte(cm.Data[StatusKey]), st); err != nil {
			return nil, fmt.Errorf("failed to decode %s/%s: %w", cm.Namespace, cm.Name, err)
		}
		out[st.Standby] = st
	}
	return out, nil
}
