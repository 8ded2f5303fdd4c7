package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vipd/vipd/agent/config"
)

// Machine describes where the benchmarks ran.
type Machine struct {
	// NProc is the number of CPUs usable.
	NProc int
	// CPU is the model name from /proc/cpuinfo.
	CPU string
	// Kernel is `uname -sr`.
	Kernel string
	// Go is `go version`.
	Go string
	// Keepalived and BIRD are the first lines of their version output.
	Keepalived, BIRD string
}

// ThisMachine describes the machine it runs on; what cannot be read is
// "unknown".
func ThisMachine() Machine {
	m := Machine{NProc: runtime.NumCPU(), CPU: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU = cpuModel(string(b))
	}
	first := func(name string, args ...string) string {
		out, _ := exec.Command(name, args...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if line == "" {
			return "unknown"
		}
		return strings.TrimSpace(line)
	}
	m.Kernel = first("uname", "-sr")
	m.Go = first("go", "version")
	m.Keepalived = first("keepalived", "--version")
	m.BIRD = first("bird", "--version")
	return m
}

// MeasuredOn is the machine the results were measured on: the one Run
// recorded, else (older results) the one this runs on.
func (r *Results) MeasuredOn() Machine {
	if r.Machine != nil {
		return *r.Machine
	}
	return ThisMachine()
}

func cpuModel(cpuinfo string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// GoBench is one result line of `go test -bench -benchmem`.
type GoBench struct {
	// Pkg is the package, from the "pkg:" line before it.
	Pkg string
	// Name as printed, GOMAXPROCS suffix included.
	Name string
	// Iterations run.
	N int64
	// NsPerOp, BytesPerOp and AllocsPerOp (-1 when not printed).
	NsPerOp               float64
	BytesPerOp, AllocsPer int64
	// Other are the benchmark's own metrics (b.ReportMetric), as printed:
	// "3.47 B/conn, 69393 B/set".
	Other string
}

// ConnsPkg is the package whose benchmarks get a section of their own.
const ConnsPkg = "github.com/vipd/vipd/conns"

// ParseGoBench reads `go test -bench` output and returns its result lines.
func ParseGoBench(out string) []GoBench {
	var bs []GoBench
	pkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		n, err1 := strconv.ParseInt(f[1], 10, 64)
		ns, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		b := GoBench{Pkg: pkg, Name: f[0], N: n, NsPerOp: ns, BytesPerOp: -1, AllocsPer: -1}
		var other []string
		for i := 4; i+1 < len(f); i += 2 {
			v, err := strconv.ParseInt(f[i], 10, 64)
			switch {
			case f[i+1] == "B/op" && err == nil:
				b.BytesPerOp = v
			case f[i+1] == "allocs/op" && err == nil:
				b.AllocsPer = v
			default:
				other = append(other, f[i]+" "+f[i+1])
			}
		}
		b.Other = strings.Join(other, ", ")
		bs = append(bs, b)
	}
	return bs
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10)
}

// mmm formats min / median / max in milliseconds, or "-" without values.
func mmm(s Stats) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s", ms(s.Min), ms(s.Median), ms(s.Max))
}

// trials returns the completed trials of system and scenario, and how
// many did not complete.
func (r *Results) trials(system, scenario string) (ok []Trial, failed int) {
	return completed(r.Failover, func(t Trial) bool { return t.System == system && t.Scenario == scenario },
		func(t Trial) string { return t.Err })
}

// runsCell is a table's runs column: the completed runs, and those that
// did not complete.
func runsCell(ok, failed int) string {
	if failed > 0 {
		return fmt.Sprintf("%d (+%d failed)", ok, failed)
	}
	return strconv.Itoa(ok)
}

// completed returns the trials in all that match and completed (errOf
// ""), and how many of those that match did not.
func completed[T any](all []T, match func(T) bool, errOf func(T) string) (ok []T, failed int) {
	for _, t := range all {
		if !match(t) {
			continue
		}
		if errOf(t) != "" {
			failed++
			continue
		}
		ok = append(ok, t)
	}
	return ok, failed
}

// moved returns the trials in which another node answered the client
// (takeover is measured only for those: in an in-place scenario the VIP
// may stay on its node).
func moved(ts []Trial) []Trial {
	var out []Trial
	for _, t := range ts {
		if t.To != "" {
			out = append(out, t)
		}
	}
	return out
}

// stat summarizes f over the trials ts.
func stat[T any](ts []T, f func(T) time.Duration) Stats {
	var ds []time.Duration
	for _, t := range ts {
		ds = append(ds, f(t))
	}
	return Summarize(ds)
}

func gapOf(t Trial) time.Duration      { return t.Gap }
func electedOf(t Trial) time.Duration  { return t.Elected }
func holdingOf(t Trial) time.Duration  { return t.Holding }
func takeoverOf(t Trial) time.Duration { return t.Takeover }
func splitOf(t Trial) time.Duration    { return t.Split }
func healOf(t Trial) time.Duration     { return t.SplitAfterHeal }
func failedOf(t Trial) time.Duration   { return time.Duration(t.Failed) }

// writeBreakdown writes where vipd's failover time goes, per scenario
// that moves the VIP, from the trials' log-derived times (breakdown).
func writeBreakdown(p func(string, ...any), r *Results) {
	type row struct {
		sc      string
		elected Stats
		holding Stats
		over    Stats
	}
	var rows []row
	for _, sc := range []string{"crash", "linkdown", "partition", "health"} {
		ts, _ := r.trials("vipd", sc)
		var withLogs []Trial
		for _, t := range moved(ts) {
			if t.Elected > 0 && t.Holding > 0 {
				withLogs = append(withLogs, t)
			}
		}
		if len(withLogs) == 0 {
			continue
		}
		rows = append(rows, row{sc, stat(withLogs, electedOf), stat(withLogs, holdingOf), stat(withLogs, takeoverOf)})
	}
	if len(rows) == 0 {
		return
	}
	p("\n### Where vipd's failover time goes\n\n")
	p("From the nodes' logs (one host, one clock), times from the event in ms, min / median / max over the runs that moved the VIP:\n\n")
	p("- **elected**: the first `ownership change` away from the old owner logged by another node: the failure detected (or the owner's new state seen) and the election run.\n")
	p("- **holding**: the new owner's `holding VIP`: the claim (its fence's first evidence, the address added, the gratuitous ARP sent).\n")
	p("- **answered**: the takeover above: the client's next probe through its ARP entry, updated by the gratuitous ARP.\n\n")
	p("| scenario | elected | holding | answered |\n|---|---|---|---|\n")
	for _, x := range rows {
		p("| %s | %s | %s | %s |\n", x.sc, mmm(x.elected), mmm(x.holding), mmm(x.over))
	}
	p("\nWith `failure_detection = \"fast\"` the lease decides detection (docs/design.md, \"The lease\"): the owner sends a heartbeat every 100 ms; ")
	p("a crashed vipd's membership port refuses the first TCP probe of a peer that misses its heartbeats (crash), a silent owner is gone once a majority has not heard it for 400 ms (link down, cut), ")
	p("and an owner cut off releases by itself after 300 ms without a majority's answer. ")
	p("An unhealthy apiserver is seen after `fall` failed checks (%d x %v), and the owner then hands the VIP over make-before-break. ", config.DefaultHealthFall, config.DefaultHealthInterval)
	p("Between elected and holding, the successor waits for its fence's first evidence (one answer, about a millisecond) and adds the address; the gratuitous ARP goes out at once.\n")
}

// Target is one of the goals in the project brief with what was measured.
type Target struct {
	// Goal as stated.
	Goal string
	// Measured says what was measured, with the figure.
	Measured string
	// Met: the measurement meets the goal. Unknown when nothing was
	// measured.
	Met, Unknown bool
}

// Targets checks the measurements against the project's goals.
func (r *Results) Targets() []Target {
	var ts []Target
	add := func(goal, measured string, met, unknown bool) {
		ts = append(ts, Target{goal, measured, met, unknown})
	}
	if h, _ := r.trials("vipd", "handoff"); len(h) > 0 {
		worst := 0
		for _, t := range h {
			worst = max(worst, t.Failed)
		}
		add("planned handoff: zero failed probes (vipd)", fmt.Sprintf("at most %d failed probe(s) in a run, %d runs", worst, len(h)), worst == 0, false)
	} else {
		add("planned handoff: zero failed probes (vipd)", "not measured", false, true)
	}
	if rs, failed := r.trials("vipd", "restart"); len(rs) > 0 || failed > 0 {
		worst, moved := 0, 0
		for _, t := range rs {
			worst = max(worst, t.Failed)
			if t.To != "" && t.To != t.From {
				moved++
			}
		}
		measured := fmt.Sprintf("at most %d failed probe(s) in a run, the VIP moved in %d of %d runs", worst, moved, len(rs))
		if failed > 0 {
			measured += fmt.Sprintf(", %d run(s) failed", failed)
		}
		add("agent restart on the owner: zero failed probes, the VIP stays (vipd)", measured, worst == 0 && moved == 0 && failed == 0, false)
	} else {
		add("agent restart on the owner: zero failed probes, the VIP stays (vipd)", "not measured", false, true)
	}
	ts = append(ts, r.upgradeTarget())
	if c, _ := r.trials("vipd", "crash"); len(c) > 0 {
		s := stat(c, takeoverOf)
		add("agent crash: new owner answers, median under 0.5 s (vipd, fast)",
			fmt.Sprintf("median time to the new owner answering %s ms (client gap median %s ms: the crashed node keeps the address and answers)",
				ms(s.Median), ms(stat(c, gapOf).Median)), s.Median < 500*time.Millisecond, false)
	} else {
		add("agent crash: new owner answers, median under 0.5 s (vipd, fast)", "not measured", false, true)
	}
	for _, g := range []struct {
		scenario, goal string
		bound          time.Duration
	}{
		{"linkdown", "owner link down: median client gap under 0.5 s (vipd, fast)", 500 * time.Millisecond},
		{"partition", "owner cut off at the bridge: median client gap under 0.5 s (vipd, fast)", 500 * time.Millisecond},
		{"health", "owner's health endpoint failing: median client gap under 1.5 s (vipd, default health settings)", 1500 * time.Millisecond},
	} {
		if c, _ := r.trials("vipd", g.scenario); len(c) > 0 {
			s := stat(c, gapOf)
			add(g.goal, fmt.Sprintf("median gap %s ms over %d runs", ms(s.Median), s.N), s.Median < g.bound, false)
		} else {
			add(g.goal, "not measured", false, true)
		}
	}
	for _, g := range []struct {
		scenario, goal string
		bound          time.Duration
	}{
		{"addrdel", "address removed on the owner: VIP answers again within 1 s (vipd)", time.Second},
		{"ifrecreate", "owner interface deleted and recreated: VIP answers again within 2 s (vipd)", 2 * time.Second},
	} {
		ts, failed := r.trials("vipd", g.scenario)
		if len(ts) == 0 && failed == 0 {
			add(g.goal, "not measured", false, true)
			continue
		}
		s := stat(ts, gapOf)
		measured := fmt.Sprintf("longest gap %s ms over %d runs", ms(s.Max), s.N)
		if failed > 0 {
			measured += fmt.Sprintf(", %d run(s) not answered again", failed)
		}
		add(g.goal, measured, failed == 0 && s.Max < g.bound, false)
	}
	var healed []Trial
	for _, sc := range []string{"partition", "linkdown"} {
		t, _ := r.trials("vipd", sc)
		healed = append(healed, t...)
	}
	if len(healed) > 0 {
		s := stat(healed, healOf)
		add("split-brain time 0 after partitions heal (vipd)", fmt.Sprintf("at most %s ms with two holders after the heal, %d partition and link-down runs", ms(s.Max), s.N), s.Max == 0, false)
	} else {
		add("split-brain time 0 after partitions heal (vipd)", "not measured", false, true)
	}
	var cut []time.Duration
	for _, t := range r.BGP {
		if t.Scenario == "partition-all-bfd" && t.Err == "" {
			cut = append(cut, t.ClientGap)
		}
	}
	if len(cut) > 0 {
		s := Summarize(cut)
		add("BGP cable cut with BFD: median client gap under 0.5 s (announce all, one path at the router)",
			fmt.Sprintf("median %s ms over %d runs", ms(s.Median), s.N), s.Median < 500*time.Millisecond, false)
	} else {
		add("BGP cable cut with BFD: median client gap under 0.5 s (announce all, one path at the router)", "not measured", false, true)
	}
	ts = append(ts, r.fenceTargets()...)
	ts = append(ts, r.k8sTargets()...)
	fp := r.Footprint
	if fp != nil && fp.Idle1.Window > 0 {
		add("idle RSS under 40 MiB (vipd, 1 VIP)", fmt.Sprintf("%.1f MiB", float64(fp.Idle1.RSSKiB)/1024), fp.Idle1.RSSKiB < 40*1024, false)
		add("idle CPU under 1% of a core (vipd, 1 VIP)", fmt.Sprintf("%.2f%%", fp.Idle1.CPUPercent), fp.Idle1.CPUPercent < 1, false)
	} else {
		add("idle RSS under 40 MiB (vipd, 1 VIP)", "not measured", false, true)
		add("idle CPU under 1% of a core (vipd, 1 VIP)", "not measured", false, true)
	}
	ts = append(ts, r.coldTargets()...)
	if fp != nil && len(fp.Ready) > 0 {
		s := Summarize(fp.Ready)
		add("READY under 1 s after start, peers reachable", fmt.Sprintf("max %s ms over %d starts", ms(s.Max), s.N), s.Max < time.Second, false)
	} else {
		add("READY under 1 s after start, peers reachable", "not measured", false, true)
	}
	return ts
}

// Markdown renders the report. svg is the chart's file name next to it.
func Markdown(r *Results, m Machine, gb []GoBench, command, svg string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Benchmarks\n\n")
	p("Written by `%s` (lab/bench.sh, lab/bench/cmd/vipbench) from the measurements of one run; do not edit by hand.\n", command)
	p("Run %s, %s; load average %s at the start, %s at the end.\n\n", r.Started.Format("2006-01-02 15:04 MST"),
		r.Finished.Sub(r.Started).Round(time.Second), orUnknown(r.LoadBefore), orUnknown(r.LoadAfter))
	p("## Machine\n\n| | |\n|---|---|\n")
	p("| CPUs (nproc) | %d |\n| CPU | %s |\n| kernel | %s |\n| Go | %s |\n| vipd measured | %s |\n| keepalived | %s |\n| BIRD | %s |\n\n",
		m.NProc, m.CPU, m.Kernel, m.Go, orUnknown(r.Vipd), m.Keepalived, m.BIRD)
	p("## Command\n\n```\n%s\n```\n\n", command)
	p("Knobs: `RUNS=2 SCENARIOS=handoff,crash SYSTEMS=vipd PARTS=failover,bgp make bench` for a quick run (then this file holds only those).\n\n")

	p("## Targets\n\n| goal | measured | met |\n|---|---|---|\n")
	for _, t := range r.Targets() {
		met := "no"
		switch {
		case t.Unknown:
			met = "not measured"
		case t.Met:
			met = "yes"
		}
		p("| %s | %s | %s |\n", t.Goal, t.Measured, met)
	}
	p("\n")

	if r.hasScenario(Scenarios) {
		p("## L2 failover: vipd vs keepalived\n\n")
		p("![client-observed gap and takeover per scenario, min/median/max](%s)\n\n", svg)
		p("Three nodes on one bridge, VIP 192.0.2.10/32, client probing it every %v (TCP connect + HTTP GET, %v timeout). ", probeInterval, probeTimeout)
		p("Runs per scenario and system: %d. All times in ms as min / median / max.\n\n", r.Runs)
		p("- **gap**: longest run of failed probes between the event and the heal (first failed probe to the next answered one).\n")
		p("- **takeover**: event to the first probe answered by another node (runs in which the VIP stayed on its node are left out; `-` when it never moved).\n")
		p("- **two holders**: time two nodes had the VIP on their interface at once (addresses sampled every %v on all nodes), over the whole trial; **after heal**: the part after the failure was undone.\n\n", sampleEvery)
		p("| scenario | system | runs | gap | takeover | failed probes (median) | two holders | two holders after heal |\n|---|---|---|---|---|---|---|---|\n")
		for _, sc := range Scenarios {
			for _, sys := range Systems {
				ts, failed := r.trials(sys, sc)
				if len(ts) == 0 && failed == 0 {
					continue
				}
				runs := runsCell(len(ts), failed)
				fs := stat(ts, failedOf)
				p("| %s | %s | %s | %s | %s | %d | %s | %s |\n", sc, sys, runs, mmm(stat(ts, gapOf)), mmm(stat(moved(ts), takeoverOf)),
					int64(fs.Median), mmm(stat(ts, splitOf)), mmm(stat(ts, healOf)))
			}
		}
		p("\nScenarios:\n\n")
		for _, sc := range Scenarios {
			p("- `%s`: %s.", sc, ScenarioTitle[sc])
			if src := r.ScenarioSources[sc]; src != "" {
				p(" Not from the run above: %s.", src)
			}
			p("\n")
		}
		writeBreakdown(p, r)
		p("\nvipd: `failure_detection = \"fast\"`, `rejoin_interval = \"2s\"`, `preempt = false`, health check GET %s with the default settings (every %v, timeout %v, rise %d, fall %d). ",
			healthURL, config.DefaultHealthInterval, config.DefaultHealthTimeout, config.DefaultHealthRise, config.DefaultHealthFall)
		p("keepalived: VRRP `advert_int 1`, priorities 150/100/50 (preempting), `vrrp_script` curl of the same URL every 1 s, fall 3, rise 2, weight -100; ")
		p("started as `keepalived --dont-fork --vrrp --dont-respawn` with its own pid files; a crash is SIGKILL of the VRRP child, then the parent. ")
		p("The crashed agent's node keeps the address and its HTTP server, so the client keeps being answered by it until the new owner's gratuitous ARP: the gap can be 0 while takeover shows when the new owner answered.\n\n")
		p("Failed trials:\n\n")
		n := 0
		for _, t := range r.Failover {
			if t.Err != "" && has(Scenarios, t.Scenario) {
				p("- %s %s run %d: %s\n", t.System, t.Scenario, t.Run, t.Err)
				n++
			}
		}
		if n == 0 {
			p("- none\n")
		}
		p("\n")
		lost, resets := 0, false
		for _, t := range r.Failover {
			if t.System == "vipd" && t.Scenario == "handoff" && t.Err == "" && t.Failed > 0 {
				if lost == 0 {
					p("vipd planned handoffs that lost probes (the first failure of each):\n\n")
				}
				p("- run %d (%s to %s): %d probe(s), %s\n", t.Run, t.From, t.To, t.Failed, t.FirstFailure)
				lost++
				resets = resets || strings.Contains(t.FirstFailure, "connection reset")
			}
		}
		if lost > 0 {
			p("\n")
		}
		if resets {
			p("A reset (\"connection reset by peer\") is a probe whose connection was open to the old owner when the client switched to the new owner's MAC: the new owner has no such connection and answers with a reset. Moving an L2 address cannot carry open TCP connections.\n\n")
		}
	}

	writeCut(&b, r, command)
	writeStress(&b, r, command)
	writeK8s(&b, r, command)

	if len(r.BGP) > 0 {
		p("## BGP: route at the router, gap at the client\n\n")
		p("vipd announces 203.0.113.10/32 to %s in the client namespace, `hold_time = \"3s\"`, `keepalive = \"1s\"`, `graceful_shutdown = \"0s\"` (with the default 5s, a withdraw first keeps the route, depreferenced, for that long). ", m.BIRD)
		p("BIRD installs its best path only (no `merge paths`: one next hop, like `maximum-paths 1`); BFD, where named, is 100 ms x 3 on both sides (`protocol bfd`, `bfd yes`; `bfd = true`, `bfd_min_interval = \"100ms\"`). ")
		p("A cut detaches the node's port from the bridge in the switch namespace: both ends keep carrier. ")
		p("BIRD's table polled every 20 ms with birdc; the client probes the VIP through BIRD's kernel route every %v (%v timeout). Times in ms, min / median / max.\n\n", bgpProbeInterval, bgpProbeTimeout)
		p("- **route gone**: event to BIRD having no path via the node it forwarded to.\n")
		p("- **best path elsewhere**: event to BIRD's best path being via another node.\n")
		p("- **client gap**: longest run of failed probes after the event, first failed probe to the next answered one (0: none failed).\n\n")
		p("| event | runs | route gone | best path elsewhere | client gap | probes lost (median) |\n|---|---|---|---|---|---|\n")
		for _, sc := range BGPScenarios {
			var gone, nw, gap []time.Duration
			var lost []time.Duration
			failed := 0
			for _, t := range r.BGP {
				if t.Scenario != sc {
					continue
				}
				if t.Err != "" {
					failed++
					continue
				}
				gone = append(gone, t.RouteGone)
				if t.NewRoute > 0 {
					nw = append(nw, t.NewRoute)
				}
				gap = append(gap, t.ClientGap)
				lost = append(lost, time.Duration(t.Lost))
			}
			if len(gone) == 0 && failed == 0 {
				continue
			}
			runs := strconv.Itoa(len(gone))
			if failed > 0 {
				runs += fmt.Sprintf(" (+%d failed)", failed)
			}
			p("| %s | %s | %s | %s | %s | %d |\n", BGPScenarioTitle[sc], runs, mmm(Summarize(gone)), mmm(Summarize(nw)), mmm(Summarize(gap)), int64(Summarize(lost).Median))
		}
		for _, t := range r.BGP {
			if t.Err != "" {
				p("\n- failed: %s run %d: %s", t.Scenario, t.Run, t.Err)
			}
		}
		p("\n\n")
	}

	if fp := r.Footprint; fp != nil {
		p("## Footprint (vipd)\n\n")
		p("Three nodes; the largest RSS and CPU share of the three vipd processes over %v idle, %v of churn. `failure_detection = \"fast\"` unless noted; vipd with its default GOMAXPROCS=1. Churn: `vipctl withdraw` / `restore` on the nodes in turn every 500 ms. The 100 VIPs each have the same HTTP health check (vipd runs one shared checker per node).\n\n", idleWindow, churnWindow)
		p("| | RSS (MiB) | CPU (%% of a core) |\n|---|---|---|\n")
		for _, u := range []struct {
			label string
			u     Usage
		}{{"1 VIP, idle", fp.Idle1}, {"1 VIP, churn", fp.Churn1}, {"1 VIP, idle, failure_detection \"lan\"", fp.Idle1LAN}, {"100 VIPs, idle", fp.Idle100}, {"100 VIPs, churn", fp.Churn100}} {
			if u.u.Window == 0 {
				p("| %s | - | - |\n", u.label)
				continue
			}
			p("| %s | %.1f | %.2f |\n", u.label, float64(u.u.RSSKiB)/1024, u.u.CPUPercent)
		}
		p("\n| binary | size (MiB) |\n|---|---|\n| bin/vipd | %.1f |\n| bin/vipctl | %.1f |\n\n", float64(fp.VipdBytes)/(1<<20), float64(fp.VipctlBytes)/(1<<20))
		p("Start to READY=1 (exec to the notification on a fake `$NOTIFY_SOCKET`), third node joining two running peers: %s ms (min / median / max of %d).\n\n",
			mmm(Summarize(fp.Ready)), len(fp.Ready))
		for _, e := range fp.Errors {
			p("- error: %s\n", e)
		}
		if len(fp.Errors) > 0 {
			p("\n")
		}
	}

	if sc := r.Scale; sc != nil {
		p("## Scale\n\n")
		runs := "one run"
		if n := max(len(sc.Starts), len(sc.Leaves)); n > 1 {
			runs = fmt.Sprintf("%d runs, each in a new lab (min / median / max, then every run in order)", n)
		}
		p("%d node namespaces, %d L2 VIPs (no health check), %s. Settled: every VIP on exactly one node, holding for %v (the time is when it was first reached).\n\n", sc.Nodes, sc.VIPs, runs, stableFor)
		if sc.Source != "" {
			p("Not from the run above: %s.\n\n", sc.Source)
		}
		p("| | ms |\n|---|---|\n")
		if len(sc.Starts) > 0 {
			p("| start of every vipd to settled | %s (%s) |\n", mmm(Summarize(sc.Starts)), msList(sc.Starts))
		} else if sc.Start > 0 {
			p("| start of every vipd to settled | %s |\n", ms(sc.Start))
		}
		if len(sc.Leaves) > 0 {
			p("| SIGTERM to the node holding most VIPs (%d in the first run) to settled on the others | %s (%s) |\n", sc.Moved, mmm(Summarize(sc.Leaves)), msList(sc.Leaves))
		} else if sc.Leave > 0 {
			p("| SIGTERM to the node holding most VIPs (%d) to settled on the others | %s |\n", sc.Moved, ms(sc.Leave))
		}
		p("\n")
		for _, e := range sc.Errors {
			p("- error: %s\n", e)
		}
		if len(sc.Errors) > 0 {
			p("\n")
		}
	}

	if len(r.ColdStart) > 0 {
		writeColdStart(p, r)
	}

	writeUpgrade(&b, r, command)

	if kc := r.KubeClient; kc != nil {
		writeKubeClient(p, kc)
	}

	var agentBench, connsBench []GoBench
	for _, g := range gb {
		if g.Pkg == ConnsPkg {
			connsBench = append(connsBench, g)
		} else {
			agentBench = append(agentBench, g)
		}
	}
	if len(agentBench) > 0 {
		p("## Go benchmarks\n\n`go test -run '^$' -bench . -benchmem ./agent/`\n\n")
		p("| benchmark | iterations | ns/op | B/op | allocs/op |\n|---|---|---|---|---|\n")
		for _, g := range agentBench {
			p("| %s | %d | %.0f | %d | %d |\n", g.Name, g.N, g.NsPerOp, g.BytesPerOp, g.AllocsPer)
		}
		p("\n")
	}
	if len(connsBench) > 0 {
		p("## Client connections (conns)\n\n`VIPD_NETNS_TESTS=1 go test -run '^$' -bench . -benchmem ./conns/` (as root)\n\n")
		p("What publishing a VIP's client connections, resetting them and closing them costs (docs/design.md, \"Client connections at a failover\"). ")
		p("BenchmarkList lists one VIP's connections on a host with 42,020 TCP sockets; its `library` line is vishvananda/netlink's SocketDiagTCP for the same answer. ")
		p("BenchmarkDelta is a holder's second after 1%% of its connections changed; B/set and B/delta are encoded sizes. ")
		p("BenchmarkDestroy closes 1,000 connections per operation; BenchmarkPoke sends 20,000 pokes per operation, unpaced.\n\n")
		p("| benchmark | iterations | ns/op | B/op | allocs/op | other |\n|---|---|---|---|---|---|\n")
		for _, g := range connsBench {
			p("| %s | %d | %.0f | %d | %d | %s |\n", g.Name, g.N, g.NsPerOp, g.BytesPerOp, g.AllocsPer, g.Other)
		}
		p("\n")
	}
	p("%s", RefreshSection)
	if len(r.Errors) > 0 {
		p("## Parts that did not run\n\n")
		for _, e := range r.Errors {
			p("- %s\n", e)
		}
		p("\n")
	}
	return b.String()
}

// msList formats ds as "6812, 7109, 42713" (ms).
func msList(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, ms(d))
	}
	return strings.Join(parts, ", ")
}

// coldTargets checks the cold-start trials and the scale runs against
// their goals.
func (r *Results) coldTargets() []Target {
	var ts []Target
	goal := fmt.Sprintf("cold start: VIP answered by the first ready apiserver within %v of it turning ready, every run (%v nodes)", coldTarget, ColdSizes)
	if len(r.ColdStart) == 0 {
		ts = append(ts, Target{Goal: goal, Measured: "not measured", Unknown: true})
	} else {
		var ok []time.Duration
		failed := 0
		for _, t := range r.ColdStart {
			if t.Err != "" {
				failed++
				continue
			}
			ok = append(ok, t.Answered)
		}
		s := Summarize(ok)
		measured := fmt.Sprintf("max %s ms over %d runs", ms(s.Max), s.N)
		if failed > 0 {
			measured += fmt.Sprintf(", %d run(s) failed", failed)
		}
		ts = append(ts, Target{Goal: goal, Measured: measured, Met: failed == 0 && s.N > 0 && s.Max <= coldTarget})
	}
	goal = fmt.Sprintf("%d nodes, %d VIPs: settled within %v of starting every vipd, every run", scaleNodes, scaleVIPs, scaleTarget)
	switch sc := r.Scale; {
	case sc == nil || (len(sc.Starts) == 0 && len(sc.Errors) == 0):
		ts = append(ts, Target{Goal: goal, Measured: "not measured", Unknown: true})
	default:
		s := Summarize(sc.Starts)
		measured := fmt.Sprintf("max %s ms over %d runs", ms(s.Max), s.N)
		if len(sc.Errors) > 0 {
			measured += fmt.Sprintf(", %d run(s) failed", len(sc.Errors))
		}
		ts = append(ts, Target{Goal: goal, Measured: measured, Met: len(sc.Errors) == 0 && s.N > 0 && s.Max <= scaleTarget})
	}
	return ts
}

// writeColdStart renders the cold-start section.
func writeColdStart(p func(string, ...any), r *Results) {
	p("## Cold start\n\n")
	p("Every vipd of a cluster started at once (power restored), every apiserver unready (the lab HTTP server's `/readyz` answering 503, health check at the defaults), then one apiserver turning ready: at once, or %v after the start, once the bootstrap fallback has given the VIP to a node (then the first ready apiserver is another node's). Measured: from the apiserver turning ready to the first of %d probes in a row (every %v through the VIP, from the client) answered by its node. Target: %v.\n\n",
		ColdDelays[len(ColdDelays)-1], servedRun, probeInterval, coldTarget)
	if r.ColdStartSource != "" {
		p("Not from the run above: %s.\n\n", r.ColdStartSource)
	}
	p("| nodes | first apiserver ready | runs | answered (ms, min / median / max) | every run (ms) |\n|---|---|---|---|---|\n")
	for _, n := range ColdSizes {
		for _, d := range ColdDelays {
			var ok []time.Duration
			failed := 0
			for _, t := range r.ColdStart {
				if t.Nodes != n || t.Delay != d {
					continue
				}
				if t.Err != "" {
					failed++
					continue
				}
				ok = append(ok, t.Answered)
			}
			if len(ok) == 0 && failed == 0 {
				continue
			}
			when := "with the vipds"
			if d > 0 {
				when = fmt.Sprintf("%v after, a bootstrap holder elected", d)
			}
			runs := strconv.Itoa(len(ok))
			if failed > 0 {
				runs += fmt.Sprintf(" (+%d failed)", failed)
			}
			p("| %d | %s | %s | %s | %s |\n", n, when, runs, mmm(Summarize(ok)), msList(ok))
		}
	}
	p("\n")
	for _, t := range r.ColdStart {
		if t.Err != "" {
			p("- failed: %d nodes, ready after %v, run %d: %s\n", t.Nodes, t.Delay, t.Run, t.Err)
		}
	}
	p("\n")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// writeKubeClient renders the Kubernetes client comparison.
func writeKubeClient(p func(string, ...any), kc *KubeClient) {
	p("## Kubernetes client (node watch)\n\n")
	p("Measured by %s: `cmd/vipd` built three ways from the same tree (stripped, as `make build`; not the binary measured above); "+
		"each run: one node, one L2 VIP, idle for %d s after 10 s of start-up while a fake apiserver "+
		"(lab/kubeclient/fakeapiserver) cordons and uncordons the watched Node every 2 s; RSS at start is `vipd --version` "+
		"(package initialisation only).\n\n", kc.Source, kc.Seconds)
	p("| vipd built | binary (MiB) | modules linked | RSS at start (MiB) | idle RSS (MiB, min / median / max) | idle CPU (%% of a core, median) |\n|---|---|---|---|---|---|\n")
	mib := func(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }
	for _, v := range kc.Variants {
		rss := slices.Sorted(slices.Values(v.IdleRSSKiB))
		cpu := slices.Sorted(slices.Values(v.CPUPercent))
		idle, c := "-", "-"
		if n := len(rss); n > 0 {
			idle = fmt.Sprintf("%s / %s / %s", mib(rss[0]), mib(rss[n/2]), mib(rss[n-1]))
		}
		if n := len(cpu); n > 0 {
			c = fmt.Sprintf("%.2f", cpu[n/2])
		}
		p("| %s | %.1f | %d | %s | %s | %s |\n", v.Name, float64(v.Bytes)/(1<<20), v.Modules, mib(v.StartRSSKiB), idle, c)
	}
	p("\n")
}
