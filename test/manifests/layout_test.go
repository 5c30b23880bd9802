package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// The README's layout table names every package directory under internal/,
// and nothing that is not there: the tree is the architecture diagram, and
// the table is its key.
func TestReadmeLayoutMatchesTheTree(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `internal/([a-z0-9]+)`").FindAllSubmatch(readme, -1) {
		listed = append(listed, string(m[1]))
	}
	entries, err := os.ReadDir(filepath.Join("..", "..", "internal"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	slices.Sort(listed)
	if !slices.Equal(listed, dirs) {
		t.Errorf("README layout table lists internal/%v; the tree has internal/%v", listed, dirs)
	}
}
