package deptest

import "testing"

// TestNoProductImportsLab: no package outside lab/, nor any of its tests,
// links anything under lab/. The product and its own tests stand without
// the labs; what tests of several packages share lives outside lab/
// (internal/netnstest).
func TestNoProductImportsLab(t *testing.T) {
	TreeChecker{
		Pkgs:   "github.com/vipd/vipd/...",
		Exempt: []string{"github.com/vipd/vipd/lab/..."},
		BadDeps: map[string]string{
			"github.com/vipd/vipd/lab/...": "lab/ builds on the product, never the other way round: a product package (or its tests) must build and run without the labs",
		},
	}.Check(t)
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"a/b/...", "a/b", true},
		{"a/b/...", "a/b/c", true},
		{"a/b/...", "a/bc", false},
		{"a/b", "a/b/c", false},
		{"a/b", "a/b", true},
	} {
		if got := Match(c.pattern, c.path); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}
