// Package prometheus holds no code: its test keeps the alert rules
// (vipd-alerts.yml), their promtool tests and the Grafana dashboard
// (../grafana/vipd-dashboard.json) in step with the metrics vipd defines
// (agent/metrics.go) and documents (docs/operations.md).
package prometheus

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// definedMetrics are the metric names agent/metrics.go defines.
func definedMetrics(t *testing.T) map[string]bool {
	src := read(t, "../../agent/metrics.go")
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?:Name: |NewDesc\()"(vipd_[a-z_]+)"`).FindAllStringSubmatch(src, -1) {
		out[m[1]] = true
	}
	if len(out) < 15 {
		t.Fatalf("found %d metrics in agent/metrics.go; its format changed?", len(out))
	}
	return out
}

// usedMetrics are the vipd_ metric names in text, histogram series mapped
// to their histogram.
func usedMetrics(text string) []string {
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bvipd_[a-z_]+`).FindAllString(text, -1) {
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if strings.HasSuffix(m, "_seconds"+suf) {
				m = strings.TrimSuffix(m, suf)
			}
		}
		seen[m] = true
	}
	var out []string
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr       string `json:"expr"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	var d dashboard
	if err := json.Unmarshal([]byte(read(t, "../grafana/vipd-dashboard.json")), &d); err != nil {
		t.Fatalf("vipd-dashboard.json: %v", err)
	}
	return d
}

// dashboardExprs are the dashboard's queries with Grafana's variables
// replaced, so promtool can parse them.
func dashboardExprs(d dashboard) []string {
	r := strings.NewReplacer(`$__rate_interval`, "1m", `"$job"`, `"vipd"`, `=~"$instance"`, `=~".*"`, `=~"$vip"`, `=~".*"`)
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, r.Replace(tg.Expr))
		}
	}
	return out
}

// TestMetricsExist: every metric the rules and the dashboard query is
// defined by vipd and documented in docs/operations.md.
func TestMetricsExist(t *testing.T) {
	defined := definedMetrics(t)
	ops := read(t, "../../docs/operations.md")
	for name, text := range map[string]string{
		"vipd-alerts.yml":      read(t, "vipd-alerts.yml"),
		"vipd-dashboard.json":  strings.Join(dashboardExprs(loadDashboard(t)), "\n"),
		"vipd-alerts_test.yml": read(t, "vipd-alerts_test.yml"),
	} {
		used := usedMetrics(text)
		if len(used) < 5 {
			t.Errorf("%s uses only %v", name, used)
		}
		for _, m := range used {
			if !defined[m] {
				t.Errorf("%s uses %s, which agent/metrics.go does not define", name, m)
			}
		}
	}
	for m := range defined {
		if !strings.Contains(ops, "| `"+m+"` |") {
			t.Errorf("docs/operations.md has no row for metric %s", m)
		}
	}
}

// slug is GitHub's anchor for a markdown heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestAlertsDocumentedAndTested: every alert has a runbook section in
// docs/operations.md and promtool cases where it fires and where it stays
// quiet.
func TestAlertsDocumentedAndTested(t *testing.T) {
	rules := read(t, "vipd-alerts.yml")
	tests := read(t, "vipd-alerts_test.yml")
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(read(t, "../../docs/operations.md"), -1) {
		anchors[slug(m[1])] = true
	}
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(rules, -1)
	runbooks := regexp.MustCompile(`runbook_url: "https://github.com/vipd/vipd/blob/main/docs/operations.md#([a-z0-9-]+)"`).FindAllStringSubmatch(rules, -1)
	if len(alerts) < 10 || len(runbooks) != len(alerts) {
		t.Fatalf("%d alerts, %d runbook URLs: every alert needs one", len(alerts), len(runbooks))
	}
	for i, a := range alerts {
		name := a[1]
		if want := strings.ToLower(name); runbooks[i][1] != want {
			t.Errorf("%s: runbook anchor #%s, want #%s", name, runbooks[i][1], want)
		}
		if !anchors[runbooks[i][1]] {
			t.Errorf("%s: docs/operations.md has no section #%s", name, runbooks[i][1])
		}
		// Each case is "alertname: X" followed by its exp_alerts.
		cases := regexp.MustCompile(`alertname: `+name+`\n\s+exp_alerts:( \[\])?`).FindAllStringSubmatch(tests, -1)
		fires, quiet := 0, 0
		for _, c := range cases {
			if c[1] == "" {
				fires++
			} else {
				quiet++
			}
		}
		if fires == 0 || quiet == 0 {
			t.Errorf("%s: %d promtool cases where it fires, %d where it stays quiet; want both", name, fires, quiet)
		}
	}
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard without uid or title")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["job"] == "" || vars["instance"] == "" || vars["vip"] == "" {
		t.Errorf("dashboard variables %v; want datasource, job, instance, vip", vars)
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" || p.Type == "alertlist" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: want queries on ${datasource}", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if tg.Datasource.UID != "${datasource}" || !strings.Contains(tg.Expr, `job="$job"`) {
				t.Errorf("panel %q: query %q not on ${datasource} or not limited to $job", p.Title, tg.Expr)
			}
		}
	}
	if queries < 15 {
		t.Errorf("only %d queries", queries)
	}
}

// TestPromtool runs promtool (Debian package prometheus) on the rules,
// their unit tests, and the dashboard's queries (as recording rules, to
// have them parsed).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus); make alerts-test needs it")
	}
	for _, args := range [][]string{{"check", "rules", "vipd-alerts.yml"}, {"test", "rules", "vipd-alerts_test.yml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range dashboardExprs(loadDashboard(t)) {
		q, _ := json.Marshal(e)
		b.WriteString("      - record: dashboard:query" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + "\n        expr: " + string(q) + "\n")
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("dashboard queries do not parse: %v\n%s", err, out)
	}
}
