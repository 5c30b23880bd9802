package regcheck

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"github.com/certhub/certhub/internal/inventory"
)

// containsEncrypted reports whether a data/stringData map holds SOPS values.
func containsEncrypted(m any) bool {
	mm, _ := m.(map[string]any)
	for _, val := range mm {
		if s, ok := val.(string); ok && strings.HasPrefix(s, "ENC[") {
			return true
		}
	}
	return false
}

// encryptedSecret checks a SOPS-encrypted Secret for structure: the label in
// clear, the keys present, the server valid when it is in clear.
func (v *Checker) encryptedSecret(at Finding, obj, meta map[string]any) {
	lbls, _ := meta["labels"].(map[string]any)
	if !marksCluster(lbls) {
		return
	}
	v.registrations++
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	if v.namespaceAndName(at, ns, name) {
		return
	}
	keys := map[string]string{}
	for _, field := range []string{"data", "stringData"} {
		m, _ := obj[field].(map[string]any)
		for k, val := range m {
			keys[k], _ = val.(string)
		}
	}
	v.structureChecked(at, keys, lbls, "encrypted (SOPS), structure checked: label, name/server/config present")
}

// structureChecked reports an encrypted registration: an error naming the
// keys it lacks, or ok with what, and whether --cluster-selector selects it.
func (v *Checker) structureChecked(at Finding, keys map[string]string, lbls map[string]any, what string) {
	switch missing := missingKeys(keys); {
	case missing != "":
		at.Severity, at.Message = SeverityError, missing
	case keys["config"] == "" && keys["server"] != inventory.InClusterServer:
		at.Severity, at.Message = SeverityWarning, what+"; no config: unless the server is the in-cluster one, the hub connects anonymously"+v.selection(stringMap(lbls))
	default:
		at.Severity, at.Message = SeverityOK, what+v.selection(stringMap(lbls))
	}
	v.add(at)
}

// templatedRegistration is the common start of the checks of objects that
// produce a Secret from a template (SealedSecret, ExternalSecret): the
// template must carry the cluster label, and the resulting Secret's name
// (secretName, else the object's) and namespace are checked like a Secret's.
// It returns the template's labels and whether to go on.
func (v *Checker) templatedRegistration(at Finding, obj, tmpl map[string]any, secretName string) (map[string]any, bool) {
	tmeta, _ := tmpl["metadata"].(map[string]any)
	lbls, _ := tmeta["labels"].(map[string]any)
	if !marksCluster(lbls) {
		return nil, false
	}
	v.registrations++
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if secretName != "" {
		name = secretName
	}
	ns, _ := meta["namespace"].(string)
	return lbls, !v.namespaceAndName(at, ns, name)
}

// sealedSecret checks a Bitnami SealedSecret that unseals into a cluster Secret.
func (v *Checker) sealedSecret(at Finding, obj map[string]any) {
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	lbls, ok := v.templatedRegistration(at, obj, tmpl, "")
	if !ok {
		return
	}
	keys := map[string]string{}
	enc, _ := spec["encryptedData"].(map[string]any)
	for k := range enc {
		keys[k] = "ENC"
	}
	if m, ok := tmpl["data"].(map[string]any); ok {
		for k, val := range m {
			keys[k], _ = val.(string)
		}
	}
	v.structureChecked(at, keys, lbls, "encrypted (SealedSecret), structure checked: template label, name/server/config present")
}

// missingKeys names the registration keys a structure-only check lacks
// (config is optional, as in Argo CD).
func missingKeys(keys map[string]string) string {
	var missing []string
	for _, k := range []string{"server"} {
		if _, ok := keys[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("invalid cluster Secret field %s: is required", strings.Join(missing, ", "))
	}
	return ""
}

func stringMap(m map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// placeholder is what every remote value renders to in a static check.
const placeholder = "placeholder"

// externalSecret checks an External Secrets Operator ExternalSecret that
// templates a cluster Secret: the label and the three keys in
// target.template, and config rendering to JSON with placeholder values.
func (v *Checker) externalSecret(at Finding, obj map[string]any) {
	spec, _ := obj["spec"].(map[string]any)
	target, _ := spec["target"].(map[string]any)
	tmpl, _ := target["template"].(map[string]any)
	secretName, _ := target["name"].(string) // the Secret ESO writes
	lbls, ok := v.templatedRegistration(at, obj, tmpl, secretName)
	if !ok {
		return
	}
	data, _ := tmpl["data"].(map[string]any)
	values := map[string]string{}
	for _, d := range asList(spec["data"]) {
		if k, _ := d["secretKey"].(string); k != "" {
			values[k] = placeholder
		}
	}
	rendered := map[string]string{}
	for k, val := range data {
		s, _ := val.(string)
		out, err := renderTemplate(s, values)
		if err != nil {
			at.Severity, at.Message = SeverityError, fmt.Sprintf("spec.target.template.data.%s: %v", k, err)
			v.add(at)
			return
		}
		rendered[k] = out
	}
	if missing := missingKeys(rendered); missing != "" {
		at.Severity, at.Message = SeverityError, "spec.target.template.data: "+missing
		v.add(at)
		return
	}
	if !json.Valid([]byte(rendered["config"])) {
		at.Severity, at.Message = SeverityError, "spec.target.template.data.config: does not render to JSON with placeholder values: "+rendered["config"]
		v.add(at)
		return
	}
	var cc inventory.ClusterConfig
	if err := json.Unmarshal([]byte(strings.ReplaceAll(rendered["config"], `"`+placeholder+`"`, `""`)), &cc); err != nil {
		at.Severity, at.Message = SeverityError, "spec.target.template.data.config: not Argo CD's ClusterConfig: "+err.Error()
		v.add(at)
		return
	}
	at.Cluster, at.Server = rendered["name"], rendered["server"]
	if at.Cluster != placeholder && at.Cluster != "" && v.duplicateCluster(at, at.Cluster) {
		return
	}
	at.Severity, at.Message = SeverityOK, fmt.Sprintf("ExternalSecret templating cluster %q at %s, structure checked: label, name/server/config, config renders to JSON", at.Cluster, at.Server)
	at.Message += v.selection(stringMap(lbls))
	v.add(at)
}

func asList(v any) []map[string]any {
	l, _ := v.([]any)
	var out []map[string]any
	for _, it := range l {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// templateFuncs are the External Secrets template functions a cluster
// Secret template needs; others make the check fail with their name.
var templateFuncs = template.FuncMap{
	"b64enc": func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	"b64dec": func(s string) string {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return s
		}
		return string(b)
	},
	"toJson": func(v any) string { b, _ := json.Marshal(v); return string(b) },
	"quote":  func(s string) string { b, _ := json.Marshal(s); return string(b) },
	"trim":   strings.TrimSpace,
	"upper":  strings.ToUpper,
	"lower":  strings.ToLower,
}

// renderTemplate renders an ESO (Go text/template) value with values.
func renderTemplate(s string, values map[string]string) (string, error) {
	t, err := template.New("v").Funcs(templateFuncs).Option("missingkey=zero").Parse(s)
	if err != nil {
		return "", fmt.Errorf("not a template certhub can check: %w", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, values); err != nil {
		return "", fmt.Errorf("does not render: %w", err)
	}
	return b.String(), nil
}
