package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/upgrade"
)

// UpgradePasses are the passes of a rolling-upgrade run, in order.
var UpgradePasses = []string{"upgrade", "restart", "downgrade"}

// upgradePassTitle says what each pass does.
var upgradePassTitle = map[string]string{
	"upgrade":   "this tree's vipd installed over the previous release's, the running one stopped with SIGTERM (it hands the VIP off), the new one started",
	"restart":   "this tree restarted in place on every node (SIGUSR2, then the same binary): the VIP must not move",
	"downgrade": "the previous release installed, this tree's vipd stopped with SIGUSR2: it asks the binary now installed whether it adopts VIPs, hears no, and hands off",
}

// upgradePkg is the rolling-upgrade lab, run with go test from the
// repository's root.
const upgradePkg = "./lab/upgrade/"

// upgradeTimeout bounds one go test of the rolling-upgrade lab.
const upgradeTimeout = 15 * time.Minute

// UpgradeTrial is one run of lab/upgrade's TestRollingUpgrade: a new lab,
// the previous release rolled to this tree, restarted in place, rolled back.
type UpgradeTrial struct {
	// Run counts from 1.
	Run int
	upgrade.Result
	// Err is set when the test failed or wrote no results; its figures
	// (those it wrote) are not used.
	Err string `json:",omitempty"`
}

// upgradeBench runs the rolling-upgrade lab c.Runs times, one go test per
// run, and appends the runs to r.Upgrade. An interrupt lets the running
// test end (its cleanups remove its lab) and starts no other.
func upgradeBench(ctx context.Context, c Config, r *Results, logf func(string, ...any)) {
	if _, err := os.Stat(upgradePkg); err != nil {
		r.Errors = append(r.Errors, fmt.Sprintf("upgrade: runs go test %s from the repository's root (lab/bench.sh does): %v", upgradePkg, err))
		return
	}
	for run := 1; run <= c.Runs && ctx.Err() == nil; run++ {
		tr := upgradeRun(c, run, logf)
		r.Upgrade = append(r.Upgrade, tr)
		logf("upgrade run %d: %s", run, upgradeLine(tr))
	}
}

// upgradeRun runs TestRollingUpgrade once. The test runs in a process
// group of its own so that an interrupt of the bench does not kill it
// half-way (its lab would stay behind): the bench waits for it instead.
func upgradeRun(c Config, run int, logf func(string, ...any)) UpgradeTrial {
	tr := UpgradeTrial{Run: run}
	dir, err := os.MkdirTemp("", "vipd-bench-upgrade-")
	if err != nil {
		tr.Err = err.Error()
		return tr
	}
	defer os.RemoveAll(dir)
	results := filepath.Join(dir, "upgrade.json")
	args := []string{"test", "-count=1", "-timeout", upgradeTimeout.String(), "-run", "^TestRollingUpgrade$", "-v", upgradePkg}
	logf("upgrade run %d: go %s", run, strings.Join(args, " "))
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "VIPD_NETNS_TESTS=1", "VIPD_BIN="+c.BinDir, upgrade.ResultsEnv+"="+results)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	if c.LogDir != "" {
		p := filepath.Join(c.LogDir, fmt.Sprintf("upgrade-%d", run), "go-test.log")
		if os.MkdirAll(filepath.Dir(p), 0o755) == nil {
			os.WriteFile(p, out.Bytes(), 0o644)
		}
	}
	for _, line := range passLines(out.String()) {
		fmt.Fprintf(c.Log, "    %s\n", line)
	}
	b, readErr := os.ReadFile(results)
	if readErr == nil {
		readErr = json.Unmarshal(b, &tr.Result)
	}
	switch {
	case runErr != nil:
		fmt.Fprintf(c.Log, "upgrade run %d failed; its go test output:\n%s\n", run, out.String())
		tr.Err = fmt.Sprintf("go test: %v%s", runErr, failureLines(out.String()))
	case readErr != nil:
		tr.Err = fmt.Sprintf("the test passed but its results could not be read: %v", readErr)
	case tr.Failed || len(tr.Passes) != len(UpgradePasses):
		tr.Err = fmt.Sprintf("the test passed but its results say failed=%t with %d passes", tr.Failed, len(tr.Passes))
	}
	return tr
}

// passLines returns the test's per-pass summary lines from go test -v
// output.
func passLines(out string) []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.Contains(line, " pass: ") || strings.HasPrefix(line, "--- ") {
			lines = append(lines, line)
		}
	}
	return lines
}

// failureLines is up to the last three lines of go test output before
// its final FAIL lines, joined, for a trial's Err.
func failureLines(out string) string {
	var keep []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line == "FAIL" || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "--- FAIL") || strings.HasPrefix(line, "exit status") {
			continue
		}
		keep = append(keep, line)
	}
	if len(keep) > 3 {
		keep = keep[len(keep)-3:]
	}
	if len(keep) == 0 {
		return ""
	}
	s := ": " + strings.Join(keep, " | ")
	if len(s) > 1000 {
		s = s[:1000] + "..."
	}
	return s
}

// upgradeLine is a run's progress line.
func upgradeLine(tr UpgradeTrial) string {
	var parts []string
	for _, p := range tr.Passes {
		parts = append(parts, fmt.Sprintf("%s %v: %d of %d probes failed (%d resets), moved %d, %d of %d samples with two holders, %d with none",
			p.Name, p.Duration.Round(time.Millisecond), p.Failed, p.Probes, p.Resets, p.Moves, p.TwoHolders, p.Samples, p.NoHolder))
	}
	s := strings.Join(parts, "; ")
	if tr.Err != "" {
		s = "ERROR " + tr.Err + "; " + s
	}
	return s
}

// upgradePasses returns the passes called name of the completed runs, and
// how many runs did not complete.
func (r *Results) upgradePasses(name string) (ps []upgrade.Pass, failed int) {
	runs, failed := completed(r.Upgrade, func(UpgradeTrial) bool { return true }, func(t UpgradeTrial) string { return t.Err })
	for _, t := range runs {
		for _, p := range t.Passes {
			if p.Name == name {
				ps = append(ps, p)
			}
		}
	}
	return ps, failed
}

// upgradeGoal is the rolling upgrade's target.
const upgradeGoal = "rolling upgrade from the previous release and back: 0 failed probes (vipd)"

// upgradeTarget checks the rolling-upgrade runs against upgradeGoal.
func (r *Results) upgradeTarget() Target {
	if len(r.Upgrade) == 0 {
		return Target{Goal: upgradeGoal, Measured: "not measured", Unknown: true}
	}
	var each []string
	worst, n, failedRuns := 0, 0, 0
	for _, name := range UpgradePasses {
		ps, failed := r.upgradePasses(name)
		failedRuns = failed
		w := 0
		for _, p := range ps {
			w = max(w, p.Failed)
		}
		n = max(n, len(ps))
		worst = max(worst, w)
		each = append(each, fmt.Sprintf("%s %d", name, w))
	}
	measured := fmt.Sprintf("at most %d failed probe(s) in a pass (%s), %d runs", worst, strings.Join(each, ", "), n)
	if failedRuns > 0 {
		measured += fmt.Sprintf(", %d run(s) failed", failedRuns)
	}
	return Target{Goal: upgradeGoal, Measured: measured, Met: n > 0 && worst == 0 && failedRuns == 0}
}

// writeUpgrade renders the "Upgrade" section.
func writeUpgrade(w io.Writer, r *Results, command string) {
	if len(r.Upgrade) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Upgrade\n\n")
	if r.UpgradeSource != "" {
		p("Not from the run above: %s. ", r.UpgradeSource)
	} else {
		p("`%s` (part `upgrade`; `PARTS=upgrade make bench` runs only it). ", command)
	}
	prev, ver := "", ""
	for _, t := range r.Upgrade {
		if t.Previous != "" {
			prev, ver = t.Previous, t.Version
		}
	}
	p("The rolling-upgrade lab (lab/upgrade, TestRollingUpgrade), one `go test` per run, each in a new lab: ")
	p("three nodes on one bridge, one L2 VIP, the client probing it every 20 ms (a new connection and an HTTP GET per probe), the VIP's holders read on every node every 20 ms. ")
	p("Each node runs vipd from a path of its own that each step replaces, as a package upgrade does. ")
	p("The cluster starts on the previous release (%s, built from git), then three passes, one node at a time, each step waiting until every node names the same owner and runs the version it should, then 2 s more:\n\n", orUnknown(prev))
	for _, name := range UpgradePasses {
		p("- `%s`: %s.\n", name, upgradePassTitle[name])
	}
	p("\nThis tree: %s. Per pass, min / median / max over the runs:\n\n", orUnknown(ver))
	p("- **failed probes**: probes through the VIP that failed in the pass; **resets**: those whose connection, open when the VIP moved, the new holder reset (the lab allows one per move, none in place).\n")
	p("- **two holders**, **no holder**: holder samples with two or more nodes holding the VIP, and with none (the lab allows two only while a stopping node hands off, make-before-break).\n")
	p("- **moves**: changes of the VIP's holder.\n\n")
	p("| pass | runs | probes | failed probes | resets | moves | holder samples | two holders | no holder | duration (ms) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range UpgradePasses {
		ps, failed := r.upgradePasses(name)
		if len(ps) == 0 && failed == 0 {
			continue
		}
		c := func(f func(upgrade.Pass) int) string {
			return count(stat(ps, func(p upgrade.Pass) time.Duration { return time.Duration(f(p)) }))
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, runsCell(len(ps), failed),
			c(func(p upgrade.Pass) int { return p.Probes }), c(func(p upgrade.Pass) int { return p.Failed }),
			c(func(p upgrade.Pass) int { return p.Resets }), c(func(p upgrade.Pass) int { return p.Moves }),
			c(func(p upgrade.Pass) int { return p.Samples }), c(func(p upgrade.Pass) int { return p.TwoHolders }),
			c(func(p upgrade.Pass) int { return p.NoHolder }), mmm(stat(ps, func(p upgrade.Pass) time.Duration { return p.Duration })))
	}
	p("\nFirst failed probe per pass:\n\n")
	n := 0
	for _, t := range r.Upgrade {
		for _, ps := range t.Passes {
			if t.Err == "" && ps.FirstFailure != "" {
				p("- run %d, %s (%d failed): %s\n", t.Run, ps.Name, ps.Failed, ps.FirstFailure)
				n++
			}
		}
	}
	if n == 0 {
		p("- none\n")
	}
	p("\nRuns that did not complete:\n\n")
	n = 0
	for _, t := range r.Upgrade {
		if t.Err != "" {
			p("- run %d: %s\n", t.Run, t.Err)
			n++
		}
	}
	if n == 0 {
		p("- none\n")
	}
	p("\n")
}
