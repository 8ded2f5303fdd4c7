// Package e2e runs real vipd processes in a network-namespace lab
// (lab/netlab) and checks failover as a client sees it. The tests need root
// and VIPD_NETNS_TESTS=1 (make netns-test); VIPD_BIN points at the vipd and
// vipctl to test (built from ./cmd when unset).
package e2e

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// maxWithdrawGap is the client-observed unreachability allowed on a
	// planned withdraw.
	maxWithdrawGap = time.Second
)

// checkNeigh waits until the client's neighbor entry for the VIP has the
// holder's MAC.
func checkNeigh(t *testing.T, l *netlab.Lab, vip netlab.VIP, holder *netlab.Host) {
	t.Helper()
	if err := l.WaitNeigh(l.Client, vip.Address, holder, 5*time.Second); err != nil {
		t.Error(err)
	}
}

func timeline(pr *netlab.Prober) string {
	var b bytes.Buffer
	netlab.FormatTimeline(&b, pr.Gaps())
	return b.String()
}

func TestSteadyStateOneHolder(t *testing.T) {
	l, vip, holder := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	pr := l.StartProber(netlab.ProbeOptions{Duration: 30 * time.Second})
	if err := pr.WaitServedBy(holder.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("client probing %s: %v", vip.Address, err)
	}
	// The single holder stays put: sample it a few times.
	for i := 0; i < 5; i++ {
		h, err := l.OneHolder(vip)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if h != holder.Name {
			t.Fatalf("sample %d: holder changed from %s to %s with nothing happening", i, holder.Name, h)
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkNeigh(t, l, vip, holder)
	probes := pr.Stop()
	if n, d := netlab.LongestFailure(probes, pr.Options.Interval); n > 0 {
		t.Errorf("steady state: %d probes failed in a row (%v) with nothing happening", n, d)
	}
}

func TestWithdrawMovesVIP(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	pr := l.StartProber(netlab.ProbeOptions{Duration: 40 * time.Second})
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before withdraw: %v", err)
	}
	next, g, err := l.WithdrawAndFollow(pr, owner, vip, l.Settle)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timeline:\n%s", timeline(pr))
	if g.After != next {
		t.Errorf("withdraw: client saw the VIP move %s -> %q, want -> %s", g.Before, g.After, next)
	}
	if g.Outage >= maxWithdrawGap {
		t.Errorf("withdraw: client-observed gap %v (%d probes failed in a row), want under %v", g.Outage, g.LongestRun, maxWithdrawGap)
	}
	st, err := l.Status(owner)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Withdrawn {
		t.Errorf("status of %s after withdraw: withdrawn=false, want true", owner.Name)
	}
	checkNeigh(t, l, vip, l.Node(next))
}

func TestOwnerLinkDownThenRejoin(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	pr := l.StartProber(netlab.ProbeOptions{Duration: 60 * time.Second})
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before link down: %v", err)
	}
	rest := l.Others(owner)
	var next *netlab.Host
	ok := t.Run("link down moves the VIP", func(t *testing.T) {
		ev := pr.Mark("link down " + owner.Name)
		l.LinkDown(owner)
		// The cut-off owner must release (no quorum) and one of the others
		// take over: OneHolder checks the addresses on every node.
		name, err := l.WaitMoved(vip, owner.Name, l.Settle, rest...)
		if err != nil {
			t.Fatalf("after link down of %s: want the VIP on one of the others only: %v", owner.Name, err)
		}
		next = l.Node(name)
		if err := pr.WaitServedBy(name, 25, ev.Time, l.Settle); err != nil {
			t.Fatalf("after link down: %v", err)
		}
		g := pr.Gaps()[0]
		t.Logf("link down: %s -> %s, first answer from %s %v after the event, longest gap %v (%d probes)",
			g.Before, g.After, g.After, g.ToNewNode, g.Outage, g.LongestRun)
	})
	if !ok {
		t.FailNow()
	}
	t.Run("link up rejoins without a second holder", func(t *testing.T) {
		ev := pr.Mark("link up " + owner.Name)
		watch := l.WatchHolders(vip, 20*time.Millisecond, 30*time.Second)
		up := time.Now()
		l.LinkUp(owner)
		bound := netlab.RejoinInterval + 5*time.Second
		if err := l.WaitAlive(owner, l.Nodes, bound); err != nil {
			t.Fatalf("after link up: %v", err)
		}
		t.Logf("%s alive on every other node %v after link up", owner.Name, time.Since(up).Round(time.Millisecond))
		holder, err := l.WaitOneHolder(vip, l.Settle)
		if err != nil {
			t.Fatalf("after rejoin: %v", err)
		}
		if holder != next.Name {
			// preempt = false: the returning node must not take it back.
			t.Errorf("after rejoin: %s holds %s, want %s to keep it (preempt off)", holder, vip.Address, next.Name)
		}
		// Still one holder a moment later, as the client sees it too.
		time.Sleep(time.Second)
		if h, err := l.OneHolder(vip); err != nil || h != next.Name {
			t.Errorf("1s after rejoin: holder %q, err %v; want %s", h, err, next.Name)
		}
		checkNeigh(t, l, vip, next)
		multiple, samples, errs := watch.Stop()
		if len(errs) > 0 {
			t.Errorf("sampling holders: %v", errs)
		}
		if len(multiple) > 0 {
			t.Errorf("after link up of %s: %d of %d samples (every 20ms) saw two nodes holding %s, want none: first %s, last %s",
				owner.Name, len(multiple), samples, vip.Address, multiple[0], multiple[len(multiple)-1])
		}
		for _, p := range pr.Probes() {
			if p.OK && !p.Start.Before(ev.Time) && p.Server == owner.Name {
				t.Errorf("after link up: the client was served by the returning %s at %s; want %s to keep serving (preempt off)",
					owner.Name, p.Start.Format("15:04:05.000"), next.Name)
				break
			}
		}
	})
	pr.Stop()
	t.Logf("timeline:\n%s", timeline(pr))
}

func TestWithdrawPersistsAcrossRestart(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	if out, err := l.Vipctl(owner, "withdraw", "--wait", "--timeout", "10s"); err != nil {
		t.Fatalf("vipctl withdraw --wait on %s: %v", owner.Name, err)
	} else {
		t.Logf("vipctl withdraw --wait: %s", strings.TrimSpace(out))
	}
	next, err := l.WaitMoved(vip, owner.Name, l.Settle)
	if err != nil {
		t.Fatalf("after withdraw: want the VIP to leave %s: %v", owner.Name, err)
	}
	if err := l.StopVipd(owner, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("stop vipd on %s: %v", owner.Name, err)
	}
	if err := l.Vipd(owner).ExitErr(); err != nil {
		t.Errorf("vipd on %s exit after SIGTERM: %v, want 0", owner.Name, err)
	}
	l.StartVipd(owner, netlab.VipdOptions{})
	if err := l.WaitAlive(owner, l.Nodes, l.Settle); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	st, err := l.Status(owner)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Withdrawn {
		t.Errorf("status of %s after restart: withdrawn=false, want true (flag persisted in state_dir)", owner.Name)
	}
	for _, o := range l.Others(owner) {
		ost, err := l.Status(o)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := ost.Member(owner.Name); !m.Withdrawn {
			t.Errorf("%s sees %s as %+v, want withdrawn", o.Name, owner.Name, m)
		}
	}
	// Give the restarted node time to (wrongly) claim the VIP, then check.
	time.Sleep(2 * time.Second)
	holder, err := l.OneHolder(vip)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if holder == owner.Name {
		t.Errorf("after restart: withdrawn %s holds %s", owner.Name, vip.Address)
	}
	if holder != next {
		t.Errorf("after restart: holder %s, want %s to keep it", holder, next)
	}
}
