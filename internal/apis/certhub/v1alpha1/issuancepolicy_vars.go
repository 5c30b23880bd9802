package v1alpha1

import "k8s.io/apimachinery/pkg/util/validation"

// Variables substituted in every allowed pattern of an IssuancePolicy. They
// never add wildcards: a cluster or namespace name is matched literally.
const (
	VarCluster   = "{{cluster}}"
	VarNamespace = "{{namespace}}"
)

// UnsafeClusterName says why a cluster name cannot stand for VarCluster in
// a DNS pattern such as "*.{{cluster}}.example.com" ("" when it can): only
// a DNS label (RFC 1123: lower-case letters, digits and '-', at most 63)
// can. A dot would nest its names inside another cluster's ("x.east" under
// "east"), a "*" would make a wildcard over every cluster, and an
// upper-case letter or a space would name another cluster's hosts (DNS is
// case-insensitive). Such names are valid registrations — Argo CD accepts
// any name, and its own examples use "mycluster.example.com" — so the
// inventory serves them (with a warning) and the policies match them
// against no VarCluster pattern.
func UnsafeClusterName(name string) string {
	return UnsafeLabel(name)
}

// UnsafeLabel says why v cannot stand for a variable of a DNS pattern (not
// a DNS label; "" when it can): the rule of VarCluster and VarNamespace.
func UnsafeLabel(v string) string {
	if len(validation.IsDNS1123Label(v)) > 0 {
		return "is not a DNS label (lower-case letters, digits and '-', at most 63)"
	}
	return ""
}
