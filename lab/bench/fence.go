package bench

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// CutScenarios cut only the owner's membership traffic (vipd: UDP and TCP
// port 7946; keepalived: VRRP, IP protocol 112) with nftables in the
// owner's namespace, while clients still reach it; issue 17's fencing
// proof beside keepalived.
var CutScenarios = []string{"membercut", "membercut-in", "membercut-out"}

// CutTitle describes each cut scenario for the report.
var CutTitle = map[string]string{
	"membercut":     "owner's membership traffic dropped both ways",
	"membercut-in":  "only what the owner receives dropped (it speaks, hears nothing)",
	"membercut-out": "only what the owner sends dropped (it hears, nobody hears it)",
}

var cutDirection = map[string]netlab.Direction{
	"membercut": netlab.Both, "membercut-in": netlab.In, "membercut-out": netlab.Out,
}

// StressScenario loads the machine and the owner's network and checks
// that nothing moves (issue 15's false-failover scenario).
const StressScenario = "stress"

// AllScenarios are every scenario vipbench knows, in report order.
func AllScenarios() []string {
	return append(append(append([]string(nil), Scenarios...), CutScenarios...), StressScenario)
}

const (
	// cutSampleEvery is the holder sampling interval of the cut and stress
	// scenarios (netlink, no process per sample).
	cutSampleEvery = 10 * time.Millisecond
	// cutWindow is how long the membership traffic is dropped.
	cutWindow = 10 * time.Second
	cutTable  = "benchcut"
	// quietBeforeCut is how long the lab stays steady before a cut or the
	// stress load: a node that regained quorum less than 3 s ago (vipd's
	// staleHolderSettle, after the previous trial's heal) settles 1 s
	// before claiming when the field changes, which a cut right after a
	// heal would measure instead of the fence.
	quietBeforeCut = 4 * time.Second
	// Stress: burnersPerCore busy loops per CPU (bounded to burnFor), and
	// stressLoss percent of the owner's incoming packets dropped for
	// stressWindow.
	burnersPerCore = 3
	burnFor        = 60 * time.Second
	stressLoss     = 30
	stressWindow   = 30 * time.Second
	stressTable    = "benchloss"
)

// cutTrial measures one membership cut: steady state, the owner's
// membership traffic dropped for cutWindow, heal, steady again; holders
// sampled every cutSampleEvery throughout. The VIP staying on the owner is
// a result, not a failure.
func cutTrial(l *netlab.Lab, sys system, scenario string, run int) (tr Trial) {
	tr = Trial{System: sys.name(), Scenario: scenario, Run: run}
	fail := func(format string, args ...any) Trial {
		tr.Err = fmt.Sprintf(format, args...)
		return tr
	}
	if _, err := waitSteady(l, sys); err != nil {
		return fail("before the event: %v", err)
	}
	time.Sleep(quietBeforeCut)
	owner, pr, err := startTrial(l, sys)
	if owner != nil {
		tr.From = owner.Name
	}
	if err != nil {
		return fail("before the event: %v", err)
	}
	defer pr.Stop()
	rec := l.RecordHolders(netlab.VIP4, cutSampleEvery, 3*time.Minute)
	defer rec.Stop()
	ev := pr.Mark(scenario)
	if err := l.DropTraffic(owner, cutTable, cutDirection[scenario], sys.membership()); err != nil {
		return fail("%s on %s: %v", scenario, owner.Name, err)
	}
	time.Sleep(cutWindow)
	healEv := pr.Mark("heal")
	if err := l.RemoveTable(owner, "inet", cutTable); err != nil {
		return fail("heal %s on %s: %v", scenario, owner.Name, err)
	}
	if _, err := waitSteady(l, sys); err != nil {
		return fail("after the heal: %v", err)
	}
	time.Sleep(afterHeal)
	ss, _ := rec.Stop()
	pr.Stop()

	g := netlab.Analyze(pr.Probes(), []netlab.Event{ev, healEv}, probeInterval)[0]
	tr.Gap, tr.Failed, tr.To, tr.Takeover = g.Outage, g.Failed, g.After, g.ToNewNode
	tr.Split, tr.SplitAfterHeal = splitTime(counts(ss), healEv.Time, cutSampleEvery)
	tr.Release, tr.Claim = releaseClaim(ss.Between(ev.Time, healEv.Time), owner.Name, ev.Time)
	return tr
}

// counts turns netlab samples into holder counts.
func counts(ss netlab.HolderSamples) []holderSample {
	out := make([]holderSample, 0, len(ss))
	for _, s := range ss {
		out = append(out, holderSample{s.At, len(s.Holders)})
	}
	return out
}

// releaseClaim returns the time from the event at to the first sample in
// which owner no longer held, and to the first in which another node held
// (0 when it did not happen).
func releaseClaim(ss netlab.HolderSamples, owner string, at time.Time) (release, claim time.Duration) {
	for _, s := range ss {
		if release == 0 && !s.Has(owner) {
			release = s.At.Sub(at)
		}
		if claim == 0 {
			for _, h := range s.Holders {
				if h != owner {
					claim = s.At.Sub(at)
					break
				}
			}
		}
	}
	return release, claim
}

// StressTrial is one run of the stress scenario: CPU burners and lossy
// ingress on the owner; nothing should move.
type StressTrial struct {
	// System is "vipd" or "keepalived"; Run counts from 1.
	System string
	Run    int
	// From is the owner before the load.
	From string
	// Burners is the number of busy loops; LossPercent of the owner's
	// incoming packets were dropped for Window.
	Burners, LossPercent int
	Window               time.Duration
	// Samples is the number of holder samples from the start of the load
	// to its end plus settling; Off of them did not show exactly From (the
	// VIP moved, was on nobody, or on two nodes).
	Samples, Off int
	// Dead, Gone and Fenced (vipd) count log lines over the trial, every
	// node: memberlist declaring a member dead, the lease taking one for
	// gone, a node fencing itself.
	Dead, Gone, Fenced int
	// StateChanges (keepalived) counts VRRP state changes logged over the
	// trial, every node ("Entering MASTER STATE", BACKUP, FAULT).
	StateChanges int
	// Probes and Failed count the client's probes during the loss window.
	Probes, Failed int
	// Err is set when the trial did not complete.
	Err string `json:",omitempty"`
}

// Moved reports whether the VIP left its owner at some sample.
func (s StressTrial) Moved() bool { return s.Off > 0 }

// stressTrial runs the stress scenario once.
func stressTrial(l *netlab.Lab, sys system, run int) (tr StressTrial) {
	tr = StressTrial{System: sys.name(), Run: run, Burners: burnersPerCore * runtime.NumCPU(), LossPercent: stressLoss, Window: stressWindow}
	fail := func(format string, args ...any) StressTrial {
		tr.Err = fmt.Sprintf(format, args...)
		return tr
	}
	if _, err := waitSteady(l, sys); err != nil {
		return fail("before the load: %v", err)
	}
	time.Sleep(quietBeforeCut)
	owner, err := waitSteady(l, sys)
	if err != nil {
		return fail("before the load: %v", err)
	}
	tr.From = owner.Name
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Timeout: probeTimeout, Duration: 3 * time.Minute})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, 10, time.Now(), 10*time.Second); err != nil {
		return fail("before the load: %v", err)
	}
	offsets := map[string]int64{}
	for _, n := range l.Nodes {
		offsets[n.Name] = fileSize(sys.logPath(n))
	}
	rec := l.RecordHolders(netlab.VIP4, cutSampleEvery, 3*time.Minute)
	defer rec.Stop()
	burners, err := l.StartBurners(tr.Burners, burnFor)
	if err != nil {
		return fail("start burners: %v", err)
	}
	kill := func() {
		for _, b := range burners {
			b.Kill()
		}
	}
	defer kill()
	time.Sleep(2 * time.Second)
	ev := pr.Mark("loss")
	if err := l.DropIngressPercent(owner, stressTable, stressLoss); err != nil {
		return fail("loss on %s: %v", owner.Name, err)
	}
	time.Sleep(stressWindow)
	if err := l.RemoveTable(owner, "netdev", stressTable); err != nil {
		return fail("end the loss on %s: %v", owner.Name, err)
	}
	end := pr.Mark("loss over")
	time.Sleep(3 * time.Second)
	kill()
	time.Sleep(2 * time.Second)
	ss, _ := rec.Stop()
	pr.Stop()

	tr.Samples = len(ss)
	for _, s := range ss {
		if len(s.Holders) != 1 || s.Holders[0] != owner.Name {
			tr.Off++
		}
	}
	for _, n := range l.Nodes {
		text := readFrom(sys.logPath(n), offsets[n.Name])
		dead, gone, fenced := vipdLogCounts(text)
		tr.Dead += dead
		tr.Gone += gone
		tr.Fenced += fenced
		tr.StateChanges += vrrpStateChanges(text)
	}
	g := netlab.Analyze(pr.Probes(), []netlab.Event{ev, end}, probeInterval)[0]
	tr.Probes, tr.Failed = g.Probes, g.Failed
	return tr
}

// vipdLogCounts counts, in vipd log text, memberlist declaring a member
// dead, the lease taking one for gone, and this node fencing itself.
func vipdLogCounts(text string) (dead, gone, fenced int) {
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.Contains(line, `msg="member state"`) && strings.Contains(line, "state=dead"):
			dead++
		case strings.Contains(line, `msg="member gone (lease expired)"`):
			gone++
		case strings.Contains(line, `msg="fenced:`):
			fenced++
		}
	}
	return dead, gone, fenced
}

// vrrpStateChanges counts the VRRP state changes in keepalived log text.
func vrrpStateChanges(text string) int {
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "Entering MASTER STATE") || strings.Contains(line, "Entering BACKUP STATE") ||
			strings.Contains(line, "Entering FAULT STATE") {
			n++
		}
	}
	return n
}

// fileSize is the size of the file at path (0 when it cannot be read).
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the file at path from byte offset on ("" when it
// cannot be read).
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}
