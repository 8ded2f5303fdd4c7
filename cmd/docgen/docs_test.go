package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vipd/vipd/cmd/vipctl/cli"
)

// The lists the documents keep of what the code defines: event kinds,
// exit codes and metrics. (Configuration keys: agent/config's
// documented_test.go, in both directions.)

// sourceMatches returns the first submatch of re in the non-test Go
// files of dir, sorted and without duplicates.
func sourceMatches(t *testing.T, dir string, re *regexp.Regexp) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the part of a markdown document from the heading to the
// next heading of the same level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no %q heading", heading)
	}
	s := doc[i+1:]
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if j := strings.Index(s[1:], "\n"+level); j > 0 {
		s = s[:j+1]
	}
	return s
}

// TestEveryEventKindIsDocumented: every event kind the agent publishes is
// a row of operations.md's event table and is named by `vipctl events
// --help`.
func TestEveryEventKindIsDocumented(t *testing.T) {
	kinds := sourceMatches(t, "../../agent", regexp.MustCompile(`Kind:\s*"([a-z]+)"`))
	if len(kinds) < 10 {
		t.Fatalf("found %d event kinds in agent/; the pattern broke", len(kinds))
	}
	table := section(t, readDoc(t, "../../docs/operations.md"), "## Events")
	i := strings.Index(table, "| kind | when |")
	if i < 0 {
		t.Fatal(`docs/operations.md's Events section has no "| kind | when |" table`)
	}
	table = table[i:]
	if j := strings.Index(table, "\n\n"); j > 0 {
		table = table[:j]
	}
	var help string
	for _, c := range cli.Command("test").Commands() {
		if c.Name() == "events" {
			help = c.Long
		}
	}
	for _, k := range kinds {
		if !strings.Contains(table, "| `"+k+"` |") {
			t.Errorf("docs/operations.md's event table has no row for kind %s", k)
		}
		if !regexp.MustCompile(`\b` + k + `\b`).MatchString(help) {
			t.Errorf("vipctl events --help does not name kind %s", k)
		}
	}
}

// TestEveryMetricIsDocumented: every metric the agent registers is a row
// of operations.md's metrics table.
func TestEveryMetricIsDocumented(t *testing.T) {
	metrics := sourceMatches(t, "../../agent", regexp.MustCompile(`"(vipd_[a-z_]+)"`))
	if len(metrics) < 20 {
		t.Fatalf("found %d metrics in agent/; the pattern broke", len(metrics))
	}
	table := section(t, readDoc(t, "../../docs/operations.md"), "## Metrics")
	for _, m := range metrics {
		if !strings.Contains(table, "| `"+m+"` |") {
			t.Errorf("docs/operations.md's metrics table has no row for %s", m)
		}
	}
}

// TestEveryExitCodeIsDocumented: the exit codes of the hooks are rows of
// drain.md's table, vipctl's are in vipctl(8), and vipd's in vipd(8).
func TestEveryExitCodeIsDocumented(t *testing.T) {
	hooks, err := filepath.Glob("../../packaging/hooks/*")
	if err != nil {
		t.Fatal(err)
	}
	drain := readDoc(t, "../../docs/drain.md")
	exitRe := regexp.MustCompile(`(?m)\bexit ([0-9]+)\b`)
	for _, h := range hooks {
		if strings.HasPrefix(filepath.Base(h), "test-") {
			continue
		}
		for _, m := range exitRe.FindAllStringSubmatch(readDoc(t, h), -1) {
			if !strings.Contains(drain, "\n| "+m[1]+" | ") {
				t.Errorf("%s exits %s; docs/drain.md's exit code table has no row for it", filepath.Base(h), m[1])
			}
		}
	}
	vipctlPage := section(t, readDoc(t, "../../docs/man/vipctl.8.md"), "# EXIT STATUS")
	for _, m := range regexp.MustCompile(`(?m)^\s*Exit[A-Za-z]+\s*=\s*([0-9]+)`).FindAllStringSubmatch(readDoc(t, "../vipctl/cli/cli.go"), -1) {
		if !strings.Contains(vipctlPage, "**"+m[1]+"**") {
			t.Errorf("vipctl exits %s; vipctl(8)'s EXIT STATUS does not say what it means", m[1])
		}
	}
	vipdPage := section(t, readDoc(t, "../../docs/man/vipd.8.md"), "# EXIT STATUS")
	for _, code := range sourceMatches(t, "../vipd", regexp.MustCompile(`(?m)^\s*return ([0-9]+)$`)) {
		if !regexp.MustCompile(`\b` + code + ` (on|when)\b`).MatchString(vipdPage) {
			t.Errorf("vipd exits %s; vipd(8)'s EXIT STATUS does not say when", code)
		}
	}
}

// anchor is GitHub's anchor for a markdown heading's text.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestLongDocsHaveContents: a document of more than 500 lines starts
// with a "Contents" list that links every one of its "## " sections.
func TestLongDocsHaveContents(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	long := 0
	for _, d := range docs {
		text := readDoc(t, d)
		if strings.Count(text, "\n") <= 500 {
			continue
		}
		long++
		i := strings.Index(text, "\n## Contents\n")
		if i < 0 {
			t.Errorf("%s has %d lines and no \"## Contents\"", filepath.Base(d), strings.Count(text, "\n"))
			continue
		}
		toc := section(t, text, "## Contents")
		for _, m := range regexp.MustCompile("(?m)^## (.+)$").FindAllStringSubmatch(text[i+1+len(toc):], -1) {
			if !strings.Contains(toc, "](#"+anchor(m[1])+")") {
				t.Errorf("%s: Contents does not link section %q (#%s)", filepath.Base(d), m[1], anchor(m[1]))
			}
		}
	}
	if long < 2 {
		t.Fatalf("found %d long documents; design.md and operations.md are", long)
	}
}

// TestDocsReadme: docs/README.md says what to read in what order for each
// reader, and links every document of docs/.
func TestDocsReadme(t *testing.T) {
	text := readDoc(t, "../../docs/README.md")
	for _, reader := range []string{"## First install", "## Bootstrapping a cluster with kubeadm", "## Upgrading", "## On call", "## Coming from keepalived"} {
		if !strings.Contains(text, "\n"+reader) {
			t.Errorf("docs/README.md has no section %q", reader)
		}
	}
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if b := filepath.Base(d); b != "README.md" && !strings.Contains(text, "]("+b) {
			t.Errorf("docs/README.md does not link %s", b)
		}
	}
}
