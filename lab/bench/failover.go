package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// Scenarios are the L2 failover scenarios, in report order.
var Scenarios = []string{"handoff", "restart", "crash", "linkdown", "partition", "health", "addrdel", "ifrecreate"}

// ScenarioTitle describes each scenario for the report.
var ScenarioTitle = map[string]string{
	"handoff":    "planned handoff (vipd: vipctl withdraw --wait; keepalived: SIGTERM, priority 0)",
	"restart":    "restart of the owner's agent (vipd: SIGUSR2, a restart in place, then the next vipd; keepalived: SIGTERM, then start: what systemctl restart does); the VIP may stay on the owner",
	"crash":      "owner agent SIGKILL",
	"linkdown":   "owner link down",
	"partition":  "owner cut off at the bridge",
	"health":     "owner health endpoint failing (HTTP server stopped)",
	"addrdel":    "VIP address removed on the owner behind the agent's back (ip addr del); the VIP may stay on the owner",
	"ifrecreate": "owner interface deleted and created again at once (same name, MAC and node address; the VIP may stay on the owner)",
}

// inPlace are the scenarios after which the VIP may come back on the same
// node: the trial waits for the client to be answered again by any node,
// not by another one.
var inPlace = map[string]bool{"addrdel": true, "ifrecreate": true, "restart": true}

// Systems are the systems compared, in report order.
var Systems = []string{"vipd", "keepalived"}

// Bounds of the waits in a trial; they bound the run, they are not results.
const (
	probeInterval = 20 * time.Millisecond
	probeTimeout  = 200 * time.Millisecond
	sampleEvery   = 20 * time.Millisecond
	moveTimeout   = 20 * time.Second
	steadyTimeout = 40 * time.Second
	// afterHeal is how long holders are still sampled once the lab is
	// steady again after the heal.
	afterHeal = 2 * time.Second
	// servedRun is how many probes in a row must be answered by one node
	// to call the client settled on it.
	servedRun = 25
)

// system is a VIP failover implementation run on the lab nodes.
type system interface {
	// name is "vipd" or "keepalived".
	name() string
	// start starts the agent on h.
	start(h *netlab.Host) error
	// steady reports whether the agents agree on one owner; the detail
	// says what it saw.
	steady() (bool, string)
	// handoff moves the VIP away from h on purpose, undone by unhandoff.
	handoff(h *netlab.Host) error
	unhandoff(h *netlab.Host) error
	// crash kills h's agent with SIGKILL; start brings it back.
	crash(h *netlab.Host) error
	// restart stops h's agent as a restart does and starts it again.
	restart(h *netlab.Host) error
	// membership are the nft matches of the agent's membership traffic
	// (what the cut scenarios drop).
	membership() []string
	// logPath is h's agent log.
	logPath(h *netlab.Host) string
}

// Failover runs every scenario in scenarios runs times against sys in lab
// l (HTTP servers and agents already running) and returns the trials: the
// failover and cut scenarios' as Trials, the stress scenario's apart.
func failover(ctx context.Context, l *netlab.Lab, sys system, scenarios []string, runs int, log io.Writer) ([]Trial, []StressTrial) {
	var trials []Trial
	var stress []StressTrial
	for _, sc := range scenarios {
		for run := 1; run <= runs && ctx.Err() == nil; run++ {
			if sc == StressScenario {
				st := stressTrial(l, sys, run)
				status := fmt.Sprintf("%d burners, %d%% loss on %s for %v: %d of %d holder samples off the owner, dead %d gone %d fenced %d, VRRP state changes %d, %d of %d probes failed",
					st.Burners, st.LossPercent, st.From, st.Window, st.Off, st.Samples, st.Dead, st.Gone, st.Fenced, st.StateChanges, st.Failed, st.Probes)
				if st.Err != "" {
					status = "ERROR " + st.Err
					waitSteady(l, sys)
				}
				fmt.Fprintf(log, "%s %-10s %-9s run %d: %s\n", time.Now().Format("15:04:05"), sys.name(), sc, run, status)
				stress = append(stress, st)
				continue
			}
			var tr Trial
			if _, ok := cutDirection[sc]; ok {
				tr = cutTrial(l, sys, sc, run)
			} else {
				tr = trial(l, sys, sc, run)
			}
			status := fmt.Sprintf("gap %v takeover %v failed %d split %v (after heal %v) %s->%s %s",
				tr.Gap, tr.Takeover, tr.Failed, tr.Split, tr.SplitAfterHeal, tr.From, tr.To, tr.FirstFailure)
			if tr.Release > 0 || tr.Claim > 0 {
				status += fmt.Sprintf(" release %v claim %v", tr.Release, tr.Claim)
			}
			if tr.Err != "" {
				status = "ERROR " + tr.Err
			}
			fmt.Fprintf(log, "%s %-10s %-9s run %d: %s\n", time.Now().Format("15:04:05"), sys.name(), sc, run, status)
			trials = append(trials, tr)
			if tr.Err != "" {
				// Give the lab a chance to settle before the next trial;
				// if it does not, the next trial reports it.
				waitSteady(l, sys)
			}
		}
	}
	return trials, stress
}

// waitSteady waits until sys agrees on one owner, exactly that node has
// the VIP, and returns the owner.
func waitSteady(l *netlab.Lab, sys system) (*netlab.Host, error) {
	var owner string
	ok, detail := netlab.Eventually(steadyTimeout, 50*time.Millisecond, func() (bool, string) {
		hs, err := l.AddrHolders(netlab.VIP4)
		if err != nil {
			return false, err.Error()
		}
		if len(hs) != 1 {
			return false, fmt.Sprintf("holders %v", hs)
		}
		ok, detail := sys.steady()
		owner = hs[0]
		return ok, detail
	})
	if !ok {
		return nil, fmt.Errorf("lab not steady after %v: %s", steadyTimeout, detail)
	}
	return l.Node(owner), nil
}

// trial measures one scenario once: steady state, event on the owner,
// client settled on another node, heal, steady again.
func trial(l *netlab.Lab, sys system, scenario string, run int) (tr Trial) {
	tr = Trial{System: sys.name(), Scenario: scenario, Run: run}
	fail := func(format string, args ...any) Trial {
		tr.Err = fmt.Sprintf(format, args...)
		return tr
	}
	owner, pr, err := startTrial(l, sys)
	if owner != nil {
		tr.From = owner.Name
	}
	if err != nil {
		return fail("before the event: %v", err)
	}
	defer pr.Stop()
	hw := watchHolders(l, netlab.VIP4, sampleEvery)
	defer hw.stop()

	ev := pr.Mark(scenario)
	var heal func() error
	switch scenario {
	case "handoff":
		err = sys.handoff(owner)
		heal = func() error { return sys.unhandoff(owner) }
	case "restart":
		err = sys.restart(owner)
		heal = func() error { return nil }
	case "crash":
		err = sys.crash(owner)
		heal = func() error { return sys.start(owner) }
	case "linkdown":
		l.LinkDown(owner)
		heal = func() error { l.LinkUp(owner); return nil }
	case "partition":
		l.Cut(owner)
		heal = func() error { l.Uncut(owner); return nil }
	case "health":
		err = l.HTTP(owner).Stop(syscall.SIGTERM, 5*time.Second)
		heal = func() error { l.StartHTTP(owner); return nil }
	case "addrdel":
		_, err = netlab.Run("ip", "-n", owner.NS, "addr", "del", netlab.VIP4.String()+"/32", "dev", netlab.Iface)
		heal = func() error { return restartIfLost(l, sys, owner) }
	case "ifrecreate":
		if err = l.DeleteLink(owner); err == nil {
			err = l.RecreateLink(owner)
		}
		heal = func() error { return restartIfLost(l, sys, owner) }
	default:
		return fail("unknown scenario %q", scenario)
	}
	if err != nil {
		heal()
		return fail("%s on %s: %v", scenario, owner.Name, err)
	}
	var movedErr error
	if inPlace[scenario] {
		movedErr = waitServedAgain(pr, ev.Time)
	} else {
		movedErr = waitServedByOther(pr, owner.Name, ev.Time)
	}
	time.Sleep(time.Second)
	healEv := pr.Mark("heal")
	if err := heal(); err != nil {
		return fail("heal %s on %s: %v", scenario, owner.Name, err)
	}
	if movedErr != nil {
		return fail("after %s: %v", scenario, movedErr)
	}
	if _, err := waitSteady(l, sys); err != nil {
		return fail("after the heal: %v", err)
	}
	time.Sleep(afterHeal)
	samples := hw.stop()
	pr.Stop()

	g := netlab.Analyze(pr.Probes(), []netlab.Event{ev, healEv}, probeInterval)[0]
	tr.Gap, tr.Failed, tr.To, tr.Takeover = g.Outage, g.Failed, g.After, g.ToNewNode
	tr.Split, tr.SplitAfterHeal = splitTime(samples, healEv.Time, sampleEvery)
	if sys.name() == "vipd" && tr.To != "" && tr.To != owner.Name {
		tr.Elected, tr.Holding = breakdown(vipdLogs(l), owner.Name, tr.To, ev.Time)
	}
	for _, p := range pr.Probes() {
		if !p.OK && !p.Start.Before(ev.Time) && p.Start.Before(healEv.Time) {
			tr.FirstFailure = p.Detail
			break
		}
	}
	return tr
}

// startTrial waits for the steady state and starts the client's prober,
// returning once the owner has answered it; the caller stops the prober.
// The owner is returned also when the client was not answered.
func startTrial(l *netlab.Lab, sys system) (*netlab.Host, *netlab.Prober, error) {
	owner, err := waitSteady(l, sys)
	if err != nil {
		return nil, nil, err
	}
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Timeout: probeTimeout, Duration: 3 * time.Minute})
	if err := pr.WaitServedBy(owner.Name, 10, time.Now(), 10*time.Second); err != nil {
		pr.Stop()
		return owner, nil, err
	}
	return owner, pr, nil
}

// waitServedByOther waits until servedRun probes in a row started after
// since were answered by one node other than from.
func waitServedByOther(pr *netlab.Prober, from string, since time.Time) error {
	var last string
	ok, _ := netlab.Eventually(moveTimeout, 20*time.Millisecond, func() (bool, string) {
		run, cur := 0, ""
		fails := 0
		for _, p := range pr.Probes() {
			if p.Start.Before(since) {
				continue
			}
			switch {
			case !p.OK:
				run, cur = 0, ""
				fails++
			case p.Server == from:
				run, cur = 0, ""
			case p.Server == cur:
				run++
			default:
				run, cur = 1, p.Server
			}
			if run >= servedRun {
				return true, ""
			}
		}
		last = fmt.Sprintf("%d failed probes, last run %d from %q", fails, run, cur)
		return false, ""
	})
	if !ok {
		return fmt.Errorf("client not served by a node other than %s within %v: %s", from, moveTimeout, last)
	}
	return nil
}

// waitServedAgain waits until servedRun probes in a row started after
// since were answered by one node, any node.
func waitServedAgain(pr *netlab.Prober, since time.Time) error {
	var last string
	ok, _ := netlab.Eventually(moveTimeout, 20*time.Millisecond, func() (bool, string) {
		run, cur, fails := 0, "", 0
		for _, p := range pr.Probes() {
			if p.Start.Before(since) {
				continue
			}
			switch {
			case !p.OK:
				run, cur = 0, ""
				fails++
			case p.Server == cur:
				run++
			default:
				run, cur = 1, p.Server
			}
			if run >= servedRun {
				return true, ""
			}
		}
		last = fmt.Sprintf("%d failed probes, last run %d from %q", fails, run, cur)
		return false, ""
	})
	if !ok {
		return fmt.Errorf("client not answered again within %v: %s", moveTimeout, last)
	}
	return nil
}

// restartIfLost heals an in-place scenario the agent did not recover from
// by itself: when the VIP is not on exactly one node, the owner's agent is
// killed and started again (so the next trial starts steady). It does
// nothing when the agent repaired the VIP.
func restartIfLost(l *netlab.Lab, sys system, owner *netlab.Host) error {
	hs, err := l.AddrHolders(netlab.VIP4)
	if err != nil || len(hs) == 1 {
		return err
	}
	if err := sys.crash(owner); err != nil {
		return fmt.Errorf("restart %s on %s (VIP on %v): %w", sys.name(), owner.Name, hs, err)
	}
	return sys.start(owner)
}

// holderSample is how many lab nodes had the VIP at one moment.
type holderSample struct {
	at time.Time
	n  int
}

// holderWatch samples the VIP's holders until stopped.
type holderWatch struct {
	once    sync.Once
	quit    chan struct{}
	done    chan struct{}
	samples []holderSample
}

func watchHolders(l *netlab.Lab, addr netip.Addr, every time.Duration) *holderWatch {
	w := &holderWatch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		// Bounded like every lab loop: a trial never lasts 10 minutes.
		deadline := time.Now().Add(10 * time.Minute)
		for time.Now().Before(deadline) {
			at := time.Now()
			if hs, err := l.AddrHolders(addr); err == nil {
				w.samples = append(w.samples, holderSample{at, len(hs)})
			}
			select {
			case <-w.quit:
				return
			case <-time.After(every):
			}
		}
	}()
	return w
}

func (w *holderWatch) stop() []holderSample {
	w.once.Do(func() { close(w.quit) })
	<-w.done
	return w.samples
}

// splitTime sums, over samples that saw two or more holders, the time to
// the next sample (every, the sampling interval, for the last one): in
// total and from heal on.
func splitTime(samples []holderSample, heal time.Time, every time.Duration) (total, afterHeal time.Duration) {
	for i, s := range samples {
		if s.n < 2 {
			continue
		}
		d := every
		if i+1 < len(samples) {
			d = samples[i+1].at.Sub(s.at)
		}
		total += d
		if !s.at.Before(heal) {
			afterHeal += d
		}
	}
	return total, afterHeal
}
