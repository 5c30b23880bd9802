package policy

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// FuzzPatternMatch checks the allocation-free glob against the obvious
// reference: the pattern with variables substituted literally, quoted, and
// each `*` as `.*`, as a regular expression over the whole value.
func FuzzPatternMatch(f *testing.F) {
	for _, s := range [][4]string{
		{"*.{{cluster}}.example.com", "www.east.example.com", "east", "team"},
		{"*.{{namespace}}.svc", "api.team.svc", "east", "team"},
		{"a*b*c", "aXbYc", "", ""},
		{"*", "", "", ""},
		{"{{cluster}}", "*", "*", ""},
		{"x{{cluster}}*{{namespace}}y", "xeastZZteamy", "east", "team"},
		{"**.{{", "a.{{", "", ""},
		{"*ab*ab*", "abab", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, pat, v, cluster, namespace string) {
		for _, s := range []string{pat, v, cluster, namespace} {
			if !utf8.ValidString(s) {
				return // API objects hold UTF-8 only (the regexp reference reads invalid bytes as U+FFFD)
			}
		}
		x := vars{cluster: cluster, namespace: namespace}
		p := compilePattern(pat)
		var re strings.Builder
		re.WriteString(`^(?s:`)
		for i, part := range strings.Split(pat, "*") {
			if i > 0 {
				re.WriteString(".*")
			}
			re.WriteString(regexp.QuoteMeta(strings.ReplaceAll(strings.ReplaceAll(part, hubapi.VarCluster, cluster), hubapi.VarNamespace, namespace)))
		}
		re.WriteString(`)$`)
		want := regexp.MustCompile(re.String()).MatchString(v)
		if got := p.match(v, x); got != want {
			t.Fatalf("pattern %q vars %+v value %q: match %v, reference %v", pat, x, v, got, want)
		}
	})
}
