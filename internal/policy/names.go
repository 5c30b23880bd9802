package policy

import (
	"strings"
	"unicode"
)

// Variables substituted in every allowed pattern. They never add wildcards:
// a cluster or namespace name is matched literally.
const (
	VarCluster   = "{{cluster}}"
	VarNamespace = "{{namespace}}"
)

// UnsafeClusterName says why a cluster name cannot stand for VarCluster in
// a DNS pattern such as "*.{{cluster}}.example.com" ("" when it can): a dot
// would nest its names inside another cluster's ("x.east" under "east"), a
// "*" would make a wildcard over every cluster, and an upper-case letter or
// a space would name another cluster's hosts (DNS is case-insensitive). The
// inventory refuses registrations so named; Evaluate matches such a name
// (a registration named after its server URL) against no VarCluster pattern.
func UnsafeClusterName(name string) string {
	if strings.ContainsFunc(name, func(r rune) bool { return r == '.' || r == '*' || r >= 'A' && r <= 'Z' || unicode.IsSpace(r) }) {
		return "must not contain dots, wildcards, upper-case letters or spaces"
	}
	return ""
}
