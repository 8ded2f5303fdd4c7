package e2e

import (
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// TestIPv6VIP runs an IPv6-only VIP: the owner adds it as /128 without DAD
// and sends unsolicited neighbor advertisements with the override flag, so
// the client's neighbor entry follows the VIP on a planned withdraw and on
// an owner crash.
func TestIPv6VIP(t *testing.T) {
	l := netlab.New(t, netlab.Options{IPv6: true})
	l.StartHTTPAll()
	vip := netlab.VIP{Name: "apiserver6", Address: netlab.VIP6}
	l.StartVipds(netlab.VipdOptions{VIPs: []netlab.VIP{vip}})
	if err := l.WaitFormed(l.Settle); err != nil {
		t.Fatal(err)
	}
	holderName, err := l.WaitOneHolder(vip, l.Settle)
	if err != nil {
		t.Fatalf("steady state: %v", err)
	}
	owner := l.Node(holderName)
	prefixes, err := l.Addrs(owner)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range prefixes {
		if p.Addr() == vip.Address {
			found = true
			if p.Bits() != 128 {
				t.Errorf("VIP on %s as %s, want /128", owner.Name, p)
			}
		}
	}
	if !found {
		t.Fatalf("VIP not on %s: %v", owner.Name, prefixes)
	}
	out, err := l.Exec(owner, "ip", "-6", "-o", "addr", "show", "dev", netlab.Iface, "to", vip.Address.String()+"/128")
	if err != nil || !strings.Contains(out, "nodad") || strings.Contains(out, "tentative") {
		t.Errorf("VIP address on %s: want nodad and not tentative, got %q (%v)", owner.Name, out, err)
	}

	pr := l.StartProber(netlab.ProbeOptions{Target: netip.AddrPortFrom(vip.Address, netlab.HTTPPort), Duration: 40 * time.Second})
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("client probing [%s]: %v", vip.Address, err)
	}
	checkNeigh(t, l, vip, owner)

	// Planned: withdraw --wait.
	ev := pr.Mark("withdraw " + owner.Name)
	if out, err := l.Vipctl(owner, "withdraw", "--wait", "--timeout", "10s"); err != nil {
		t.Fatalf("vipctl withdraw --wait on %s: %v: %s", owner.Name, err, out)
	}
	next, err := l.WaitMoved(vip, owner.Name, l.Settle)
	if err != nil {
		t.Fatalf("after withdraw: %v", err)
	}
	if err := pr.WaitServedBy(next, 25, ev.Time, 5*time.Second); err != nil {
		t.Fatalf("after withdraw: %v", err)
	}
	checkNeigh(t, l, vip, l.Node(next))

	// Unplanned: SIGKILL the new owner; the remaining eligible node (the
	// first owner is withdrawn) takes over.
	ev2 := pr.Mark("kill " + next)
	if err := l.StopVipd(l.Node(next), syscall.SIGKILL, 5*time.Second); err != nil {
		t.Fatalf("kill vipd on %s: %v", next, err)
	}
	if out, err := l.Exec(l.Node(next), "ip", "-6", "addr", "del", vip.Address.String()+"/128", "dev", netlab.Iface); err != nil {
		t.Logf("crash cleanup of %s (as ExecStopPost would): %v %s", next, err, out)
	}
	var third string
	for _, n := range l.Nodes {
		if n.Name != owner.Name && n.Name != next {
			third = n.Name
		}
	}
	if err := pr.WaitServedBy(third, 25, ev2.Time, 10*time.Second); err != nil {
		t.Fatalf("after killing %s: %v", next, err)
	}
	if h, err := l.WaitOneHolder(vip, l.Settle, l.Node(owner.Name), l.Node(third)); err != nil || h != third {
		t.Fatalf("after killing %s: holder %q, %v; want %s", next, h, err, third)
	}
	checkNeigh(t, l, vip, l.Node(third))
	pr.Stop()
	gaps := pr.Gaps()
	t.Logf("timeline:\n%s", timeline(pr))
	if len(gaps) < 2 {
		t.Fatalf("want 2 events in the timeline, got %d", len(gaps))
	}
	if gaps[0].Outage >= maxWithdrawGap {
		t.Errorf("IPv6 withdraw: client-observed gap %v, want under %v", gaps[0].Outage, maxWithdrawGap)
	}
}
