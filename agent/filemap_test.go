package agent

import (
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFileMap keeps the map of files in the package comment (agent.go)
// true: it lists every non-test Go file of the package, and no other.
func TestFileMap(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "agent.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	entry := regexp.MustCompile(`^\t([a-z0-9_]+\.go)\s`)
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if m := entry.FindStringSubmatch(line); m != nil {
			listed[m[1]] = true
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if !listed[name] {
			missing = append(missing, name)
		}
		delete(listed, name)
	}
	if len(missing) > 0 {
		t.Errorf("agent.go's map does not list %v", missing)
	}
	if len(listed) > 0 {
		gone := slices.Sorted(maps.Keys(listed))
		t.Errorf("agent.go's map lists %v, which are not in the package", gone)
	}
}
