//go:build linux

package l2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netlink"

	"github.com/vipd/vipd/internal/netnstest"
)

// The refresh against the real kernel: B, a neighbour, holds entries for
// the VIPs that point at a MAC that is not A's (a former holder's), in the
// states a neighbour ends up in; A announced the VIPs a while ago (its burst
// is long over). A's refresh corrects, within one period, every entry the
// kernel lets an unsolicited advertisement change, with B's defaults
// arp_accept = 0 and accept_untracked_na = 0 (which only decide whether an
// advertisement creates a missing entry). A second announcer in A, without
// refresh, announces control VIPs whose stale entries stay wrong: the
// refresh is what corrects them. Then B counts what the refresh costs.

// refreshPeriod is the refresh of the lab: long enough that scheduling
// delays under load are small beside it, short enough for the test suite.
const refreshPeriod = 2 * time.Second

// refreshSlack is how much later than one period a correction may come:
// the refresh's own netlink reads and the polling below.
const refreshSlack = 500 * time.Millisecond

// formerMAC is the MAC of a holder that is gone (RFC 7042 documentation
// range).
var formerMAC = net.HardwareAddr{0x00, 0x00, 0x5e, 0x00, 0x53, 0x01}

// staleCase is one entry B holds, for a VIP A announces.
type staleCase struct {
	name    string
	vip     netip.Addr
	refresh bool // announced by the refreshing announcer
	state   int  // netlink.NUD_*
	fixed   bool // the refresh corrects it
}

func TestNetnsRefreshCorrectsStaleNeighbour(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	for _, s := range []string{
		"net.ipv4.conf.all.arp_accept=0", "net.ipv4.conf." + l.ifB + ".arp_accept=0",
		"net.ipv6.conf.all.accept_untracked_na=0", "net.ipv6.conf." + l.ifB + ".accept_untracked_na=0",
	} {
		if out, err := exec.Command("ip", "netns", "exec", l.nsB, "sysctl", "-qw", s).CombinedOutput(); err != nil {
			if strings.Contains(s, "untracked") && bytes.Contains(out, []byte("No such file")) {
				continue // older than 5.19: no such knob, untracked NAs create nothing
			}
			t.Fatalf("sysctl %s in B: %v\n%s", s, err, out)
		}
	}
	v := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	cases := []staleCase{
		{"IPv4 stale", v("192.0.2.100"), true, netlink.NUD_STALE, true},
		{"IPv4 reachable", v("192.0.2.102"), true, netlink.NUD_REACHABLE, true},
		{"IPv4 permanent", v("192.0.2.103"), true, netlink.NUD_PERMANENT, false},
		{"IPv4 stale, no refresh", v("192.0.2.101"), false, netlink.NUD_STALE, false},
		{"IPv6 stale", v("2001:db8::100"), true, netlink.NUD_STALE, true},
		{"IPv6 reachable", v("2001:db8::102"), true, netlink.NUD_REACHABLE, true},
		{"IPv6 permanent", v("2001:db8::103"), true, netlink.NUD_PERMANENT, false},
		{"IPv6 stale, no refresh", v("2001:db8::101"), false, netlink.NUD_STALE, false},
	}

	refreshing := newLabAnnouncer(t, l, Config{GARPCount: 1, RefreshInterval: refreshPeriod})
	plain := newLabAnnouncer(t, l, Config{GARPCount: 1})
	ctx := context.Background()
	if err := netnstest.InHandle(l.hA, func() error {
		for _, c := range cases {
			a := plain
			if c.refresh {
				a = refreshing
			}
			if err := a.Announce(ctx, c.vip); err != nil {
				return fmt.Errorf("announce %s: %w", c.vip, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	nb, err := netlink.NewHandleAt(l.hB)
	if err != nil {
		t.Fatalf("netlink in B: %v", err)
	}
	defer nb.Close()
	idx := linkIndex(t, l.hB, l.ifB)

	t.Run("corrected within one period", func(t *testing.T) {
		set := map[netip.Addr]time.Time{}
		for _, c := range cases {
			n := &netlink.Neigh{LinkIndex: idx, Family: family(c.vip), State: c.state, IP: c.vip.AsSlice(), HardwareAddr: formerMAC}
			if err := nb.NeighSet(n); err != nil {
				t.Fatalf("%s: set B's entry for %s to %s: %v", c.name, c.vip, formerMAC, err)
			}
			set[c.vip] = time.Now()
		}
		fixedAt := map[netip.Addr]time.Duration{}
		deadline := time.Now().Add(refreshPeriod + refreshSlack)
		for time.Now().Before(deadline) {
			for _, c := range cases {
				if _, done := fixedAt[c.vip]; done {
					continue
				}
				if mac, _ := neighOf(t, nb, idx, c.vip); bytes.Equal(mac, l.macA) {
					fixedAt[c.vip] = time.Since(set[c.vip])
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, c := range cases {
			mac, state := neighOf(t, nb, idx, c.vip)
			took, fixed := fixedAt[c.vip]
			switch {
			case c.fixed && !fixed:
				t.Errorf("%s: B's entry for %s is still %s (%s) %s after it was set; want A's %s within one period (%s)",
					c.name, c.vip, mac, neighState(state), refreshPeriod+refreshSlack, l.macA, refreshPeriod)
			case c.fixed:
				t.Logf("%s: B's entry for %s pointed at A's MAC %s after %s (state %s)", c.name, c.vip, mac, took.Round(time.Millisecond), neighState(state))
			case fixed:
				t.Errorf("%s: B's entry for %s changed to A's MAC, want it left at %s", c.name, c.vip, formerMAC)
			case !bytes.Equal(mac, formerMAC):
				t.Errorf("%s: B's entry for %s is %s, want it left at %s", c.name, c.vip, mac, formerMAC)
			default:
				t.Logf("%s: B's entry for %s still %s (%s), as expected", c.name, c.vip, mac, neighState(state))
			}
		}
	})

	t.Run("cost", func(t *testing.T) {
		// Three periods on a fresh packet socket: 2 ARP frames (request
		// and reply) per refreshed IPv4 VIP and 1 NA per IPv6 VIP each
		// period, nothing for the VIPs without refresh.
		const periods = 3
		arpB, ndpB := observers(t, l)
		window := periods * refreshPeriod
		arps, nas := countAdvertisements(t, arpB, ndpB, l.macA, window)
		perMinute := func(n int) float64 { return float64(n) * float64(time.Minute) / float64(window) }
		for _, c := range cases {
			got, per := arps[c.vip], 2
			if c.vip.Is6() {
				got, per = nas[c.vip], 1
			}
			want := 0
			if c.refresh {
				want = per * periods
			}
			// A window of three periods holds three refreshes; it may
			// catch one more or one less at its edges.
			if got < want-per || got > want+per || (want == 0 && got != 0) {
				t.Errorf("%s: %d frames for %s in %s, want %d", c.name, got, c.vip, window, want)
			}
		}
		v4, v6 := arps[cases[0].vip], nas[cases[4].vip]
		t.Logf("refresh every %s: %d ARP frames per IPv4 VIP and %d NAs per IPv6 VIP in %s: %.0f and %.0f per VIP per minute; at the default %s: %.0f and %.0f",
			refreshPeriod, v4, v6, window, perMinute(v4), perMinute(v6), 3*time.Second,
			perMinute(v4)*float64(refreshPeriod)/float64(3*time.Second), perMinute(v6)*float64(refreshPeriod)/float64(3*time.Second))
	})

	t.Run("withdraw stops it", func(t *testing.T) {
		for _, c := range cases {
			if c.refresh {
				if err := refreshing.Withdraw(ctx, c.vip); err != nil {
					t.Fatalf("Withdraw %s: %v", c.vip, err)
				}
			}
		}
		arpB, ndpB := observers(t, l)
		arps, nas := countAdvertisements(t, arpB, ndpB, l.macA, refreshPeriod+refreshSlack)
		for _, c := range cases {
			if n := arps[c.vip] + nas[c.vip]; n != 0 {
				t.Errorf("%s: %d advertisements of %s after Withdraw", c.name, n, c.vip)
			}
		}
	})
}

// countAdvertisements counts, for window, the ARP frames with mac as
// sender and the neighbor advertisements naming mac, per VIP, on B's
// observers.
func countAdvertisements(t *testing.T, arpB *arp.Client, ndpB *ndp.Conn, mac net.HardwareAddr, window time.Duration) (arps, nas map[netip.Addr]int) {
	t.Helper()
	end := time.Now().Add(window)
	if err := arpB.SetReadDeadline(end); err != nil {
		t.Fatal(err)
	}
	if err := ndpB.SetReadDeadline(end); err != nil {
		t.Fatal(err)
	}
	arps, nas = map[netip.Addr]int{}, map[netip.Addr]int{}
	errc := make(chan error, 1)
	go func() {
		for {
			m, _, _, err := ndpB.ReadFrom()
			if err != nil {
				errc <- err
				return
			}
			na, ok := m.(*ndp.NeighborAdvertisement)
			if !ok || len(na.Options) == 0 {
				continue
			}
			if lla, ok := na.Options[0].(*ndp.LinkLayerAddress); ok && bytes.Equal(lla.Addr, mac) {
				nas[na.TargetAddress]++
			}
		}
	}()
	var arpErr error
	for {
		p, _, err := arpB.Read()
		if err != nil {
			arpErr = err
			break
		}
		if bytes.Equal(p.SenderHardwareAddr, mac) {
			arps[p.SenderIP]++
		}
	}
	ndpErr := <-errc
	for _, err := range []error{arpErr, ndpErr} {
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read on B: %v", err)
		}
	}
	return arps, nas
}

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// neighOf returns B's entry for ip: its MAC and state (nil, 0 if none).
func neighOf(t *testing.T, h *netlink.Handle, idx int, ip netip.Addr) (net.HardwareAddr, int) {
	t.Helper()
	ns, err := h.NeighList(idx, family(ip))
	if err != nil {
		t.Fatalf("list B's neighbours: %v", err)
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return n.HardwareAddr, n.State
		}
	}
	return nil, 0
}

func neighState(s int) string {
	var out []string
	for _, x := range []struct {
		bit  int
		name string
	}{
		{netlink.NUD_INCOMPLETE, "INCOMPLETE"}, {netlink.NUD_REACHABLE, "REACHABLE"}, {netlink.NUD_STALE, "STALE"},
		{netlink.NUD_DELAY, "DELAY"}, {netlink.NUD_PROBE, "PROBE"}, {netlink.NUD_FAILED, "FAILED"},
		{netlink.NUD_NOARP, "NOARP"}, {netlink.NUD_PERMANENT, "PERMANENT"},
	} {
		if s&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "|")
}
