// Package deptest turns import rules into tests, in the way of tailscale's
// tstest/deptest: a DepChecker lists what a package links (go list -deps)
// and fails the test for every dependency a rule forbids, with the rule's
// reason.
package deptest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// DepChecker checks the dependencies of one package. Patterns are import
// paths; one ending in "/..." matches the path before it and every path
// below it.
type DepChecker struct {
	// Pkg is the package to check, as go list takes it ("." when empty:
	// the package under test).
	Pkg string
	// BadDeps maps patterns of packages Pkg must not link, directly or
	// through others, to the reason.
	BadDeps map[string]string
	// AllowDeps are patterns BadDeps does not apply to.
	AllowDeps []string
	// BadImports maps patterns of packages Pkg must not import itself to
	// the reason (linking them through another package is allowed).
	BadImports map[string]string
}

// Check runs go list and reports every dependency a rule forbids. It skips
// the test when the go tool is not in PATH.
func (c DepChecker) Check(t *testing.T) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH: cannot list dependencies")
	}
	pkg := c.Pkg
	if pkg == "" {
		pkg = "."
	}
	list := func(args ...string) []string {
		t.Helper()
		out, err := exec.Command(goTool, append([]string{"list"}, args...)...).Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return strings.Fields(string(out))
	}
	deps := list("-deps", pkg)
	if len(deps) < 2 {
		t.Fatalf("go list -deps %s listed %v: the check would show nothing", pkg, deps)
	}
	self := deps[len(deps)-1] // -deps lists the package itself last
	for _, d := range deps[:len(deps)-1] {
		if slices.ContainsFunc(c.AllowDeps, func(p string) bool { return Match(p, d) }) {
			continue
		}
		for p, why := range c.BadDeps {
			if Match(p, d) {
				t.Errorf("%s links %s: %s", self, d, why)
			}
		}
	}
	if len(c.BadImports) > 0 {
		for _, d := range list("-f", `{{join .Imports " "}}`, pkg) {
			for p, why := range c.BadImports {
				if Match(p, d) {
					t.Errorf("%s imports %s: %s", self, d, why)
				}
			}
		}
	}
}

// Match reports whether import path matches pattern.
func Match(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// TreeChecker checks every package of a tree, with the packages its tests
// build (go list -test -deps): a rule that must hold for the tests too, not
// only for what ships.
type TreeChecker struct {
	// Pkgs is the pattern of packages to check, as go list takes it
	// ("github.com/vipd/vipd/...").
	Pkgs string
	// Exempt are patterns of packages (and their tests) the rules do not
	// apply to.
	Exempt []string
	// BadDeps maps patterns of packages no checked package, nor its tests,
	// may link, directly or through others, to the reason.
	BadDeps map[string]string
}

// Check runs go list and reports every package, or test of one, that links
// what a rule forbids. It skips the test when the go tool is not in PATH.
func (c TreeChecker) Check(t *testing.T) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH: cannot list dependencies")
	}
	args := []string{"list", "-e", "-test", "-f", `{{.ImportPath}}|{{join .Deps " "}}`, c.Pkgs}
	out, err := exec.Command(goTool, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	checked := 0
	for _, line := range lines {
		pkg, deps, _ := strings.Cut(line, "|")
		// A test variant is "p [p.test]" (or "p_test [p.test]"), the test
		// binary "p.test": all are p's for the rules.
		base, _, _ := strings.Cut(pkg, " ")
		base = strings.TrimSuffix(strings.TrimSuffix(base, ".test"), "_test")
		if slices.ContainsFunc(c.Exempt, func(p string) bool { return Match(p, base) }) {
			continue
		}
		checked++
		for d := range strings.FieldsSeq(deps) {
			for p, why := range c.BadDeps {
				if Match(p, d) {
					t.Errorf("%s links %s: %s", pkg, d, why)
				}
			}
		}
	}
	if checked < 2 {
		t.Fatalf("go list -test %s checked %d packages: the check would show nothing", c.Pkgs, checked)
	}
}
