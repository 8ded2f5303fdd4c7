package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

func TestReleaseClaim(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ss := netlab.HolderSamples{
		{At: at(10), Holders: []string{"n1"}},
		{At: at(300), Holders: nil},
		{At: at(420), Holders: []string{"n2"}},
	}
	rel, claim := releaseClaim(ss, "n1", t0)
	if rel != 300*time.Millisecond || claim != 420*time.Millisecond {
		t.Errorf("released then claimed: release %v claim %v, want 300ms 420ms", rel, claim)
	}
	// Two holders: the claim comes before the release.
	ss = netlab.HolderSamples{{At: at(10), Holders: []string{"n1"}}, {At: at(200), Holders: []string{"n1", "n3"}}, {At: at(500), Holders: []string{"n3"}}}
	if rel, claim := releaseClaim(ss, "n1", t0); rel != 500*time.Millisecond || claim != 200*time.Millisecond {
		t.Errorf("split: release %v claim %v, want 500ms 200ms", rel, claim)
	}
	// Stayed on the owner.
	if rel, claim := releaseClaim(ss[:1], "n1", t0); rel != 0 || claim != 0 {
		t.Errorf("stayed: release %v claim %v, want 0 0", rel, claim)
	}
}

func TestVipdLogCounts(t *testing.T) {
	text := `time=2026-01-02T03:04:05.000Z level=INFO msg="member state" node=n2 member=n1 peer=192.0.2.11:7946 state=suspect
time=2026-01-02T03:04:05.100Z level=INFO msg="member state" node=n2 member=n1 peer=192.0.2.11:7946 state=dead
time=2026-01-02T03:04:05.200Z level=INFO msg="member state" node=n2 member=n1 peer=192.0.2.11:7946 state=alive
time=2026-01-02T03:04:05.300Z level=INFO msg="member gone (lease expired)" node=n2 member=n1
time=2026-01-02T03:04:05.400Z level=WARN msg="fenced: no majority of the known members confirmed hearing this node recently; holding no VIP" node=n1 evidence_age=302ms
time=2026-01-02T03:04:05.500Z level=INFO msg="fence held again: a majority hears this node" node=n1
time=2026-01-02T03:04:05.600Z level=INFO msg="released VIP" node=n1 vip=apiserver reason="fenced: no majority"
`
	dead, gone, fenced := vipdLogCounts(text)
	if dead != 1 || gone != 1 || fenced != 1 {
		t.Errorf("vipdLogCounts = dead %d gone %d fenced %d, want 1 1 1", dead, gone, fenced)
	}
}

func TestVRRPStateChanges(t *testing.T) {
	text := `Mon Nov 23 12:00:00 2026: (VI_1) Entering BACKUP STATE (init)
Mon Nov 23 12:00:03 2026: (VI_1) Receive advertisement timeout
Mon Nov 23 12:00:03 2026: (VI_1) Entering MASTER STATE
Mon Nov 23 12:00:09 2026: (VI_1) Master received advert from 192.0.2.11 with higher priority 150, ours 100
Mon Nov 23 12:00:09 2026: (VI_1) Entering BACKUP STATE
Mon Nov 23 12:00:10 2026: (VI_1) Entering FAULT STATE
`
	if got := vrrpStateChanges(text); got != 4 {
		t.Errorf("vrrpStateChanges = %d, want 4", got)
	}
}

// fenceSample holds membership cut and stress trials of both systems.
func fenceSample() *Results {
	d := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	return &Results{Runs: 2, Failover: []Trial{
		{System: "vipd", Scenario: "membercut", Run: 1, From: "n1", To: "n2", Gap: d(100), Takeover: d(400), Release: d(280), Claim: d(390)},
		{System: "vipd", Scenario: "membercut", Run: 2, From: "n2", To: "n3", Gap: d(140), Takeover: d(450), Release: d(300), Claim: d(430)},
		{System: "vipd", Scenario: "membercut-in", Run: 1, From: "n1", Gap: d(9780), Release: d(250)},
		{System: "vipd", Scenario: "membercut-out", Run: 1, From: "n1", To: "n2", Gap: d(150), Takeover: d(420), Release: d(270), Claim: d(410)},
		{System: "keepalived", Scenario: "membercut", Run: 1, From: "n1", To: "n2", Gap: 0, Takeover: d(3600), Claim: d(3590), Split: d(6400), SplitAfterHeal: d(500)},
		{System: "keepalived", Scenario: "membercut-in", Run: 1, From: "n1"},
		{System: "keepalived", Scenario: "membercut-out", Run: 1, Err: "lab not steady"},
		{System: "vipd", Scenario: "crash", Run: 1, From: "n1", To: "n2", Takeover: d(400)},
	}, Stress: []StressTrial{
		{System: "vipd", Run: 1, From: "n1", Burners: 6, LossPercent: 30, Window: 30 * time.Second, Samples: 4000, Probes: 1500, Failed: 700},
		{System: "vipd", Run: 2, From: "n1", Burners: 6, LossPercent: 30, Window: 30 * time.Second, Samples: 3900, Off: 12, Gone: 2, Fenced: 1, Probes: 1500, Failed: 650},
		{System: "keepalived", Run: 1, From: "n1", Burners: 6, LossPercent: 30, Window: 30 * time.Second, Samples: 4000, StateChanges: 0, Probes: 1500, Failed: 710},
		{System: "keepalived", Run: 2, Err: "lab not steady"},
	}}
}

func TestCutRows(t *testing.T) {
	rows := fenceSample().CutRows()
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6 (3 scenarios x 2 systems): %+v", len(rows), rows)
	}
	r := rows[0]
	if r.Scenario != "membercut" || r.System != "vipd" || r.Runs != 2 || r.Moved != 2 || r.WithSplit != 0 ||
		r.Gap.Median != 120*time.Millisecond || r.Release.Min != 280*time.Millisecond || r.Claim.Max != 430*time.Millisecond {
		t.Errorf("vipd membercut row: %+v", r)
	}
	in := rows[2]
	if in.Scenario != "membercut-in" || in.Moved != 0 || in.Takeover.N != 0 || in.Claim.N != 0 || in.Release.N != 1 {
		t.Errorf("vipd membercut-in row (never claimed): %+v", in)
	}
	ka := rows[1]
	if ka.System != "keepalived" || ka.WithSplit != 1 || ka.Split.Max != 6400*time.Millisecond || ka.SplitAfterHeal.Max != 500*time.Millisecond {
		t.Errorf("keepalived membercut row: %+v", ka)
	}
	if out := rows[5]; out.System != "keepalived" || out.Runs != 0 || out.Failed != 1 {
		t.Errorf("keepalived membercut-out row: %+v", out)
	}
}

func TestStressRows(t *testing.T) {
	rows := fenceSample().StressRows()
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want vipd and keepalived", rows)
	}
	v := rows[0]
	if v.System != "vipd" || v.Runs != 2 || v.Moved != 1 || v.Off != 12 || v.Samples != 7900 || v.Gone != 2 || v.Fenced != 1 || v.ProbesFailed != 1350 {
		t.Errorf("vipd stress row: %+v", v)
	}
	if k := rows[1]; k.System != "keepalived" || k.Runs != 1 || k.Failed != 1 || k.Moved != 0 {
		t.Errorf("keepalived stress row: %+v", k)
	}
}

func TestFenceTargets(t *testing.T) {
	got := map[string]Target{}
	for _, tg := range fenceSample().Targets() {
		got[tg.Goal] = tg
	}
	for goal, want := range map[string]struct {
		met, unknown bool
		measured     string
	}{
		// No two holders for vipd, but the in-only median is 9.8 s, and
		// a stress run moved.
		"membership cut, every direction: zero time with two holders (vipd)":                                                             {true, false, "0 of 4 runs with two holders"},
		"membership cut, every direction: median client gap under 0.5 s (vipd)":                                                          {false, false, "membercut-in 9780 ms"},
		"30% ingress loss on the owner and 3 CPU burners per core for 30 s: the VIP never moves, no member declared dead or gone (vipd)": {false, false, "moved in 1 of 2 runs"},
	} {
		tg, ok := got[goal]
		if !ok {
			t.Errorf("no target %q", goal)
			continue
		}
		if tg.Met != want.met || tg.Unknown != want.unknown || !strings.Contains(tg.Measured, want.measured) {
			t.Errorf("%s: met=%t unknown=%t %q, want met=%t unknown=%t containing %q", goal, tg.Met, tg.Unknown, tg.Measured, want.met, want.unknown, want.measured)
		}
	}
	// All good.
	d := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	good := &Results{Stress: []StressTrial{{System: "vipd", Run: 1, Samples: 4000}}}
	for _, sc := range CutScenarios {
		good.Failover = append(good.Failover, Trial{System: "vipd", Scenario: sc, Run: 1, From: "n1", To: "n2", Gap: d(150)})
	}
	for _, tg := range good.fenceTargets() {
		if !tg.Met || tg.Unknown {
			t.Errorf("all good: %+v, want met", tg)
		}
	}
	// A split in one run, a direction missing, nothing measured.
	bad := &Results{Failover: []Trial{{System: "vipd", Scenario: "membercut", Run: 1, To: "n2", Gap: d(100), Split: d(30)}}}
	for _, tg := range bad.fenceTargets() {
		switch {
		case strings.HasPrefix(tg.Goal, "membership cut") && tg.Met:
			t.Errorf("one run with two holders, two directions missing: %+v, want not met", tg)
		case strings.HasPrefix(tg.Goal, "30%") && !tg.Unknown:
			t.Errorf("no stress trials: %+v, want not measured", tg)
		}
	}
}

func TestFenceMarkdown(t *testing.T) {
	md := Markdown(fenceSample(), Machine{NProc: 2}, nil, "RUNS=2 SCENARIOS=membercut,stress make bench", "benchmarks.svg")
	reportHas(t, md,
		"## Membership cut: fencing, vipd vs keepalived",
		"Produced by `RUNS=2 SCENARIOS=membercut,stress make bench` (scenarios membercut, membercut-in, membercut-out).",
		"| membercut | vipd | 2 | 2 | 100 / 120 / 140 | 400 / 425 / 450 | 280 / 290 / 300 | 390 / 410 / 430 | 0 | 0 / 0 / 0 | 0 / 0 / 0 |",
		"| membercut-in | vipd | 1 | 0 | 9780 / 9780 / 9780 | - | 250 / 250 / 250 | - | 0 |",
		"| membercut | keepalived | 1 | 1 | 0 / 0 / 0 | 3600 / 3600 / 3600 | - | 3590 / 3590 / 3590 | 1 | 6400 / 6400 / 6400 | 500 / 500 / 500 |",
		"| membercut-out | keepalived | 0 (+1 failed) |",
		"- keepalived membercut-out run 1: lab not steady",
		"## Stress: no false failover",
		"| vipd | 2 | 1 | 12 of 7900 | 0 / 2 / 1 | - | 1350 of 3000 |",
		"| keepalived | 1 (+1 failed) | 0 | 0 of 4000 | - | 0 | 710 of 1500 |",
		"- failed: keepalived stress run 2: lab not steady",
		// The L2 table still has the crash trial, and no cut scenario.
		"| crash | vipd | 1 |",
	)
	l2 := md[strings.Index(md, "## L2 failover"):strings.Index(md, "## Membership cut")]
	if strings.Contains(l2, "membercut") {
		t.Errorf("the L2 failover section lists a membership cut:\n%s", l2)
	}
	// Only cut trials: no L2 section at all.
	only := &Results{Failover: fenceSample().Failover[:3]}
	if md := Markdown(only, Machine{}, nil, "make bench", "b.svg"); strings.Contains(md, "## L2 failover") || !strings.Contains(md, "## Membership cut") {
		t.Errorf("only cut trials: want the cut section and no L2 section:\n%s", md)
	}
}
