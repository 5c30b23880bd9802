package app

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
)

// Severities of a validation finding.
const (
	severityOK      = "ok"
	severityWarning = "warning"
	severityError   = "error"
)

// Finding is one line of `certhub cluster validate`: a registration that is
// fine, or what is wrong with it, where.
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
	v := &validator{opts: o, clusters: map[string]Finding{}, secrets: map[string]Finding{}}
	if o.selector != "" {
		sel, err := labels.Parse(o.selector)
		if err != nil {
			return fmt.Errorf("--cluster-selector: %w", err)
		}
		v.selector = sel
	}
	for _, arg := range args {
		if err := v.input(cmd.InOrStdin(), arg); err != nil {
			v.add(Finding{File: arg, Severity: severityError, Message: err.Error()})
		}
	}
	if v.selector != nil && v.registrations > 0 && v.selected == 0 {
		v.add(Finding{File: strings.Join(args, ","), Severity: severityWarning,
			Message: fmt.Sprintf("--cluster-selector %q selects none of the %d registrations", o.selector, v.registrations)})
	}
	out := cmd.OutOrStdout()
	switch {
	case o.show:
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v.conns); err != nil {
			return err
		}
	case o.output == "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v.findings); err != nil {
			return err
		}
	default:
		for _, f := range v.findings {
			fmt.Fprintln(out, f)
		}
	}
	errs, warns := 0, 0
	for _, f := range v.findings {
		switch f.Severity {
		case severityError:
			errs++
		case severityWarning:
			warns++
		}
	}
	if errs > 0 || (o.strict && warns > 0) {
		return fmt.Errorf("%d error(s), %d warning(s) in cluster registrations", errs, warns)
	}
	return nil
}

// validator collects findings over all inputs, for the cross-file checks.
type validator struct {
	opts                    validateOptions
	selector                labels.Selector
	findings                []Finding
	conns                   []Connection
	clusters                map[string]Finding // cluster name → first registration
	secrets                 map[string]Finding // namespace/name → first Secret
	registrations, selected int
}

func (v *validator) add(f Finding) { v.findings = append(v.findings, f) }

// input validates a file, a directory (recursively) or "-" (stdin).
func (v *validator) input(stdin io.Reader, arg string) error {
	return eachInput(stdin, arg, v.file)
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

// document is one YAML document of a file and the line it starts on.
type document struct {
	line int
	raw  []byte
}

var separator = regexp.MustCompile(`^---(\s.*)?$`)

// splitDocuments splits a YAML stream at "---" lines, keeping line numbers.
func splitDocuments(raw []byte) []document {
	var docs []document
	cur := document{line: 1}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		if separator.MatchString(sc.Text()) {
			docs = append(docs, cur)
			cur = document{line: n + 1}
			continue
		}
		cur.raw = append(append(cur.raw, sc.Bytes()...), '\n')
	}
	return append(docs, cur)
}

func (v *validator) file(name string, raw []byte) {
	for _, doc := range splitDocuments(raw) {
		if len(bytes.TrimSpace(doc.raw)) == 0 {
			continue
		}
		at := Finding{File: name, Line: doc.line}
		js, err := yaml.YAMLToJSON(doc.raw)
		if err != nil {
			at.Severity, at.Message = severityError, "not YAML: "+err.Error()
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
func (v *validator) object(at Finding, obj map[string]any) {
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

// isClusterSecret says whether labels mark an Argo CD cluster Secret.
func isClusterSecret(l map[string]any) bool {
	return l[inventory.SecretTypeLabel] == inventory.SecretTypeCluster
}

// secret validates a plain Secret as the API server decodes it and Argo CD reads it.
func (v *validator) secret(at Finding, obj map[string]any) {
	meta, _ := obj["metadata"].(map[string]any)
	lbls, _ := meta["labels"].(map[string]any)
	if !isClusterSecret(lbls) {
		// Not a registration for Argo CD or the hub; say so when it looks
		// meant as one, else stay silent (another Secret).
		if why := nearMiss(obj); why != "" {
			at.Severity, at.Message = severityError, why
			v.add(at)
		}
		return
	}
	s, err := decodeSecret(obj)
	if err != nil {
		at.Severity, at.Message = severityError, err.Error()
		v.add(at)
		return
	}
	v.registrations++
	if v.namespaceAndName(at, s.Namespace, s.Name) {
		return
	}
	c, err := inventory.ValidateSecret(s)
	if err != nil {
		at.Severity, at.Message = severityError, err.Error()
		v.add(at)
		return
	}
	at.Cluster, at.Server = c.Name, c.Server
	if v.duplicateCluster(at, c.Name) {
		return
	}
	at.Severity, at.Message = severityOK, fmt.Sprintf("cluster %q at %s", c.Name, c.Server)
	if c.InCluster {
		at.Message += " (the in-cluster server: the cluster the hub reads its Secrets from, resolved at run time)"
	}
	if len(c.Warnings) > 0 {
		at.Severity = severityWarning
		at.Message += "; " + strings.Join(c.Warnings, "; ")
	}
	at.Message += v.selection(s.Labels)
	v.add(at)
	v.conns = append(v.conns, connectionOf(at.File, s, c))
}

// namespaceAndName checks the Secret's name and namespace and that no other
// input has the same one; it reports true when it added an error.
func (v *validator) namespaceAndName(at Finding, namespace, name string) bool {
	if name == "" {
		at.Severity, at.Message = severityError, "metadata.name: Required value"
		v.add(at)
		return true
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		at.Severity, at.Message = severityError, fmt.Sprintf("metadata.name: Invalid value: %q: %s", name, strings.Join(msgs, "; "))
		v.add(at)
		return true
	}
	if namespace != "" && namespace != v.opts.namespace {
		w := at
		w.Severity, w.Message = severityWarning, fmt.Sprintf("metadata.namespace %q: the hub reads cluster Secrets from %q (--cluster-secret-namespace)", namespace, v.opts.namespace)
		v.add(w)
	}
	if namespace == "" {
		namespace = v.opts.namespace
	}
	key := namespace + "/" + name
	if first, dup := v.secrets[key]; dup {
		at.Severity, at.Message = severityError, fmt.Sprintf("Secret %s is also defined at %s:%d; the later one replaces the first when applied", key, first.File, first.Line)
		v.add(at)
		return true
	}
	v.secrets[key] = at
	return false
}

// duplicateCluster reports true (and an error) when another registration names cluster.
func (v *validator) duplicateCluster(at Finding, cluster string) bool {
	if first, dup := v.clusters[cluster]; dup {
		at.Severity = severityError
		at.Message = fmt.Sprintf("DuplicateClusterName: cluster %q is also registered by %s at %s:%d; the hub would serve only one of them", cluster, first.Object, first.File, first.Line)
		v.add(at)
		return true
	}
	v.clusters[cluster] = at
	return false
}

// selection says whether --cluster-selector selects a registration with these labels.
func (v *validator) selection(l map[string]string) string {
	if v.selector == nil {
		return ""
	}
	if v.selector.Matches(labels.Set(l)) {
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
