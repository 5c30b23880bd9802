package regcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// test/argocd (its own module, pinning argo-cd/v3) decodes `certhub cluster
// validate --show-connection` into a mirror of Connection. The mirror must
// have exactly Connection's JSON fields, or the conformance test compares
// less than certhub prints.
func TestArgoCDMirrorHasConnectionsFields(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../test/argocd/conformance_test.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	mirror := map[string][]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		for _, fld := range st.Fields.List {
			if fld.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(fld.Tag.Value)
			if err != nil {
				t.Fatal(err)
			}
			mirror[ts.Name.Name] = append(mirror[ts.Name.Name], reflect.StructTag(tag).Get("json"))
		}
		return true
	})
	for mine, theirs := range map[reflect.Type]string{reflect.TypeFor[Connection](): "connection", reflect.TypeFor[ExecConnection](): "execCfg"} {
		var want []string
		for i := range mine.NumField() {
			want = append(want, mine.Field(i).Tag.Get("json"))
		}
		got := mirror[theirs]
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("test/argocd's %s has JSON fields\n  %s\n%s has\n  %s", theirs, strings.Join(got, " "), mine.Name(), strings.Join(want, " "))
		}
	}
}
