package policy

import (
	"bytes"
	"fmt"
	"regexp"

	"sigs.k8s.io/yaml"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

var separator = regexp.MustCompile(`(?m)^---\s*$`)

// Parse returns the IssuancePolicies in a YAML stream (documents of other
// kinds are skipped), decoded strictly: an unknown field is an error, as a
// typo in a policy must not silently allow less (or more) than meant.
func Parse(raw []byte) ([]hubapi.IssuancePolicy, error) {
	var out []hubapi.IssuancePolicy
	for i, doc := range separator.Split(string(raw), -1) {
		if len(bytes.TrimSpace([]byte(doc))) == 0 {
			continue
		}
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if tm.Kind != hubapi.IssuancePolicyKind || tm.APIVersion != hubapi.SchemeGroupVersion.String() {
			continue
		}
		p := hubapi.IssuancePolicy{}
		if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
			return nil, fmt.Errorf("document %d: IssuancePolicy: %w", i+1, err)
		}
		out = append(out, p)
	}
	return out, nil
}
