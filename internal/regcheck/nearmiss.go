package regcheck

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/certhub/certhub/internal/inventory"
)

// argoSecretTypes are the values Argo CD gives its secret-type label
// (common.LabelValueSecretType*): a Secret with one of them but "cluster"
// is a repository Secret, not a near miss.
var argoSecretTypes = []string{"cluster", "repository", "repo-creds", "repository-write", "repo-write-creds", "scm-creds"}

// nearMiss says why a Secret without the cluster label looks meant as a
// cluster registration that Argo CD and the hub will silently ignore, and
// how to fix it; "" when it does not (an unrelated Secret stays silent).
// The heuristic, from Argo CD's label constants:
//   - the label key argocd.argoproj.io/secret-type with a value Argo CD
//     does not know (a misspelt "cluster");
//   - a label key close to it (edit distance ≤ 3, case and punctuation
//     ignored);
//   - the label, or a key close to it, under annotations;
//   - no such label, but data/stringData holding an http(s) server URL and a
//     name or config, the shape of a registration.
func nearMiss(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	lbls, _ := meta["labels"].(map[string]any)
	anns, _ := meta["annotations"].(map[string]any)
	want := fmt.Sprintf("set the label %s: %s", inventory.SecretTypeLabel, inventory.SecretTypeCluster)
	if v, ok := lbls[inventory.SecretTypeLabel]; ok {
		s, _ := v.(string)
		if slices.Contains(argoSecretTypes, s) {
			return "" // cluster is handled by the caller; the rest are repository Secrets
		}
		return fmt.Sprintf("label %s has the value %q, which Argo CD does not know: Argo CD and the hub ignore this Secret; %s", inventory.SecretTypeLabel, s, want)
	}
	for k := range lbls {
		if nearKey(k) {
			return fmt.Sprintf("label %q is not Argo CD's %s: Argo CD and the hub ignore this Secret; %s", k, inventory.SecretTypeLabel, want)
		}
	}
	for k := range anns {
		if k == inventory.SecretTypeLabel || nearKey(k) {
			return fmt.Sprintf("%q is set as an annotation, and Argo CD selects cluster Secrets by label: Argo CD and the hub ignore this Secret; %s (under metadata.labels)", k, want)
		}
	}
	keys := registrationKeys(obj)
	if u, err := url.Parse(keys["server"]); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
		if _, named := keys["name"]; named {
			return "holds name and server like a cluster registration, but has no label " + inventory.SecretTypeLabel + ": Argo CD and the hub ignore it; " + want
		}
		if _, configured := keys["config"]; configured {
			return "holds server and config like a cluster registration, but has no label " + inventory.SecretTypeLabel + ": Argo CD and the hub ignore it; " + want
		}
	}
	return ""
}

// registrationKeys are the Secret's data (base64-decoded) and stringData
// values by key.
func registrationKeys(obj map[string]any) map[string]string {
	out := map[string]string{}
	if data, ok := obj["data"].(map[string]any); ok {
		for k, v := range data {
			s, _ := v.(string)
			if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
				out[k] = string(raw)
			}
		}
	}
	if data, ok := obj["stringData"].(map[string]any); ok {
		for k, v := range data {
			out[k], _ = v.(string)
		}
	}
	return out
}

// nearKey reports whether k is close to Argo CD's secret-type label key:
// equal once case and punctuation are dropped, or within 3 edits.
func nearKey(k string) bool {
	if k == inventory.SecretTypeLabel {
		return false
	}
	norm := func(s string) string {
		return strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
				return r
			case r >= 'A' && r <= 'Z':
				return r + 'a' - 'A'
			}
			return -1
		}, s)
	}
	a, b := norm(k), norm(inventory.SecretTypeLabel)
	return a == b || editDistance(a, b) <= 3
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
