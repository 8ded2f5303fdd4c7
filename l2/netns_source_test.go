//go:build linux

package l2

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vipd/vipd/internal/netnstest"
)

// A VIP is never the source address of the owner's own connections, in L2
// mode (the VIP on the node's interface) and in BGP mode (bound on lo by a
// quiet Announcer), while connections to the VIP still work.
//
// The lab: the owner A, a peer B and a router R on one segment (a bridge in
// R's namespace), and a host C behind R.
//
//	segment        192.0.2.0/24     2001:db8::/64     A .11/::11, B .12/::12, R .1/::1
//	B's 2nd net    198.51.100.0/25  2001:db8:2::/64   B .12/::12, reached by A over an on-link
//	                                                  route without gateway or source
//	behind R       203.0.113.0/25   2001:db8:1::/64   R .1/::1, C .2/::2
//
// A's interface is eth0 in this picture (named uniquely per run, see ifA).
// L2 mode: A's node addresses are on its eth0 with the VIPs: 192.0.2.10 and
// 2001:db8::10 inside the segment's prefix, 198.51.100.200 and
// 2001:db8:3::10 outside every prefix on eth0 (R and C route those to A).
// BGP mode: A's node addresses are 192.0.2.11/32 and 2001:db8:ff::11/128 on
// lo (loopback addressing, as routed fabrics do), eth0 has no global
// address, routes go via R's link-local address, and the VIPs are on lo.

// srcPort is where the lab's TCP servers listen: each one writes the peer
// address it saw and closes.
const srcPort = 7300

var (
	srcPeer4, srcPeer6     = netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("2001:db8::12")
	srcOnLink4, srcOnLink6 = netip.MustParseAddr("198.51.100.12"), netip.MustParseAddr("2001:db8:2::12")
	srcRemote4, srcRemote6 = netip.MustParseAddr("203.0.113.2"), netip.MustParseAddr("2001:db8:1::2")
)

// srcLab is the lab above, with A's node addresses and VIPs for one mode.
type srcLab struct {
	ns           map[string]string // a, b, r, c -> namespace name
	h            map[string]netns.NsHandle
	ifA          string // A's interface on the segment (eth0 in the picture)
	vipIface     string // ifA (L2) or lo (BGP)
	node4, node6 netip.Addr
	vips         []netip.Addr
	a            *Announcer
	seen         map[string]chan string // b, c -> peer addresses their server saw
}

func newSrcLab(t *testing.T, bgp bool) *srcLab {
	t.Helper()
	id := fmt.Sprintf("%d-%d", os.Getpid(), labSeq.Add(1))
	l := &srcLab{ns: map[string]string{}, h: map[string]netns.NsHandle{}, seen: map[string]chan string{},
		// Unique per run, not eth0: Go's interface-name cache, filled in
		// another namespace (the test process's own has an eth0), would
		// give the advertisement socket's zone a wrong index.
		ifA: "l2s" + strings.ReplaceAll(id, "-", "")}
	if len(l.ifA) > 15 {
		l.ifA = l.ifA[:15]
	}
	for _, n := range []string{"a", "b", "r", "c"} {
		l.ns[n] = "vt-l2s-" + id + "-" + n
		netnstest.NewNS(t, l.ns[n])
		l.h[n] = netnstest.Handle(t, l.ns[n])
	}
	a, b, r, c := l.ns["a"], l.ns["b"], l.ns["r"], l.ns["c"]
	ipCmd(t, "-n", r, "link", "add", "br0", "type", "bridge")
	for _, n := range []string{"a", "b"} {
		ipCmd(t, "-n", r, "link", "add", "p-"+n, "type", "veth", "peer", "name", map[string]string{"a": l.ifA, "b": "eth0"}[n], "netns", l.ns[n])
		ipCmd(t, "-n", r, "link", "set", "p-"+n, "master", "br0", "up")
	}
	ipCmd(t, "-n", r, "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", c)
	ipCmd(t, "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	for _, x := range [][]string{
		{r, "addr", "add", "192.0.2.1/24", "dev", "br0"}, {r, "addr", "add", "2001:db8::1/64", "dev", "br0", "nodad"},
		{r, "addr", "add", "fe80::1/64", "dev", "br0", "nodad"},
		{r, "addr", "add", "203.0.113.1/25", "dev", "eth1"}, {r, "addr", "add", "2001:db8:1::1/64", "dev", "eth1", "nodad"},
		{b, "addr", "add", "192.0.2.12/24", "dev", "eth0"}, {b, "addr", "add", "2001:db8::12/64", "dev", "eth0", "nodad"},
		{b, "addr", "add", "198.51.100.12/25", "dev", "eth0"}, {b, "addr", "add", "2001:db8:2::12/64", "dev", "eth0", "nodad"},
		{c, "addr", "add", "203.0.113.2/25", "dev", "eth0"}, {c, "addr", "add", "2001:db8:1::2/64", "dev", "eth0", "nodad"},
		{r, "link", "set", "br0", "up"}, {r, "link", "set", "eth1", "up"},
		{a, "link", "set", l.ifA, "up"}, {b, "link", "set", "eth0", "up"}, {c, "link", "set", "eth0", "up"},
		{c, "route", "add", "192.0.2.0/24", "via", "203.0.113.1"}, {c, "route", "add", "198.51.100.0/24", "via", "203.0.113.1"},
		{c, "route", "add", "2001:db8::/32", "via", "2001:db8:1::1"},
		{r, "route", "add", "198.51.100.0/25", "dev", "br0"}, {r, "route", "add", "2001:db8:2::/64", "dev", "br0"},
	} {
		ipCmd(t, append([]string{"-n", x[0]}, x[1:]...)...)
	}
	if bgp {
		l.vipIface = "lo"
		l.node4, l.node6 = netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8:ff::11")
		l.vips = []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
		// What a routing daemon learns: every VIP and node address of A
		// via A. B and R are the routers' side here.
		for _, n := range []string{b, r} {
			dev := map[string]string{b: "eth0", r: "br0"}[n]
			ipCmd(t, "-n", n, "route", "replace", "192.0.2.11/32", "dev", dev)
			ipCmd(t, "-n", n, "route", "replace", "192.0.2.10/32", "via", "192.0.2.11", "dev", dev)
			ipCmd(t, "-n", n, "-6", "route", "replace", "2001:db8::10/128", "via", "fe80::a", "dev", dev)
		}
	} else {
		l.vipIface = l.ifA
		l.node4, l.node6 = netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::11")
		l.vips = []netip.Addr{
			netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10"),
			netip.MustParseAddr("198.51.100.200"), netip.MustParseAddr("2001:db8:3::10"),
		}
		// The VIPs outside every prefix on A's eth0: R and B reach them
		// on-link (they ARP / solicit for them), C through R.
		for _, x := range [][]string{{r, "198.51.100.200/32", "br0"}, {b, "198.51.100.200/32", "eth0"}} {
			ipCmd(t, "-n", x[0], "route", "add", x[1], "dev", x[2])
		}
		ipCmd(t, "-n", r, "-6", "route", "add", "2001:db8:3::10/128", "dev", "br0")
		ipCmd(t, "-n", b, "-6", "route", "add", "2001:db8:3::10/128", "dev", "eth0")
	}
	// B and R reach the node's own addresses (on lo in BGP mode) too.
	ipCmd(t, "-n", r, "-6", "route", "replace", "2001:db8:ff::11/128", "via", "fe80::a", "dev", "br0")
	ipCmd(t, "-n", b, "-6", "route", "replace", "2001:db8:ff::11/128", "via", "fe80::a", "dev", "eth0")
	ipCmd(t, "-n", b, "route", "add", "203.0.113.0/25", "via", "192.0.2.1")
	ipCmd(t, "-n", b, "-6", "route", "add", "2001:db8:1::/64", "via", "2001:db8::1")
	ipCmd(t, "-n", a, "addr", "add", "fe80::a/64", "dev", l.ifA, "nodad")
	l.addNode(t)
	for _, n := range []string{"a", "b", "r", "c"} {
		waitLinkUp(t, l.h[n], map[string]string{"a": l.ifA, "b": "eth0", "r": "br0", "c": "eth0"}[n])
	}

	cfg := Config{Interface: l.vipIface, Quiet: bgp, GARPCount: 1,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if err := netnstest.InHandle(l.h["a"], func() (err error) { l.a, err = New(cfg); return err }); err != nil {
		t.Fatalf("New in A: %v", err)
	}
	t.Cleanup(func() {
		if err := l.a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	for _, vip := range l.vips {
		if err := netnstest.InHandle(l.h["a"], func() error { return l.a.Announce(context.Background(), vip) }); err != nil {
			t.Fatalf("Announce %s: %v", vip, err)
		}
	}
	// TCP servers that tell a client the address they saw it come from:
	// in B and C for A's outgoing connections, in A for connections to
	// the VIPs (its answer names the local address that served).
	for _, n := range []string{"a", "b", "c"} {
		l.seen[n] = make(chan string, 64)
		l.serve(t, n)
	}
	return l
}

// addNode gives A its node addresses and the routes that go with them:
// on eth0 in L2 mode, on lo in BGP mode. Called again after removing them,
// they come after the VIPs in A's address list.
func (l *srcLab) addNode(t *testing.T) {
	t.Helper()
	a := l.ns["a"]
	if l.vipIface == "lo" {
		ipCmd(t, "-n", a, "addr", "add", l.node4.String()+"/32", "dev", "lo")
		ipCmd(t, "-n", a, "addr", "add", l.node6.String()+"/128", "dev", "lo")
		for _, p := range []string{"192.0.2.0/24", "198.51.100.0/25", "203.0.113.0/25"} {
			ipCmd(t, "-n", a, "route", "replace", p, "via", "192.0.2.1", "dev", l.ifA, "onlink")
		}
		for _, p := range []string{"2001:db8::/64", "2001:db8:2::/64", "2001:db8:1::/64"} {
			ipCmd(t, "-n", a, "-6", "route", "replace", p, "via", "fe80::1", "dev", l.ifA)
		}
		return
	}
	ipCmd(t, "-n", a, "addr", "add", l.node4.String()+"/24", "dev", l.ifA)
	ipCmd(t, "-n", a, "addr", "add", l.node6.String()+"/64", "dev", l.ifA, "nodad")
	// An on-link route without gateway or preferred source, as a network
	// manager adds for another subnet on the same segment.
	ipCmd(t, "-n", a, "route", "replace", "198.51.100.0/25", "dev", l.ifA)
	ipCmd(t, "-n", a, "-6", "route", "replace", "2001:db8:2::/64", "dev", l.ifA)
	ipCmd(t, "-n", a, "route", "replace", "203.0.113.0/25", "via", "192.0.2.1")
	ipCmd(t, "-n", a, "-6", "route", "replace", "2001:db8:1::/64", "via", "2001:db8::1")
}

// readdNode removes A's node addresses and adds them back, as a DHCP
// renewal or a network manager's restart does: the VIPs are then first in
// A's address list.
func (l *srcLab) readdNode(t *testing.T) {
	t.Helper()
	dev, bits4, bits6 := l.ifA, "/24", "/64"
	if l.vipIface == "lo" {
		dev, bits4, bits6 = "lo", "/32", "/128"
	}
	ipCmd(t, "-n", l.ns["a"], "addr", "del", l.node4.String()+bits4, "dev", dev)
	ipCmd(t, "-n", l.ns["a"], "addr", "del", l.node6.String()+bits6, "dev", dev)
	l.addNode(t)
}

// serve runs a TCP server on [::]:srcPort in namespace n until the test
// ends: it writes "<peer address> <local address>" to each client and
// records the peer address in l.seen[n].
func (l *srcLab) serve(t *testing.T, n string) {
	t.Helper()
	var ln net.Listener
	if err := netnstest.InHandle(l.h[n], func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf("[::]:%d", srcPort))
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", n, err)
	}
	t.Cleanup(func() { ln.Close() })
	// Read once here: newSrcLab is still filling l.seen for the next
	// nodes when a connection can arrive.
	seen := l.seen[n]
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			select {
			case seen <- peer.String():
			default:
			}
			_ = c.SetDeadline(time.Now().Add(probeTimeout))
			fmt.Fprintf(c, "%s %s\n", peer, local)
			c.Close()
		}
	}()
}

// dial connects from namespace n to dst's server (bounded: 5 tries of 1s)
// and returns the connection's local address and what the server answered.
func (l *srcLab) dial(n string, dst netip.Addr) (local netip.Addr, peer, served string, err error) {
	err = netnstest.InHandle(l.h[n], func() error {
		var last error
		for range 5 {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(dst, srcPort).String(), time.Second)
			if err != nil {
				last = err
				continue
			}
			defer c.Close()
			local = c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			_ = c.SetDeadline(time.Now().Add(probeTimeout))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return fmt.Errorf("read the server's answer: %w", err)
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				return fmt.Errorf("server answered %q", line)
			}
			peer, served = f[0], f[1]
			return nil
		}
		return last
	})
	return local, peer, served, err
}

// routeSource returns the source address `ip route get dst` chooses in A.
func (l *srcLab) routeSource(t *testing.T, dst netip.Addr) string {
	t.Helper()
	f := strings.Fields(ipCmd(t, "-n", l.ns["a"], "route", "get", dst.String()))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "src" {
			return f[i+1]
		}
	}
	t.Fatalf("ip route get %s: no src in %q", dst, strings.Join(f, " "))
	return ""
}

// checkSources fails unless A's routes and its real outgoing connections
// to a peer on the segment, a host over an on-link route and a host via a
// gateway all leave from A's node address, for both families.
func (l *srcLab) checkSources(t *testing.T) {
	t.Helper()
	for _, d := range []struct {
		what string
		dst  netip.Addr
		srv  string
	}{
		{"a peer on the segment", srcPeer4, "b"}, {"a peer on the segment", srcPeer6, "b"},
		{"a host over an on-link route", srcOnLink4, "b"}, {"a host over an on-link route", srcOnLink6, "b"},
		{"a host via a gateway", srcRemote4, "c"}, {"a host via a gateway", srcRemote6, "c"},
	} {
		node := l.node4
		if d.dst.Is6() {
			node = l.node6
		}
		if got := l.routeSource(t, d.dst); got != node.String() {
			t.Errorf("ip route get %s (%s): src %s, want the node address %s", d.dst, d.what, got, node)
		}
		local, peer, _, err := l.dial("a", d.dst)
		if err != nil {
			t.Errorf("connect from A to %s (%s): %v", d.dst, d.what, err)
			continue
		}
		if local != node || peer != node.String() {
			t.Errorf("connection from A to %s (%s): local address %s, the server saw %s; want the node address %s", d.dst, d.what, local, peer, node)
		}
	}
}

// checkIncoming fails unless B (on the segment) and C (behind R) reach
// every VIP, served by A from the VIP.
func (l *srcLab) checkIncoming(t *testing.T) {
	t.Helper()
	for _, from := range []string{"b", "c"} {
		for _, vip := range l.vips {
			_, peer, served, err := l.dial(from, vip)
			if err != nil {
				t.Errorf("connect from %s to VIP %s: %v", strings.ToUpper(from), vip, err)
				continue
			}
			if served != vip.String() {
				t.Errorf("connection from %s to VIP %s served from %s (peer %s)", strings.ToUpper(from), vip, served, peer)
			}
		}
	}
}

func TestNetnsVIPNeverSource(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	for _, mode := range []struct {
		name string
		bgp  bool
	}{{"l2 on eth0", false}, {"bgp on lo", true}} {
		t.Run(mode.name, func(t *testing.T) {
			l := newSrcLab(t, mode.bgp)
			t.Logf("A's addresses:\n%s", ipCmd(t, "-n", l.ns["a"], "addr", "show"))
			t.Run("after Announce", l.checkSources)
			l.readdNode(t)
			t.Run("after the node addresses were removed and added back", func(t *testing.T) {
				t.Logf("A's addresses:\n%s", ipCmd(t, "-n", l.ns["a"], "-o", "addr", "show", "dev", l.vipIface))
				l.checkSources(t)
			})
			t.Run("connections to the VIPs", l.checkIncoming)
			t.Run("Verify accepts the VIPs as Announce added them", func(t *testing.T) {
				for _, vip := range l.vips {
					if ok, err := l.a.Verify(context.Background(), vip); err != nil || !ok {
						t.Errorf("Verify(%s) = %v, %v; want true", vip, ok, err)
					}
				}
			})
		})
	}
}

// TestNetnsVIPAttributes reads the VIPs back from the kernel: IPv4 scope
// host; IPv6 deprecated (preferred lifetime 0) with a valid lifetime of
// forever, so it never expires. Something adding the VIP back as a plain
// address (scope global, preferred) makes Verify false, and Announce sets
// vipd's attributes again. The owner still answers ARP for an IPv4 VIP
// inside the node's prefix with arp_ignore 0, 1 and 2.
func TestNetnsVIPAttributes(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newSrcLab(t, false)
	ctx := context.Background()
	attrs := func(vip netip.Addr) (netlink.Addr, bool) {
		t.Helper()
		h, err := netlink.NewHandleAt(l.h["a"])
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		link, err := h.LinkByName(l.ifA)
		if err != nil {
			t.Fatal(err)
		}
		as, err := h.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if ones, bits := a.Mask.Size(); a.IP.Equal(vip.AsSlice()) && ones == bits {
				return a, true
			}
		}
		return netlink.Addr{}, false
	}
	vip4, vip6 := l.vips[0], l.vips[1]
	if a, ok := attrs(vip4); !ok || a.Scope != unix.RT_SCOPE_HOST {
		t.Errorf("IPv4 VIP %s: %+v (present %v), want scope host", vip4, a, ok)
	}
	a, ok := attrs(vip6)
	if !ok || a.Flags&unix.IFA_F_DEPRECATED == 0 || a.Flags&unix.IFA_F_PERMANENT == 0 || a.Flags&unix.IFA_F_NODAD == 0 ||
		a.PreferedLft != 0 || uint32(a.ValidLft) != 0xFFFFFFFF {
		t.Errorf("IPv6 VIP %s: flags %#x preferred %d valid %d (present %v), want nodad, deprecated, permanent, preferred 0, valid forever",
			vip6, a.Flags, a.PreferedLft, a.ValidLft, ok)
	}

	// Re-added as plain addresses: `ip addr replace` cannot change an IPv4
	// address's scope, so remove and add it, as a network manager would.
	ipCmd(t, "-n", l.ns["a"], "addr", "del", vip4.String()+"/32", "dev", l.ifA)
	ipCmd(t, "-n", l.ns["a"], "addr", "add", vip4.String()+"/32", "dev", l.ifA)
	ipCmd(t, "-n", l.ns["a"], "addr", "replace", vip6.String()+"/128", "dev", l.ifA, "nodad", "preferred_lft", "forever")
	for _, vip := range []netip.Addr{vip4, vip6} {
		if ok, err := l.a.Verify(ctx, vip); err != nil || ok {
			t.Errorf("Verify(%s) re-added as a plain address = %v, %v; want false", vip, ok, err)
		}
		if err := netnstest.InHandle(l.h["a"], func() error { return l.a.Announce(ctx, vip) }); err != nil {
			t.Fatalf("Announce(%s) to repair: %v", vip, err)
		}
		if ok, err := l.a.Verify(ctx, vip); err != nil || !ok {
			t.Errorf("Verify(%s) after Announce = %v, %v; want true", vip, ok, err)
		}
	}
	if a, ok := attrs(vip4); !ok || a.Scope != unix.RT_SCOPE_HOST {
		t.Errorf("IPv4 VIP after the repair: %+v (present %v), want scope host", a, ok)
	}
	if a, ok := attrs(vip6); !ok || a.Flags&unix.IFA_F_DEPRECATED == 0 {
		t.Errorf("IPv6 VIP after the repair: flags %#x (present %v), want deprecated", a.Flags, ok)
	}

	for _, ai := range []string{"0", "1", "2"} {
		ipCmd(t, "netns", "exec", l.ns["a"], "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore="+ai)
		ipCmd(t, "-n", l.ns["b"], "neigh", "flush", "dev", "eth0")
		if _, _, served, err := l.dial("b", vip4); err != nil || served != vip4.String() {
			t.Errorf("arp_ignore=%s: B to VIP %s: served from %q, %v", ai, vip4, served, err)
		}
	}
}

// TestNetnsCheckHost runs CheckHost on a namespace's real settings: none
// to warn about at the kernel's defaults; then arp_ignore 3 on the VIP's
// interface, IPv6 disabled on it, and a VIP outside its prefixes, each
// named.
func TestNetnsCheckHost(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	check := func(vip netip.Addr) []HostWarning {
		t.Helper()
		var ws []HostWarning
		if err := netnstest.InHandle(l.hA, func() (err error) { ws, err = CheckHost(l.ifA, vip); return err }); err != nil {
			t.Fatalf("CheckHost(%s, %s): %v", l.ifA, vip, err)
		}
		return ws
	}
	for _, vip := range []netip.Addr{labVIP4, labVIP6} {
		if ws := check(vip); len(ws) != 0 {
			t.Errorf("CheckHost(%s) at the defaults: %v", vip, ws)
		}
	}
	ipCmd(t, "netns", "exec", l.nsA, "sysctl", "-qw", "net.ipv4.conf."+l.ifA+".arp_ignore=3", "net.ipv6.conf."+l.ifA+".disable_ipv6=1")
	if ws := check(labVIP4); len(ws) != 1 || ws[0].Sysctl != "net.ipv4.conf."+l.ifA+".arp_ignore" || ws[0].Value != "1" {
		t.Errorf("CheckHost(%s) with arp_ignore 3: %v, want one warning naming net.ipv4.conf.%s.arp_ignore", labVIP4, ws, l.ifA)
	}
	if ws := check(labVIP6); len(ws) != 2 || ws[1].Sysctl != "net.ipv6.conf."+l.ifA+".disable_ipv6" {
		// Disabling IPv6 removed 2001:db8::1/64 too: the VIP is also
		// outside every prefix now.
		t.Errorf("CheckHost(%s) with IPv6 disabled: %v, want the outside warning and one naming net.ipv6.conf.%s.disable_ipv6", labVIP6, ws, l.ifA)
	}
	if ws := check(netip.MustParseAddr("203.0.113.10")); len(ws) != 2 || !strings.Contains(ws[0].Problem, "outside every prefix") {
		t.Errorf("CheckHost(203.0.113.10): %v, want the outside warning first", ws)
	}
	// An interface name with a dot (a VLAN's, bond0.100; a veth here, as
	// this kernel may lack 802.1Q): the warning names the setting as
	// sysctl takes it, and the command it gives works.
	ipCmd(t, "-n", l.nsA, "link", "add", "vt.100", "type", "veth", "peer", "name", "vt100p")
	ipCmd(t, "-n", l.nsA, "addr", "add", "198.51.100.1/24", "dev", "vt.100")
	ipCmd(t, "netns", "exec", l.nsA, "sysctl", "-qw", "net/ipv4/conf/vt.100/arp_ignore=8")
	var ws []HostWarning
	if err := netnstest.InHandle(l.hA, func() (err error) { ws, err = CheckHost("vt.100", netip.MustParseAddr("198.51.100.10")); return err }); err != nil {
		t.Fatalf("CheckHost(vt.100): %v", err)
	}
	if len(ws) != 1 || ws[0].Sysctl != "net/ipv4/conf/vt.100/arp_ignore" || !strings.Contains(ws[0].String(), "sysctl -w net/ipv4/conf/vt.100/arp_ignore=1") {
		t.Fatalf("CheckHost(vt.100) with arp_ignore 8: %v, want one warning naming net/ipv4/conf/vt.100/arp_ignore", ws)
	}
	ipCmd(t, "netns", "exec", l.nsA, "sysctl", "-w", ws[0].Sysctl+"="+ws[0].Value)
	if err := netnstest.InHandle(l.hA, func() (err error) { ws, err = CheckHost("vt.100", netip.MustParseAddr("198.51.100.10")); return err }); err != nil || len(ws) != 0 {
		t.Errorf("CheckHost(vt.100) after the fix it gave: %v, %v; want nothing", ws, err)
	}
	if _, err := CheckHost("vt-l2-absent", labVIP4); !errors.Is(err, errNoLink) {
		t.Errorf("CheckHost on a missing interface: %v, want errNoLink", err)
	}
}
