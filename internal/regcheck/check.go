package regcheck

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/inventory"
)

// Severities of a Finding.
const (
	SeverityOK      = "ok"
	SeverityWarning = "warning"
	SeverityError   = "error"
)

// Finding is one result of checking registrations (one line of `certhub
// cluster validate`): a registration that is fine, or what is wrong with it,
// where.
type Finding struct {
	File string `json:"file"`
	// Line is where the document starts (1-based), 0 when unknown.
	Line int `json:"line,omitempty"`
	// Object is "Kind namespace/name" when known.
	Object   string `json:"object,omitempty"`
	Cluster  string `json:"cluster,omitempty"`
	Server   string `json:"server,omitempty"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

func (f Finding) String() string {
	loc := f.File
	if f.Line > 0 {
		loc = fmt.Sprintf("%s:%d", f.File, f.Line)
	}
	obj := ""
	if f.Object != "" {
		obj = f.Object + ": "
	}
	return fmt.Sprintf("%s: %s: %s%s", loc, f.Severity, obj, f.Message)
}

// CheckOptions configure a Checker.
type CheckOptions struct {
	// Namespace is where the hub reads cluster Secrets (its
	// --cluster-secret-namespace); registrations setting another are
	// warned about. Defaults to "argocd".
	Namespace string
	// Selector is the hub's --cluster-selector: each finding says whether
	// it selects the registration, and Finish warns when it selects none.
	// Nil: every registration is served.
	Selector labels.Selector
}

// Checker checks cluster registrations offline, as the API server decodes
// them and Argo CD converts them, across any number of files (for the
// cross-file checks: one cluster or Secret name defined twice). It is not
// safe for concurrent use.
type Checker struct {
	opts                    CheckOptions
	findings                []Finding
	conns                   []Connection
	clusters                map[string]Finding // cluster name → first registration
	secrets                 map[string]Finding // namespace/name → first Secret
	registrations, selected int
}

// NewChecker returns a Checker with no findings yet.
func NewChecker(opts CheckOptions) *Checker {
	if opts.Namespace == "" {
		opts.Namespace = "argocd"
	}
	return &Checker{opts: opts, clusters: map[string]Finding{}, secrets: map[string]Finding{}}
}

// Add records a finding of the caller's (e.g. a file that cannot be read).
func (v *Checker) Add(f Finding) { v.add(f) }

func (v *Checker) add(f Finding) { v.findings = append(v.findings, f) }

// Finish adds the findings over all inputs (named inputs in them): a
// Selector that selects none of the registrations.
func (v *Checker) Finish(inputs string) {
	if v.opts.Selector != nil && v.registrations > 0 && v.selected == 0 {
		v.add(Finding{File: inputs, Severity: SeverityWarning,
			Message: fmt.Sprintf("--cluster-selector %q selects none of the %d registrations", v.opts.Selector, v.registrations)})
	}
}

// Findings returns every finding so far, in input order.
func (v *Checker) Findings() []Finding { return v.findings }

// Connections returns what each plain registration that passed turns into.
func (v *Checker) Connections() []Connection { return v.conns }

// Counts returns the errors and warnings among the findings.
func (v *Checker) Counts() (errs, warns int) {
	for _, f := range v.findings {
		switch f.Severity {
		case SeverityError:
			errs++
		case SeverityWarning:
			warns++
		}
	}
	return errs, warns
}

// Document is one YAML document of a stream and the line it starts on.
type Document struct {
	Line int
	Raw  []byte
}

var separator = regexp.MustCompile(`^---(\s.*)?$`)

// SplitDocuments splits a YAML stream at "---" lines, keeping line numbers.
func SplitDocuments(raw []byte) []Document {
	var docs []Document
	cur := Document{Line: 1}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		if separator.MatchString(sc.Text()) {
			docs = append(docs, cur)
			cur = Document{Line: n + 1}
			continue
		}
		cur.Raw = append(append(cur.Raw, sc.Bytes()...), '\n')
	}
	return append(docs, cur)
}

// File checks every registration in one YAML or JSON stream named name.
func (v *Checker) File(name string, raw []byte) {
	for _, doc := range SplitDocuments(raw) {
		if len(bytes.TrimSpace(doc.Raw)) == 0 {
			continue
		}
		at := Finding{File: name, Line: doc.Line}
		js, err := yaml.YAMLToJSON(doc.Raw)
		if err != nil {
			at.Severity, at.Message = SeverityError, "not YAML: "+err.Error()
			v.add(at)
			continue
		}
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil || obj == nil {
			continue // a scalar or list document: nothing certhub reads
		}
		kind, _ := obj["kind"].(string)
		if items, ok := obj["items"].([]any); ok && strings.HasSuffix(kind, "List") {
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					v.object(at, m)
				}
			}
			continue
		}
		v.object(at, obj)
	}
}

// object validates one manifest that may be a registration.
func (v *Checker) object(at Finding, obj map[string]any) {
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	at.Object = kind + " " + name
	if ns != "" {
		at.Object = kind + " " + ns + "/" + name
	}
	switch {
	case kind == "Secret" && apiVersion == "v1":
		if _, sops := obj["sops"]; sops || containsEncrypted(obj["data"]) || containsEncrypted(obj["stringData"]) {
			v.encryptedSecret(at, obj, meta)
			return
		}
		v.secret(at, obj)
	case kind == "SealedSecret" && strings.HasPrefix(apiVersion, "bitnami.com/"):
		v.sealedSecret(at, obj)
	case kind == "ExternalSecret" && strings.HasPrefix(apiVersion, "external-secrets.io/"):
		v.externalSecret(at, obj)
	}
}

// marksCluster says whether labels mark an Argo CD cluster Secret.
func marksCluster(l map[string]any) bool {
	return l[inventory.SecretTypeLabel] == inventory.SecretTypeCluster
}

// secret validates a plain Secret as the API server decodes it and Argo CD reads it.
func (v *Checker) secret(at Finding, obj map[string]any) {
	meta, _ := obj["metadata"].(map[string]any)
	lbls, _ := meta["labels"].(map[string]any)
	if !marksCluster(lbls) {
		// Not a registration for Argo CD or the hub; say so when it looks
		// meant as one, else stay silent (another Secret).
		if why := nearMiss(obj); why != "" {
			at.Severity, at.Message = SeverityError, why
			v.add(at)
		}
		return
	}
	s, err := decodeSecret(obj)
	if err != nil {
		at.Severity, at.Message = SeverityError, err.Error()
		v.add(at)
		return
	}
	v.registrations++
	if v.namespaceAndName(at, s.Namespace, s.Name) {
		return
	}
	c, err := inventory.ValidateSecret(s)
	if err != nil {
		at.Severity, at.Message = SeverityError, err.Error()
		v.add(at)
		return
	}
	at.Cluster, at.Server = c.Name, c.Server
	if v.duplicateCluster(at, c.Name) {
		return
	}
	at.Severity, at.Message = SeverityOK, fmt.Sprintf("cluster %q at %s", c.Name, c.Server)
	if c.InCluster {
		at.Message += " (the in-cluster server: the cluster the hub reads its Secrets from, resolved at run time)"
	}
	if len(c.Warnings) > 0 {
		at.Severity = SeverityWarning
		at.Message += "; " + strings.Join(c.Warnings, "; ")
	}
	at.Message += v.selection(s.Labels)
	v.add(at)
	v.conns = append(v.conns, connectionOf(at.File, s, c))
}

// namespaceAndName checks the Secret's name and namespace and that no other
// input has the same one; it reports true when it added an error.
func (v *Checker) namespaceAndName(at Finding, namespace, name string) bool {
	if name == "" {
		at.Severity, at.Message = SeverityError, "metadata.name: Required value"
		v.add(at)
		return true
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		at.Severity, at.Message = SeverityError, fmt.Sprintf("metadata.name: Invalid value: %q: %s", name, strings.Join(msgs, "; "))
		v.add(at)
		return true
	}
	if namespace != "" && namespace != v.opts.Namespace {
		w := at
		w.Severity, w.Message = SeverityWarning, fmt.Sprintf("metadata.namespace %q: the hub reads cluster Secrets from %q (--cluster-secret-namespace)", namespace, v.opts.Namespace)
		v.add(w)
	}
	if namespace == "" {
		namespace = v.opts.Namespace
	}
	key := namespace + "/" + name
	if first, dup := v.secrets[key]; dup {
		at.Severity, at.Message = SeverityError, fmt.Sprintf("Secret %s is also defined at %s:%d; the later one replaces the first when applied", key, first.File, first.Line)
		v.add(at)
		return true
	}
	v.secrets[key] = at
	return false
}

// duplicateCluster reports true (and an error) when another registration names cluster.
func (v *Checker) duplicateCluster(at Finding, cluster string) bool {
	if first, dup := v.clusters[cluster]; dup {
		at.Severity = SeverityError
		at.Message = fmt.Sprintf("DuplicateClusterName: cluster %q is also registered by %s at %s:%d; the hub would serve only one of them", cluster, first.Object, first.File, first.Line)
		v.add(at)
		return true
	}
	v.clusters[cluster] = at
	return false
}

// selection says whether --cluster-selector selects a registration with these labels.
func (v *Checker) selection(l map[string]string) string {
	if v.opts.Selector == nil {
		return ""
	}
	if v.opts.Selector.Matches(labels.Set(l)) {
		v.selected++
		return "; selected by --cluster-selector"
	}
	return "; not selected by --cluster-selector: the hub ignores it"
}

// decodeSecret decodes a Secret manifest as the API server does: stringData
// values must be strings and data values base64, unknown fields are refused;
// stringData is folded over data.
func decodeSecret(obj map[string]any) (*corev1.Secret, error) {
	for _, field := range []string{"stringData", "data"} {
		m, ok := obj[field].(map[string]any)
		if !ok {
			if obj[field] != nil {
				return nil, fmt.Errorf("%s: Invalid value: must be a map of strings", field)
			}
			continue
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			val, isString := m[k].(string)
			if !isString {
				return nil, fmt.Errorf("%s.%s: Invalid value: %v (%s): must be a string; quote it, the API server refuses anything else", field, k, m[k], jsonType(m[k]))
			}
			if field == "data" {
				if _, err := base64.StdEncoding.DecodeString(val); err != nil {
					return nil, fmt.Errorf("data.%s: Invalid value: not base64 (%w); use stringData for plain text", k, err)
				}
			}
			if msgs := validation.IsConfigMapKey(k); len(msgs) > 0 {
				return nil, fmt.Errorf("%s[%s]: Invalid value: %s", field, k, strings.Join(msgs, "; "))
			}
		}
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	s := &corev1.Secret{}
	if err := dec.Decode(s); err != nil {
		return nil, fmt.Errorf("not a valid Secret: %w", err)
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, val := range s.StringData {
		s.Data[k] = []byte(val)
	}
	s.StringData = nil
	return s, nil
}

// jsonType names a decoded JSON value's type the way users wrote it.
func jsonType(v any) string {
	switch v.(type) {
	case float64:
		return "number"
	case bool:
		return "boolean"
	case map[string]any:
		return "map"
	case []any:
		return "list"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
