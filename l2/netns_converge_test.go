//go:build linux

package l2

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vipd/vipd/internal/netnstest"
)

// Network namespace tests for converging on what the kernel holds: the
// host's own address next to a VIP, addresses changed behind vipd's back,
// link state read per namespace, and an interface deleted and recreated.

// goInNS runs fn in a new goroutine on a thread switched into ns (never
// unlocked, see netnstest.InHandle) and returns a channel with its result.
func goInNS(ns netns.NsHandle, fn func() error) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- netnstest.InHandle(ns, fn) }()
	return errc
}

// linkIndex returns the index of the interface name in namespace ns.
func linkIndex(t *testing.T, ns netns.NsHandle, name string) int {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink in namespace: %v", err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("look up %s: %v", name, err)
	}
	return l.Attrs().Index
}

// TestNetnsHostAddressSurvives: with the VIP equal to the node's own primary
// address 192.0.2.11/24, Announce adds 192.0.2.11/32 beside it, and Withdraw
// and RemoveAddress remove that /32 only; the /24 and its routes stay. An
// IPv6 VIP equal to the node's own 2001:db8::1/64 cannot get its /128 (the
// kernel holds an IPv6 address once per interface): Announce says so, and
// nothing removes the /64.
func TestNetnsHostAddressSurvives(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	own4 := netip.MustParseAddr("192.0.2.11")
	own6 := netip.MustParseAddr("2001:db8::1")
	// 192.0.2.11/24 becomes A's only, primary, IPv4 address.
	ipCmd(t, "-n", l.nsA, "addr", "del", "192.0.2.1/24", "dev", l.ifA)
	ipCmd(t, "-n", l.nsA, "addr", "add", "192.0.2.11/24", "dev", l.ifA)
	a := newLabAnnouncer(t, l, Config{GARPCount: 1})
	ctx := context.Background()

	has := func(addr netip.Addr) bool {
		t.Helper()
		var held bool
		if err := netnstest.InHandle(l.hA, func() (err error) {
			held, err = HasAddress(l.ifA, addr)
			return err
		}); err != nil {
			t.Fatalf("HasAddress(%s): %v", addr, err)
		}
		return held
	}
	// check fails unless A's addresses include every one of want and
	// 192.0.2.11/32 is there exactly when withHost.
	check := func(step string, withHost bool) {
		t.Helper()
		lines := addrLines(t, l)
		for _, want := range []string{"inet 192.0.2.11/24 ", "inet6 2001:db8::1/64 "} {
			if _, ok := findLine(lines, want); !ok {
				t.Fatalf("%s: %s removed:\n%s", step, strings.TrimSpace(want), strings.Join(lines, "\n"))
			}
		}
		if _, ok := findLine(lines, "inet 192.0.2.11/32 "); ok != withHost {
			t.Fatalf("%s: 192.0.2.11/32 present %v, want %v:\n%s", step, ok, withHost, strings.Join(lines, "\n"))
		}
		if held, err := a.Held(own4); err != nil || held != withHost {
			t.Fatalf("%s: Held(%s) = %v, %v; want %v", step, own4, held, err, withHost)
		}
		if held := has(own4); held != withHost {
			t.Fatalf("%s: HasAddress(%s) = %v, want %v", step, own4, held, withHost)
		}
	}
	ping := func(step string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "exec", l.nsB, "ping", "-c", "1", "-W", "2", own4.String()).CombinedOutput(); err != nil {
			t.Fatalf("%s: ping %s from B: %v\n%s", step, own4, err, out)
		}
	}

	check("before Announce", false)
	if err := netnstest.InHandle(l.hA, func() error { return a.Announce(ctx, own4) }); err != nil {
		t.Fatalf("Announce(%s): %v", own4, err)
	}
	check("after Announce", true)
	if err := a.Withdraw(ctx, own4); err != nil {
		t.Fatalf("Withdraw(%s): %v", own4, err)
	}
	check("after Withdraw", false)
	ping("after Withdraw")
	if err := a.Withdraw(ctx, own4); err != nil {
		t.Fatalf("Withdraw(%s) without the /32: %v", own4, err)
	}
	check("after a second Withdraw", false)

	if err := netnstest.InHandle(l.hA, func() error { return a.Announce(ctx, own4) }); err != nil {
		t.Fatalf("Announce(%s) again: %v", own4, err)
	}
	for i := range 2 { // the second call finds only the /24
		if err := netnstest.InHandle(l.hA, func() error { return RemoveAddress(l.ifA, own4) }); err != nil {
			t.Fatalf("RemoveAddress(%s) #%d: %v", own4, i+1, err)
		}
		check("after RemoveAddress", false)
	}
	ping("after RemoveAddress")

	err := netnstest.InHandle(l.hA, func() error { return a.Announce(ctx, own6) })
	if !errors.Is(err, errOtherPrefix) {
		t.Fatalf("Announce(%s) with %s/64 on the interface = %v, want errOtherPrefix", own6, own6, err)
	}
	if err := a.Withdraw(ctx, own6); err != nil {
		t.Fatalf("Withdraw(%s): %v", own6, err)
	}
	if err := netnstest.InHandle(l.hA, func() error { return RemoveAddress(l.ifA, own6) }); err != nil {
		t.Fatalf("RemoveAddress(%s): %v", own6, err)
	}
	if held := has(own6); held {
		t.Fatalf("HasAddress(%s) with only the /64 = true", own6)
	}
	check("after the IPv6 calls", false)
}

// TestNetnsWatchAddrs: addresses added by an Announcer and removed behind its
// back (`ip addr del`, `ip addr flush`) in the namespace are reported with the
// interface's index and name, and WatchAddrs returns nil once its context
// ends.
func TestNetnsWatchAddrs(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	index := linkIndex(t, l.hA, l.ifA)
	a := newLabAnnouncer(t, l, Config{Quiet: true})
	changes := make(chan AddrChange, 256)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := goInNS(l.hA, func() error {
		return WatchAddrs(ctx, func(c AddrChange) {
			select {
			case changes <- c:
			default:
			}
		})
	})

	// await waits (bounded) for the change of p; other changes are skipped.
	await := func(what string, p netip.Prefix, added bool, timeout time.Duration) bool {
		t.Helper()
		deadline := time.After(timeout)
		for {
			select {
			case c := <-changes:
				if c.Prefix != p || c.Added != added {
					continue
				}
				if c.Index != index || c.Interface != l.ifA {
					t.Fatalf("%s: change %+v, want interface %s (index %d)", what, c, l.ifA, index)
				}
				return true
			case err := <-errc:
				t.Fatalf("%s: WatchAddrs returned: %v", what, err)
			case <-deadline:
				return false
			}
		}
	}

	for _, vip := range []netip.Addr{labVIP4, labVIP6} {
		host := hostPrefix(vip)
		// The subscription may start a moment after the goroutine: add
		// until the addition is seen (bounded), then it is running.
		seen := false
		for i := 0; i < 10 && !seen; i++ {
			if err := a.Withdraw(ctx, vip); err != nil {
				t.Fatalf("Withdraw(%s): %v", vip, err)
			}
			if err := netnstest.InHandle(l.hA, func() error { return a.Announce(ctx, vip) }); err != nil {
				t.Fatalf("Announce(%s): %v", vip, err)
			}
			seen = await("Announce "+vip.String(), host, true, 500*time.Millisecond)
		}
		if !seen {
			t.Fatalf("addition of %s not reported", host)
		}
		ipCmd(t, "-n", l.nsA, "addr", "del", host.String(), "dev", l.ifA)
		if !await("ip addr del "+host.String(), host, false, probeTimeout) {
			t.Fatalf("removal of %s behind the Announcer's back not reported", host)
		}
		if held, err := a.Held(vip); err != nil || held {
			t.Fatalf("Held(%s) after ip addr del = %v, %v; want false", vip, held, err)
		}
	}

	if err := netnstest.InHandle(l.hA, func() error { return a.Announce(ctx, labVIP4) }); err != nil {
		t.Fatalf("Announce(%s): %v", labVIP4, err)
	}
	if !await("Announce again", hostPrefix(labVIP4), true, probeTimeout) {
		t.Fatal("second addition not reported")
	}
	ipCmd(t, "-n", l.nsA, "addr", "flush", "dev", l.ifA)
	if !await("ip addr flush", hostPrefix(labVIP4), false, probeTimeout) {
		t.Fatal("removal by ip addr flush not reported")
	}

	cancel()
	waitReturned(t, errc, "WatchAddrs")
}

// TestNetnsLinkUp: LinkUp reads the calling thread's namespace (sysfs would
// show the namespace of its mount instead), and follows the administrative
// state and the carrier.
func TestNetnsLinkUp(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	up := func() bool {
		var got bool
		if err := netnstest.InHandle(l.hA, func() error { got = LinkUp(l.ifA); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// waitUp waits (bounded) until LinkUp in A reads want.
	waitUp := func(step string, want bool) {
		t.Helper()
		for range 50 {
			if up() == want {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: LinkUp(%s) in A did not read %v within 5s", step, l.ifA, want)
	}

	waitUp("veth up", true)
	if LinkUp(l.ifA) {
		t.Fatalf("LinkUp(%s) outside namespace A = true; the interface exists only in A", l.ifA)
	}
	if err := netnstest.InHandle(l.hA, func() error {
		if LinkUp(l.ifB) || LinkUp("vt-l2-absent") {
			return errors.New("an interface absent from A reads as up")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ipCmd(t, "-n", l.nsB, "link", "set", l.ifB, "down")
	waitUp("peer down (no carrier)", false)
	ipCmd(t, "-n", l.nsB, "link", "set", l.ifB, "up")
	waitUp("peer up again", true)
	ipCmd(t, "-n", l.nsA, "link", "set", l.ifA, "down")
	waitUp("administratively down", false)
}

// TestNetnsInterfaceRecreated: the interface carrying the VIPs is deleted
// and created again under the same name (new index, new MAC). The running
// WatchConflicts calls return an error; the same Announcer then announces on
// the new interface: the addresses are on it and B receives gratuitous ARP
// and neighbor advertisements from the new MAC; a new WatchConflicts hears
// B's claims.
func TestNetnsInterfaceRecreated(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	const count = 2
	a := newLabAnnouncer(t, l, Config{GARPCount: count, GARPInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vips := []netip.Addr{labVIP4, labVIP6}
	announce := func(step string) {
		t.Helper()
		for _, vip := range vips {
			if err := netnstest.InHandle(l.hA, func() error { return a.Announce(ctx, vip) }); err != nil {
				t.Fatalf("%s: Announce(%s): %v", step, vip, err)
			}
		}
	}

	arpB, ndpB := observers(t, l)
	announce("first link")
	expectGARP(t, arpB, l.macA, labVIP4, count)
	w := startConflictWatches(ctx, l, a, vips...)
	w.claimUntilReported(t, l, arpB, ndpB, "first link")
	oldIndex, oldMAC := linkIndex(t, l.hA, l.ifA), l.macA

	// Deleting one end of a veth pair deletes both.
	ipCmd(t, "-n", l.nsA, "link", "del", l.ifA)
	for range vips {
		select {
		case err := <-w.errs:
			if err == nil {
				t.Fatal("WatchConflicts returned nil after its interface was deleted")
			}
			t.Logf("WatchConflicts after the delete: %v", err)
		case <-time.After(probeTimeout):
			t.Fatal("WatchConflicts still running 5s after its interface was deleted")
		}
	}
	if err := netnstest.InHandle(l.hA, func() error { return a.Announce(ctx, labVIP4) }); !errors.Is(err, errNoLink) {
		t.Fatalf("Announce with the interface gone = %v, want errNoLink", err)
	}

	ipCmd(t, "-n", l.nsA, "link", "add", l.ifA, "type", "veth", "peer", "name", l.ifB, "netns", l.nsB)
	ipCmd(t, "-n", l.nsA, "addr", "add", "192.0.2.1/24", "dev", l.ifA)
	ipCmd(t, "-n", l.nsA, "addr", "add", "2001:db8::1/64", "dev", l.ifA, "nodad")
	ipCmd(t, "-n", l.nsB, "addr", "add", "192.0.2.2/24", "dev", l.ifB)
	ipCmd(t, "-n", l.nsB, "addr", "add", "2001:db8::2/64", "dev", l.ifB, "nodad")
	ipCmd(t, "-n", l.nsA, "link", "set", l.ifA, "up")
	ipCmd(t, "-n", l.nsB, "link", "set", l.ifB, "up")
	l.macA = waitLinkUp(t, l.hA, l.ifA)
	l.macB = waitLinkUp(t, l.hB, l.ifB)
	if idx := linkIndex(t, l.hA, l.ifA); idx == oldIndex {
		t.Fatalf("recreated %s got the old index %d", l.ifA, idx)
	}
	t.Logf("%s recreated: index %d -> %d, MAC %s -> %s", l.ifA, oldIndex, linkIndex(t, l.hA, l.ifA), oldMAC, l.macA)

	arpB, ndpB = observers(t, l) // B's old interface went with the pair
	announce("recreated link")
	lines := addrLines(t, l)
	for _, want := range []string{"inet 192.0.2.100/32 ", "inet6 2001:db8::100/128 "} {
		if _, ok := findLine(lines, want); !ok {
			t.Fatalf("%s missing on the recreated interface:\n%s", strings.TrimSpace(want), strings.Join(lines, "\n"))
		}
	}
	expectGARP(t, arpB, l.macA, labVIP4, count)
	expectNA(t, ndpB, l.macA, labVIP6, count)

	w = startConflictWatches(ctx, l, a, vips...)
	w.claimUntilReported(t, l, arpB, ndpB, "recreated link")
	cancel()
	for range vips {
		waitReturned(t, w.errs, "WatchConflicts")
	}
}
