//go:build linux

package l2

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/ipv6"

	"github.com/vipd/vipd/internal/netnstest"
)

// These tests run the real kernel path between two network namespaces, A
// (the VIP owner) and B (a neighbour), joined by a veth pair the test creates.
// Nothing is created in the caller's namespace.

var (
	labVIP4 = netip.MustParseAddr("192.0.2.100")
	labVIP6 = netip.MustParseAddr("2001:db8::100")
	labA4   = netip.MustParseAddr("192.0.2.1")
)

// probeTimeout bounds every wait on the network in these tests.
const probeTimeout = 5 * time.Second

type lab struct {
	nsA, nsB   string
	hA, hB     netns.NsHandle
	ifA, ifB   string
	macA, macB net.HardwareAddr
}

var labSeq atomic.Int32

// ipCmd runs ip(8) with args and returns its output, failing t on error.
func ipCmd(t *testing.T, args ...string) string {
	t.Helper()
	return netnstest.MustRun(t, "ip", args...)
}

// newLab creates namespaces A and B joined by a veth pair, with 192.0.2.1/24
// and 2001:db8::1/64 in A and 192.0.2.2/24 and 2001:db8::2/64 in B, and no
// routes beyond the connected ones. Everything is removed at cleanup.
func newLab(t *testing.T) *lab {
	t.Helper()
	id := fmt.Sprintf("%d-%d", os.Getpid(), labSeq.Add(1))
	l := &lab{
		nsA: "vt-l2-" + id + "-a",
		nsB: "vt-l2-" + id + "-b",
		// Unique per run so Go's interface-name cache cannot map a name
		// to an index from an earlier namespace.
		ifA: "l2a" + strings.ReplaceAll(id, "-", ""),
		ifB: "l2b" + strings.ReplaceAll(id, "-", ""),
	}
	if len(l.ifA) > 15 {
		l.ifA, l.ifB = l.ifA[:15], l.ifB[:15]
	}
	netnstest.NewNS(t, l.nsA)
	netnstest.NewNS(t, l.nsB)
	netnstest.Veth(t, l.nsA, l.ifA, []string{"192.0.2.1/24", "2001:db8::1/64"}, l.nsB, l.ifB, []string{"192.0.2.2/24", "2001:db8::2/64"})
	l.hA, l.hB = netnstest.Handle(t, l.nsA), netnstest.Handle(t, l.nsB)
	l.macA = waitLinkUp(t, l.hA, l.ifA)
	l.macB = waitLinkUp(t, l.hB, l.ifB)
	return l
}

// waitLinkUp waits (bounded) until the veth end has carrier and returns its MAC.
func waitLinkUp(t *testing.T, ns netns.NsHandle, name string) net.HardwareAddr {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink in namespace: %v", err)
	}
	defer h.Close()
	for range 50 {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatalf("look up %s: %v", name, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			return l.Attrs().HardwareAddr
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not come up within 5s", name)
	return nil
}

// newLabAnnouncer creates an Announcer inside namespace A.
func newLabAnnouncer(t *testing.T, l *lab, cfg Config) *Announcer {
	t.Helper()
	cfg.Interface = l.ifA
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	var a *Announcer
	if err := netnstest.InHandle(l.hA, func() (err error) {
		a, err = New(cfg)
		return err
	}); err != nil {
		t.Fatalf("New in %s: %v", l.nsA, err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// observers opens an ARP client and an NDP listener on B's interface.
func observers(t *testing.T, l *lab) (*arp.Client, *ndp.Conn) {
	t.Helper()
	var (
		ac *arp.Client
		nc *ndp.Conn
	)
	err := netnstest.InHandle(l.hB, func() error {
		ifi, err := net.InterfaceByName(l.ifB)
		if err != nil {
			return err
		}
		if ac, err = arp.Dial(ifi); err != nil {
			return fmt.Errorf("arp.Dial: %w", err)
		}
		if nc, _, err = ndp.Listen(ifi, ndp.Unspecified); err != nil {
			ac.Close()
			return fmt.Errorf("ndp.Listen: %w", err)
		}
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeNeighborAdvertisement)
		if err := nc.SetICMPFilter(&f); err != nil {
			return err
		}
		return nc.SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
	})
	if err != nil {
		t.Fatalf("open observers in %s: %v", l.nsB, err)
	}
	t.Cleanup(func() {
		ac.Close()
		nc.Close()
	})
	return ac, nc
}

// addrLines returns `ip -o addr show` for A's interface, one line per address.
func addrLines(t *testing.T, l *lab) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(ipCmd(t, "-n", l.nsA, "-o", "addr", "show", "dev", l.ifA)), "\n")
}

func findLine(lines []string, substr string) (string, bool) {
	for _, line := range lines {
		if strings.Contains(line, substr) {
			return line, true
		}
	}
	return "", false
}

func TestNetnsAnnounceAndWithdraw(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	arpB, ndpB := observers(t, l)
	const count = 3
	a := newLabAnnouncer(t, l, Config{GARPCount: count, GARPInterval: 50 * time.Millisecond})
	ctx := context.Background()

	if err := netnstest.InHandle(l.hA, func() error {
		if err := a.Announce(ctx, labVIP4); err != nil {
			return err
		}
		return a.Announce(ctx, labVIP6)
	}); err != nil {
		t.Fatalf("Announce: %v", err)
	}

	t.Run("B receives the gratuitous ARP burst from A's MAC", func(t *testing.T) {
		expectGARP(t, arpB, l.macA, labVIP4, count)
	})

	t.Run("B receives unsolicited NAs with Override from A's MAC", func(t *testing.T) {
		expectNA(t, ndpB, l.macA, labVIP6, count)
	})

	t.Run("A has the /32 and the /128 nodad, not tentative", func(t *testing.T) {
		lines := addrLines(t, l)
		if _, ok := findLine(lines, "inet 192.0.2.100/32 "); !ok {
			t.Errorf("no 192.0.2.100/32 in:\n%s", strings.Join(lines, "\n"))
		}
		line, ok := findLine(lines, "inet6 2001:db8::100/128 ")
		if !ok {
			t.Fatalf("no 2001:db8::100/128 in:\n%s", strings.Join(lines, "\n"))
		}
		if !strings.Contains(line, "nodad") || strings.Contains(line, "tentative") {
			t.Errorf("IPv6 VIP should be nodad and not tentative: %s", line)
		}
		for _, vip := range []netip.Addr{labVIP4, labVIP6} {
			if held, err := a.Held(vip); err != nil || !held {
				t.Errorf("Held(%s) = %v, %v; want true", vip, held, err)
			}
		}
	})

	t.Run("B reaches the VIPs", func(t *testing.T) {
		for _, vip := range []netip.Addr{labVIP4, labVIP6} {
			out, err := exec.Command("ip", "netns", "exec", l.nsB, "ping", "-c", "1", "-W", "2", vip.String()).CombinedOutput()
			if err != nil {
				t.Errorf("ping %s from B: %v\n%s", vip, err, out)
			}
		}
	})

	t.Run("announcing again keeps one address", func(t *testing.T) {
		if err := netnstest.InHandle(l.hA, func() error { return a.Announce(ctx, labVIP4) }); err != nil {
			t.Fatalf("Announce again: %v", err)
		}
		n := 0
		for _, line := range addrLines(t, l) {
			if strings.Contains(line, " 192.0.2.100/") {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("192.0.2.100 configured %d times", n)
		}
	})

	t.Run("Withdraw removes both and is idempotent", func(t *testing.T) {
		// Withdraw needs only the netlink socket opened in A, so any thread works.
		for range 2 {
			for _, vip := range []netip.Addr{labVIP4, labVIP6} {
				if err := a.Withdraw(ctx, vip); err != nil {
					t.Fatalf("Withdraw(%s): %v", vip, err)
				}
			}
		}
		lines := addrLines(t, l)
		for _, s := range []string{" 192.0.2.100/", " 2001:db8::100/"} {
			if line, ok := findLine(lines, s); ok {
				t.Errorf("still configured after Withdraw: %s", line)
			}
		}
		if _, ok := findLine(lines, "inet 192.0.2.1/24 "); !ok {
			t.Errorf("Withdraw removed A's own address:\n%s", strings.Join(lines, "\n"))
		}
		for _, vip := range []netip.Addr{labVIP4, labVIP6} {
			if held, err := a.Held(vip); err != nil || held {
				t.Errorf("Held(%s) = %v, %v; want false", vip, held, err)
			}
		}
	})
}

// expectGARP reads on B's ARP client until count gratuitous ARP requests and
// count replies for vip from mac arrived (bounded by probeTimeout).
func expectGARP(t *testing.T, arpB *arp.Client, mac net.HardwareAddr, vip netip.Addr, count int) {
	t.Helper()
	var requests, replies int
	if err := arpB.SetReadDeadline(time.Now().Add(probeTimeout)); err != nil {
		t.Fatal(err)
	}
	for requests < count || replies < count {
		p, _, err := arpB.Read()
		if err != nil {
			t.Fatalf("after %d requests and %d replies of %d each: %v", requests, replies, count, err)
		}
		if p.SenderIP != vip {
			continue
		}
		if !bytes.Equal(p.SenderHardwareAddr, mac) || p.TargetIP != vip {
			t.Fatalf("gratuitous ARP %+v, want sender %s and target IP %s", p, mac, vip)
		}
		switch p.Operation {
		case arp.OperationRequest:
			requests++
		case arp.OperationReply:
			replies++
		}
	}
}

// expectNA reads on B's NDP listener until count unsolicited neighbor
// advertisements of vip at mac arrived (bounded by probeTimeout).
func expectNA(t *testing.T, ndpB *ndp.Conn, mac net.HardwareAddr, vip netip.Addr, count int) {
	t.Helper()
	if err := ndpB.SetReadDeadline(time.Now().Add(probeTimeout)); err != nil {
		t.Fatal(err)
	}
	for seen := 0; seen < count; {
		m, cm, src, err := ndpB.ReadFrom()
		if err != nil {
			t.Fatalf("after %d of %d advertisements: %v", seen, count, err)
		}
		na, ok := m.(*ndp.NeighborAdvertisement)
		if !ok || na.TargetAddress != vip {
			continue
		}
		seen++
		if !na.Override || na.Solicited || na.Router {
			t.Errorf("NA flags: override %v solicited %v router %v", na.Override, na.Solicited, na.Router)
		}
		if len(na.Options) != 1 {
			t.Fatalf("NA options %v, want one target link-layer address", na.Options)
		}
		if lla, ok := na.Options[0].(*ndp.LinkLayerAddress); !ok || lla.Direction != ndp.Target || !bytes.Equal(lla.Addr, mac) {
			t.Errorf("NA option %+v, want target link-layer address %s", na.Options[0], mac)
		}
		if src.WithZone("") != vip {
			t.Errorf("NA source %s, want %s", src, vip)
		}
		if cm == nil || !cm.Dst.Equal(net.IPv6linklocalallnodes) {
			t.Errorf("NA control message %v, want destination ff02::1", cm)
		}
	}
}

func TestNetnsRemoveAddress(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	a := newLabAnnouncer(t, l, Config{Quiet: true})
	ctx := context.Background()
	for _, vip := range []netip.Addr{labVIP4, labVIP6} {
		if err := a.Announce(ctx, vip); err != nil {
			t.Fatalf("Announce(%s): %v", vip, err)
		}
	}
	if err := netnstest.InHandle(l.hA, func() error {
		for range 2 { // idempotent
			for _, vip := range []netip.Addr{labVIP4, labVIP6} {
				if err := RemoveAddress(l.ifA, vip); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("RemoveAddress: %v", err)
	}
	lines := addrLines(t, l)
	for _, s := range []string{" 192.0.2.100/", " 2001:db8::100/"} {
		if line, ok := findLine(lines, s); ok {
			t.Errorf("still configured after RemoveAddress: %s", line)
		}
	}
	if _, ok := findLine(lines, "inet 192.0.2.1/24 "); !ok {
		t.Errorf("RemoveAddress removed A's own address:\n%s", strings.Join(lines, "\n"))
	}
}

func TestNetnsWatchConflicts(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	a := newLabAnnouncer(t, l, Config{GARPCount: 2, GARPInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// A owns both VIPs, as a node watching for duplicate owners would.
	if err := netnstest.InHandle(l.hA, func() error {
		if err := a.Announce(ctx, labVIP4); err != nil {
			return err
		}
		return a.Announce(ctx, labVIP6)
	}); err != nil {
		t.Fatalf("Announce: %v", err)
	}

	w := startConflictWatches(ctx, l, a, labVIP4, labVIP6)
	arpB, ndpB := observers(t, l)
	w.claimUntilReported(t, l, arpB, ndpB, "watchers starting")

	// The watchers are now listening: A advertises again before B's next
	// claims. Its own NAs loop back to the IPv6 watcher (multicast loopback)
	// and must be ignored. (Linux does not hand outgoing frames to an
	// ETH_P_ARP packet socket, so the IPv4 own-MAC filter is covered by the
	// unit tests only.)
	if err := netnstest.InHandle(l.hA, func() error {
		if err := a.Announce(ctx, labVIP4); err != nil {
			return err
		}
		return a.Announce(ctx, labVIP6)
	}); err != nil {
		t.Fatalf("Announce again: %v", err)
	}
	w.claimUntilReported(t, l, arpB, ndpB, "after A re-announced")

	cancel()
	for range 2 {
		waitReturned(t, w.errs, "WatchConflicts")
	}
	for {
		select {
		case r := <-w.reports:
			if !bytes.Equal(r.mac, l.macB) {
				t.Errorf("late conflict on %s reported for %s, want only %s", r.vip, r.mac, l.macB)
			}
		default:
			return
		}
	}
}

// conflictWatches are WatchConflicts calls running in namespace A.
type conflictWatches struct {
	vips    []netip.Addr
	reports chan conflictReport
	errs    chan error // one result per watch
}

// conflictReport is one claim a WatchConflicts callback received.
type conflictReport struct {
	vip netip.Addr
	mac net.HardwareAddr
}

// startConflictWatches runs a.WatchConflicts in namespace A for each of
// vips until ctx ends.
func startConflictWatches(ctx context.Context, l *lab, a *Announcer, vips ...netip.Addr) *conflictWatches {
	w := &conflictWatches{vips: vips, reports: make(chan conflictReport, 256), errs: make(chan error, len(vips))}
	for _, vip := range vips {
		go func() {
			w.errs <- netnstest.InHandle(l.hA, func() error {
				return a.WatchConflicts(ctx, vip, func(mac net.HardwareAddr) {
					select {
					case w.reports <- conflictReport{vip, mac}:
					default:
					}
				})
			})
		}()
	}
	return w
}

// claimUntilReported has B claim the watched VIPs until A reported each of
// them with B's MAC: the watchers may still be opening their sockets when the
// first claims go out. Bounded: 100 rounds of 50ms.
func (w *conflictWatches) claimUntilReported(t *testing.T, l *lab, arpB *arp.Client, ndpB *ndp.Conn, phase string) {
	t.Helper()
	seen := map[netip.Addr]bool{}
	all := func() bool {
		for _, vip := range w.vips {
			if !seen[vip] {
				return false
			}
		}
		return true
	}
	for i := 0; i < 100 && !all(); i++ {
		for _, vip := range w.vips {
			if seen[vip] {
				continue
			}
			if vip.Is4() {
				claim, err := arp.NewPacket(arp.OperationReply, l.macB, vip, l.macA, labA4)
				if err != nil {
					t.Fatal(err)
				}
				if err := arpB.WriteTo(claim, ethernet.Broadcast); err != nil {
					t.Fatalf("%s: send ARP claim from B: %v", phase, err)
				}
				continue
			}
			claim := &ndp.NeighborAdvertisement{
				Override:      true,
				TargetAddress: vip,
				Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: l.macB}},
			}
			if err := ndpB.WriteTo(claim, nil, netip.IPv6LinkLocalAllNodes()); err != nil {
				t.Fatalf("%s: send NA claim from B: %v", phase, err)
			}
		}
		timeout := time.After(50 * time.Millisecond)
	drain:
		for {
			select {
			case r := <-w.reports:
				if !bytes.Equal(r.mac, l.macB) {
					t.Fatalf("%s: conflict on %s reported for %s, want only B's MAC %s (A is %s)", phase, r.vip, r.mac, l.macB, l.macA)
				}
				seen[r.vip] = true
			case err := <-w.errs:
				t.Fatalf("%s: WatchConflicts returned early: %v", phase, err)
			case <-timeout:
				break drain
			}
		}
	}
	for _, vip := range w.vips {
		if !seen[vip] {
			t.Fatalf("%s: no conflict reported for %s within 5s", phase, vip)
		}
	}
}

// TestNetnsWatchLinks: a link going down and up in the namespace is
// reported by name, and WatchLinks returns nil once its context ends.
func TestNetnsWatchLinks(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	names := make(chan string, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		// The subscription socket is made in this thread's namespace; the
		// thread is never unlocked (see inNS).
		runtime.LockOSThread()
		if err := netns.Set(l.hA); err != nil {
			errc <- err
			return
		}
		close(started)
		errc <- WatchLinks(ctx, func(name string) {
			select {
			case names <- name:
			default:
			}
		})
	}()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("WatchLinks: %v", err)
	}
	// The subscription may start a moment after the thread switched; flip
	// the link until a change is seen (bounded).
	wait := func(what string, args ...string) {
		t.Helper()
		deadline := time.After(probeTimeout)
		for i := 0; ; i++ {
			if i < 5 {
				ipCmd(t, append([]string{"-n", l.nsA, "link", "set", l.ifA}, args...)...)
			}
			select {
			case n := <-names:
				if n == l.ifA {
					return
				}
			case err := <-errc:
				t.Fatalf("WatchLinks returned while waiting for %s: %v", what, err)
			case <-time.After(200 * time.Millisecond):
				continue
			case <-deadline:
				t.Fatalf("no change of %s reported for %s", l.ifA, what)
			}
		}
	}
	wait("link down", "down")
	// Drop the rest of the down burst, so the up step sees its own event.
	time.Sleep(100 * time.Millisecond)
	for len(names) > 0 {
		<-names
	}
	wait("link up", "up")
	cancel()
	waitReturned(t, errc, "WatchLinks")
}

// waitReturned waits (bounded) for a watcher's result on errc after its
// context was cancelled: it must return, and return nil.
func waitReturned(t *testing.T, errc <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("%s after cancel: %v", what, err)
		}
	case <-time.After(probeTimeout):
		t.Fatalf("%s did not return after cancel", what)
	}
}

// TestNetnsSetLifetime: the kernel removes a VIP whose lifetime runs out,
// IPv4 and IPv6 alike, within a second of slack; a lifetime made forever
// again keeps it. This is what removes a VIP left for a restart in place
// when no process takes it over.
func TestNetnsSetLifetime(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	a := newLabAnnouncer(t, l, Config{GARPCount: 1})
	ctx := context.Background()
	kept := netip.MustParseAddr("192.0.2.101")
	// Announce in A's namespace, as every other test here does: the
	// announcer's packet sockets are opened where it is called, and from
	// the test's own namespace the interface index names another
	// interface (a cold CI run: "sendto: network is down").
	for _, v := range []netip.Addr{labVIP4, labVIP6, kept} {
		if err := netnstest.InHandle(l.hA, func() error {
			if err := a.Announce(ctx, v); err != nil {
				return err
			}
			return a.SetLifetime(ctx, v, time.Second)
		}); err != nil {
			t.Fatal(err)
		}
	}
	set := time.Now()
	if line, ok := findLine(addrLines(t, l), labVIP4.String()+"/32"); !ok || !strings.Contains(line, "valid_lft 1sec") {
		t.Errorf("after SetLifetime(1s): %q, want valid_lft 1sec", line)
	}
	if line, ok := findLine(addrLines(t, l), labVIP6.String()+"/128"); !ok || !strings.Contains(line, "deprecated") {
		t.Errorf("IPv6 VIP after SetLifetime(1s): %q, want it still deprecated (never the host's source)", line)
	}
	if err := netnstest.InHandle(l.hA, func() error { return a.SetLifetime(ctx, kept, 0) }); err != nil {
		t.Fatal(err)
	}
	if line, ok := findLine(addrLines(t, l), kept.String()+"/32"); !ok || !strings.Contains(line, "valid_lft forever") {
		t.Errorf("after SetLifetime(0): %q, want valid_lft forever", line)
	}
	if ok, err := a.Verify(ctx, kept); err != nil || !ok {
		t.Errorf("Verify after SetLifetime(0) = %v, %v; want true (scope host, forever)", ok, err)
	}
	deadline := time.Now().Add(probeTimeout)
	for {
		lines := addrLines(t, l)
		_, has4 := findLine(lines, labVIP4.String()+"/32")
		_, has6 := findLine(lines, labVIP6.String()+"/128")
		if !has4 && !has6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("addresses with a 1s lifetime still there after %v:\n%s", probeTimeout, strings.Join(lines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	gone := time.Since(set)
	if gone > 2500*time.Millisecond {
		t.Errorf("gone %v after a 1s lifetime, want within a second of slack", gone)
	}
	if _, ok := findLine(addrLines(t, l), kept.String()+"/32"); !ok {
		t.Error("the address made forever again was removed too")
	}
	t.Logf("addresses with a 1s lifetime removed by the kernel %v after it was set", gone.Round(10*time.Millisecond))
}
