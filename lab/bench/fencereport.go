package bench

import (
	"fmt"
	"strings"
	"time"
)

// hasScenario reports whether r holds a failover trial of one of
// scenarios.
func (r *Results) hasScenario(scenarios []string) bool {
	for _, t := range r.Failover {
		if has(scenarios, t.Scenario) {
			return true
		}
	}
	return false
}

// CutRow summarises the trials of one system in one membership cut
// scenario.
type CutRow struct {
	Scenario, System string
	// Runs completed, and Failed that did not.
	Runs, Failed int
	// Moved counts the runs in which another node answered the client;
	// WithSplit those with any time with two holders.
	Moved, WithSplit int
	// Gap, Takeover (runs that moved), Release and Claim (runs in which
	// they happened), Split and SplitAfterHeal, over the completed runs.
	Gap, Takeover, Release, Claim, Split, SplitAfterHeal Stats
}

// CutRows summarises the membership cut trials, in scenario and system
// order; a pair without trials has no row.
func (r *Results) CutRows() []CutRow {
	var rows []CutRow
	for _, sc := range CutScenarios {
		for _, sys := range Systems {
			ts, failed := r.trials(sys, sc)
			if len(ts) == 0 && failed == 0 {
				continue
			}
			row := CutRow{Scenario: sc, System: sys, Runs: len(ts), Failed: failed}
			var rel, claim []time.Duration
			for _, t := range ts {
				if t.To != "" {
					row.Moved++
				}
				if t.Split > 0 {
					row.WithSplit++
				}
				if t.Release > 0 {
					rel = append(rel, t.Release)
				}
				if t.Claim > 0 {
					claim = append(claim, t.Claim)
				}
			}
			row.Gap, row.Takeover = stat(ts, gapOf), stat(moved(ts), takeoverOf)
			row.Release, row.Claim = Summarize(rel), Summarize(claim)
			row.Split, row.SplitAfterHeal = stat(ts, splitOf), stat(ts, healOf)
			rows = append(rows, row)
		}
	}
	return rows
}

// StressRow summarises the stress trials of one system.
type StressRow struct {
	System string
	// Runs completed, and Failed that did not.
	Runs, Failed int
	// Moved counts the runs in which the VIP left its owner at some
	// sample; Off and Samples add up the holder samples off the owner and
	// all of them.
	Moved, Off, Samples int
	// Dead, Gone, Fenced (vipd) and StateChanges (keepalived) add up the
	// runs' counts.
	Dead, Gone, Fenced, StateChanges int
	// ProbesFailed and Probes add up the client's probes during the loss.
	ProbesFailed, Probes int
}

// StressRows summarises the stress trials per system, in Systems order.
func (r *Results) StressRows() []StressRow {
	var rows []StressRow
	for _, sys := range Systems {
		row := StressRow{System: sys}
		for _, t := range r.Stress {
			if t.System != sys {
				continue
			}
			if t.Err != "" {
				row.Failed++
				continue
			}
			row.Runs++
			if t.Moved() {
				row.Moved++
			}
			row.Off += t.Off
			row.Samples += t.Samples
			row.Dead += t.Dead
			row.Gone += t.Gone
			row.Fenced += t.Fenced
			row.StateChanges += t.StateChanges
			row.ProbesFailed += t.Failed
			row.Probes += t.Probes
		}
		if row.Runs > 0 || row.Failed > 0 {
			rows = append(rows, row)
		}
	}
	return rows
}

// fenceTargets checks the membership cut and stress measurements against
// issues 15 and 17.
func (r *Results) fenceTargets() []Target {
	var ts []Target
	const splitGoal = "membership cut, every direction: zero time with two holders (vipd)"
	const gapGoal = "membership cut, every direction: median client gap under 0.5 s (vipd)"
	var rows []CutRow
	for _, row := range r.CutRows() {
		if row.System == "vipd" {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		ts = append(ts, Target{Goal: splitGoal, Measured: "not measured", Unknown: true},
			Target{Goal: gapGoal, Measured: "not measured", Unknown: true})
	} else {
		var worst time.Duration
		runs, failed, splitRuns := 0, 0, 0
		var gaps []string
		gapMet := len(rows) == len(CutScenarios)
		for _, row := range rows {
			worst = max(worst, row.Split.Max)
			runs += row.Runs
			failed += row.Failed
			splitRuns += row.WithSplit
			gaps = append(gaps, fmt.Sprintf("%s %s ms", row.Scenario, medianOrDash(row.Gap)))
			gapMet = gapMet && row.Runs > 0 && row.Failed == 0 && row.Gap.Median < 500*time.Millisecond
		}
		m := fmt.Sprintf("%d of %d runs with two holders, at most %s ms", splitRuns, runs, ms(worst))
		if failed > 0 {
			m += fmt.Sprintf("; %d run(s) did not complete", failed)
		}
		ts = append(ts, Target{Goal: splitGoal, Measured: m, Met: runs > 0 && splitRuns == 0 && failed == 0})
		g := "median gap " + strings.Join(gaps, ", ")
		if len(rows) < len(CutScenarios) {
			g += fmt.Sprintf(" (%d of %d directions measured)", len(rows), len(CutScenarios))
		}
		ts = append(ts, Target{Goal: gapGoal, Measured: g, Met: gapMet})
	}
	const stressGoal = "30% ingress loss on the owner and 3 CPU burners per core for 30 s: the VIP never moves, no member declared dead or gone (vipd)"
	var vs *StressRow
	for _, row := range r.StressRows() {
		if row.System == "vipd" {
			vs = &row
		}
	}
	if vs == nil {
		ts = append(ts, Target{Goal: stressGoal, Measured: "not measured", Unknown: true})
	} else {
		m := fmt.Sprintf("moved in %d of %d runs (%d of %d holder samples off the owner); %d dead, %d gone, %d fenced",
			vs.Moved, vs.Runs, vs.Off, vs.Samples, vs.Dead, vs.Gone, vs.Fenced)
		if vs.Failed > 0 {
			m += fmt.Sprintf("; %d run(s) did not complete", vs.Failed)
		}
		ts = append(ts, Target{Goal: stressGoal, Measured: m,
			Met: vs.Runs > 0 && vs.Failed == 0 && vs.Moved == 0 && vs.Dead == 0 && vs.Gone == 0 && vs.Fenced == 0})
	}
	return ts
}

func medianOrDash(s Stats) string {
	if s.N == 0 {
		return "-"
	}
	return ms(s.Median)
}

// writeCut renders the membership cut section (nothing without trials).
func writeCut(b *strings.Builder, r *Results, command string) {
	rows := r.CutRows()
	if len(rows) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Membership cut: fencing, vipd vs keepalived\n\n")
	p("Produced by `%s` (scenarios %s).\n\n", command, strings.Join(CutScenarios, ", "))
	p("The lab is steady for %v, then the owner keeps its link and its clients but loses its membership traffic for %v: nftables in the owner's own namespace drops ", quietBeforeCut, cutWindow)
	p("vipd's UDP and TCP port %d (memberlist and the lease's heartbeats) or keepalived's VRRP (IP protocol 112), as the scenario says; then the table is deleted (heal). ", 7946)
	p("Holders are read through netlink on every node every %v (no process per sample), from the cut until %v after the lab is steady again. ", cutSampleEvery, afterHeal)
	p("Client probes every %v (%v timeout). Times in ms as min / median / max over the runs.\n\n", probeInterval, probeTimeout)
	p("- **moved**: runs in which another node answered the client during the cut.\n")
	p("- **gap**: longest run of failed probes during the cut; **takeover**: cut to the first probe answered by another node (runs that moved).\n")
	p("- **release**: cut to the first sample without the owner holding; **claim**: cut to the first sample with another node holding (runs in which it happened).\n")
	p("- **two holders**: time with two or more nodes holding the VIP (runs with any / time); **after heal**: the part of it after the heal.\n\n")
	p("| scenario | system | runs | moved | gap | takeover | release | claim | runs with two holders | two holders | two holders after heal |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		runs := fmt.Sprint(row.Runs)
		if row.Failed > 0 {
			runs += fmt.Sprintf(" (+%d failed)", row.Failed)
		}
		p("| %s | %s | %s | %d | %s | %s | %s | %s | %d | %s | %s |\n", row.Scenario, row.System, runs, row.Moved,
			mmm(row.Gap), mmm(row.Takeover), mmm(row.Release), mmm(row.Claim), row.WithSplit, mmm(row.Split), mmm(row.SplitAfterHeal))
	}
	p("\nScenarios:\n\n")
	for _, sc := range CutScenarios {
		p("- `%s`: %s.\n", sc, CutTitle[sc])
	}
	p("\nThe same cut, vipd only, 20 runs per direction with every run's numbers: `make fence-proof` (lab/fence), written to docs/fence-proof.md.\n\n")
	failed := 0
	for _, t := range r.Failover {
		if t.Err != "" && has(CutScenarios, t.Scenario) {
			if failed == 0 {
				p("Failed trials:\n\n")
			}
			p("- %s %s run %d: %s\n", t.System, t.Scenario, t.Run, t.Err)
			failed++
		}
	}
	if failed > 0 {
		p("\n")
	}
}

// writeStress renders the stress section (nothing without trials).
func writeStress(b *strings.Builder, r *Results, command string) {
	rows := r.StressRows()
	if len(rows) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Stress: no false failover\n\n")
	p("Produced by `%s` (scenario %s).\n\n", command, StressScenario)
	t0 := r.Stress[0]
	p("Three nodes settled; then %d CPU burners (plain busy loops, %d per CPU, bounded to %v) and, 2 s later, %d%% of every packet arriving at the owner dropped at random ", t0.Burners, burnersPerCore, burnFor, stressLoss)
	p("(nftables, netdev ingress in its namespace, ARP included) for %v; 3 s more under load, 2 s without. ", stressWindow)
	p("Holders are read every %v throughout. Counts add up over the runs and the nodes. ", cutSampleEvery)
	p("keepalived's master sends adverts and needs to hear nothing, so loss on its ingress tests only its scheduling under load.\n\n")
	p("| system | runs | VIP moved (runs) | holder samples off the owner | members dead / gone / fenced (vipd log) | VRRP state changes (keepalived log) | client probes failed during the loss |\n")
	p("|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		runs := fmt.Sprint(row.Runs)
		if row.Failed > 0 {
			runs += fmt.Sprintf(" (+%d failed)", row.Failed)
		}
		dead, vrrp := "-", "-"
		if row.System == "vipd" {
			dead = fmt.Sprintf("%d / %d / %d", row.Dead, row.Gone, row.Fenced)
		} else {
			vrrp = fmt.Sprint(row.StateChanges)
		}
		p("| %s | %s | %d | %d of %d | %s | %s | %d of %d |\n", row.System, runs, row.Moved, row.Off, row.Samples, dead, vrrp, row.ProbesFailed, row.Probes)
	}
	p("\n")
	for _, t := range r.Stress {
		if t.Err != "" {
			p("- failed: %s stress run %d: %s\n", t.System, t.Run, t.Err)
		}
	}
	p("A client probe is a TCP connect and an HTTP GET with a %v timeout, and a lost SYN or request is retransmitted only after it: loss on the server's ingress fails probes by itself; that is the network, not a move.\n\n", probeTimeout)
}
