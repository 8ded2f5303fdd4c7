package bondvlan

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// The bounds, scaled by netlab.Slowdown: in lab/vm's emulated machine
// everything runs several times slower (on a real machine Slowdown is 1).
var (
	// maxWithdrawGap is the client-observed unreachability allowed on a
	// planned withdraw (as lab/e2e: 1 s on a real machine). A VLAN or bond
	// that loses the gratuitous ARP leaves the client on the old holder
	// until its neighbour entry goes stale, tens of seconds.
	maxWithdrawGap = netlab.Scaled(time.Second)
	// probeTimeout is the prober's timeout in the slave failure test. The
	// bond notices a lost carrier at its next MII poll (miimon 100): a
	// connection attempt whose SYN falls into those up to 100 ms is sent
	// again by TCP after 1 s, so a client with a timeout over that sees no
	// failure, only a slower connect. The test reports the slowest.
	probeTimeout = netlab.Scaled(1500 * time.Millisecond)
)

// cluster starts a 3-node lab on bond0.100 with HTTP servers and vipd
// (netlab.StartCluster) and returns it with the VIP and its holder.
func cluster(t *testing.T) (*netlab.Lab, netlab.VIP, *netlab.Host) {
	t.Helper()
	netlab.SkipUnlessBondVLAN(t)
	var opts netlab.VipdOptions
	if netlab.Slowdown() > 1 {
		// The lease's lan timers are about four times fast's (an owner
		// without a majority's answer releases after 1.2 s instead of
		// 300 ms), as the emulated machine is slower: in a CI run the bond
		// took 917 ms to switch slaves there, and under fast the owner
		// fenced itself and released the VIP.
		opts.FailureDetection = "lan"
	}
	l, vip, holder := netlab.StartCluster(t, netlab.Spec{Options: netlab.Options{BondVLAN: true}, HTTP: true, Vipd: opts})
	if holder.Iface() != netlab.BondVLANIface {
		t.Fatalf("holder %s manages the VIP on %s, want %s", holder.Name, holder.Iface(), netlab.BondVLANIface)
	}
	return l, vip, holder
}

// waitNeigh waits until the client's neighbor entry for the VIP has h's MAC
// (5 s on a real machine, scaled with an emulated one).
func waitNeigh(t *testing.T, l *netlab.Lab, vip netlab.VIP, h *netlab.Host) {
	t.Helper()
	if err := l.WaitNeigh(l.Client, vip.Address, h, netlab.Scaled(5*time.Second)); err != nil {
		t.Error(err)
	}
}

// TestFailoverOnBondVLAN: a planned withdraw moves the VIP on bond0.100 as
// on a plain interface: the gratuitous ARP goes out tagged through the bond
// and the client follows within a second.
func TestFailoverOnBondVLAN(t *testing.T) {
	l, vip, owner := cluster(t)
	pr := l.StartProber(netlab.ProbeOptions{Duration: netlab.Scaled(40 * time.Second)})
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), netlab.Scaled(5*time.Second)); err != nil {
		t.Fatalf("before withdraw: %v", err)
	}
	waitNeigh(t, l, vip, owner)
	next, g, err := l.WithdrawAndFollow(pr, owner, vip, l.Settle)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("withdraw on %s: %s -> %s, first answer from %s %v after it, longest gap %v (%d probes)",
		netlab.BondVLANIface, g.Before, g.After, g.After, g.ToNewNode, g.Outage, g.LongestRun)
	if g.After != next {
		t.Errorf("client saw the VIP move %s -> %q, want -> %s", g.Before, g.After, next)
	}
	if g.Outage >= maxWithdrawGap {
		t.Errorf("client-observed gap %v (%d probes failed in a row), want under %v", g.Outage, g.LongestRun, maxWithdrawGap)
	}
	waitNeigh(t, l, vip, l.Node(next))
}

// TestBondSlaveFailureMovesNothing fails the owner's active bond slave (its
// switch port goes down), then, with the first back, the other one: each
// time the bond switches to the other link, and vipd keeps the VIP where it
// is, one holder throughout, no client probe failing.
func TestBondSlaveFailureMovesNothing(t *testing.T) {
	l, vip, owner := cluster(t)
	pr := l.StartProber(netlab.ProbeOptions{Timeout: probeTimeout, Duration: netlab.Scaled(60 * time.Second)})
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), netlab.Scaled(5*time.Second)); err != nil {
		t.Fatalf("before the slave failure: %v", err)
	}
	watch := l.WatchHolders(vip, 20*time.Millisecond, 50*time.Second)
	logBefore, _ := owner.VipdLog()
	for _, step := range []struct {
		fail, restore int // indexes into owner.Ports / netlab.BondSlaves
	}{{fail: 0}, {fail: 1, restore: 0}} {
		if step.fail == 1 {
			if err := l.SetPort(owner, step.restore, true); err != nil {
				t.Fatal(err)
			}
			// The restored link is a backup now; give it one MII poll.
			time.Sleep(300 * time.Millisecond)
		}
		active, err := l.ActiveSlave(owner)
		if err != nil {
			t.Fatal(err)
		}
		if active != netlab.BondSlaves[step.fail] {
			t.Fatalf("active slave of %s is %s, want %s before failing it", owner.Name, active, netlab.BondSlaves[step.fail])
		}
		ev := pr.Mark(fmt.Sprintf("port %s down", owner.Ports[step.fail]))
		if err := l.SetPort(owner, step.fail, false); err != nil {
			t.Fatal(err)
		}
		other := netlab.BondSlaves[1-step.fail]
		ok, detail := netlab.Eventually(5*time.Second, 20*time.Millisecond, func() (bool, string) {
			a, err := l.ActiveSlave(owner)
			if err != nil {
				return false, err.Error()
			}
			return a == other, "active " + a
		})
		if !ok {
			t.Fatalf("the bond of %s did not switch to %s: %s", owner.Name, other, detail)
		}
		t.Logf("%s: the bond of %s switched to %s within %v", ev.Label, owner.Name, other, time.Since(ev.Time).Round(time.Millisecond))
		// Several of vipd's verify passes (one a second) and link events.
		time.Sleep(3 * time.Second)
		if h, err := l.OneHolder(vip); err != nil || h != owner.Name {
			t.Fatalf("%s: holder %q (%v), want %s to keep the VIP", ev.Label, h, err, owner.Name)
		}
	}
	pr.Stop()
	multiple, samples, errs := watch.Stop()
	if len(errs) > 0 {
		t.Errorf("sampling holders: %v", errs)
	}
	if len(multiple) > 0 {
		t.Errorf("%d of %d samples saw more than one holder: first %s", len(multiple), samples, multiple[0])
	}
	probes := pr.Probes()
	var failed []string
	slowest := time.Duration(0)
	for _, p := range probes {
		if !p.OK {
			failed = append(failed, p.Start.Format("15:04:05.000")+" "+p.Detail)
			continue
		}
		if p.Server != owner.Name {
			t.Errorf("probe at %s served by %s, want %s", p.Start.Format("15:04:05.000"), p.Server, owner.Name)
		}
		if d, err := time.ParseDuration(strings.Fields(p.Detail + " 0s")[0]); err == nil && d > slowest {
			slowest = d
		}
	}
	t.Logf("%d probes every %v (timeout %v): %d failed, slowest answer %v", len(probes), pr.Options.Interval, probeTimeout, len(failed), slowest)
	if len(failed) > 0 {
		t.Errorf("%d probes failed while a bond slave of the owner failed, want 0: %v", len(failed), failed)
	}
	logAfter, _ := owner.VipdLog()
	if lines := netlab.LogLines(strings.TrimPrefix(logAfter, logBefore), "vip address removed"); len(lines) > 0 {
		t.Errorf("vipd on %s removed the VIP during the slave failures: %v", owner.Name, lines)
	}
}

// TestCheckNamesVLANSysctl: vipd --check on a node whose bond0.100 has
// arp_ignore 3 (no ARP answer for the scope host VIP) names the setting in
// the form sysctl takes for an interface name with a dot, and that form
// works.
func TestCheckNamesVLANSysctl(t *testing.T) {
	netlab.SkipUnlessBondVLAN(t)
	l := netlab.New(t, netlab.Options{Nodes: 1, BondVLAN: true, Client: new(bool)})
	n := l.Nodes[0]
	const name = "net/ipv4/conf/" + netlab.BondVLANIface + "/arp_ignore"
	if out, err := l.Exec(n, "sysctl", "-w", name+"=3"); err != nil {
		t.Fatalf("sysctl: %v: %s", err, out)
	}
	path := filepath.Join(n.Dir, "vipd.toml")
	if err := writeFile(path, l.VipdConfig(n, netlab.VipdOptions{})); err != nil {
		t.Fatal(err)
	}
	out, err := l.Exec(n, l.Tools.Vipd, "--check", "--config", path)
	if err != nil {
		t.Fatalf("vipd --check: %v: %s", err, out)
	}
	t.Logf("vipd --check:\n%s", out)
	if !strings.Contains(out, "sysctl -w "+name+"=1") {
		t.Fatalf("vipd --check does not say sysctl -w %s=1:\n%s", name, out)
	}
	if out, err := l.Exec(n, "sysctl", "-w", name+"=1"); err != nil {
		t.Fatalf("the command vipd --check gives fails: %v: %s", err, out)
	}
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }
