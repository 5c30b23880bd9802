package certspec

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// typedReader matches what would read many Certificates through
// cert-manager's Go types: a typed list, or a typed watch (For, Watches,
// Owns, GetInformer). One Certificate the API server accepts and the
// types cannot decode (`duration: "1 day"`) would fail the whole list or
// watch, blinding the reader to its cluster; readers list and watch
// unstructured (NewList, NewObject) and convert item by item.
var typedReader = regexp.MustCompile(`cmapi\.CertificateList\{|(For|Watches|Owns|GetInformer)\([^)]*&cmapi\.Certificate\{\}`)

// The hub's code (internal/, cmd/; not tests, not the demo, which reads
// only the Certificates it created) has no typed reader of Certificates.
func TestNoTypedReaderOfCertificates(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
				strings.Contains(path, filepath.Join("internal", "demo")) {
				return err
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(raw), "\n") {
				if typedReader.MatchString(line) {
					found = append(found, path+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range found {
		t.Errorf("a typed reader of Certificates: %s", f)
	}
}
