//go:build linux

package l2

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/arp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vipd/vipd/internal/netnstest"
)

// Daisy-chaining with the real kernel: the old holder O, its successor S and
// a client C on one segment (a bridge in a fourth namespace). O and S each
// run a TCP echo server on :6443 that tags its answers with its name.
//
//	segment 192.0.2.0/24: O .11, S .12, C .100; the VIP 192.0.2.10

var (
	chainVIP = netip.MustParseAddr("192.0.2.10")
	chainO   = netip.MustParseAddr("192.0.2.11")
	chainS   = netip.MustParseAddr("192.0.2.12")
	chainC   = netip.MustParseAddr("192.0.2.100")
	// chainT is a third holder, when a test asks for one.
	chainT = netip.MustParseAddr("192.0.2.13")
)

const chainPort = 6443

type chainLab struct {
	ns  map[string]string // o, s, c, sw -> namespace name
	h   map[string]netns.NsHandle
	ifc map[string]string // o, s, c -> interface name in that namespace
	mac map[string]net.HardwareAddr
	an  map[string]*Announcer // o, s
}

// newChainLab builds O, S and C on their segment; with third set, a third
// holder T too.
func newChainLab(t *testing.T, third ...bool) *chainLab {
	t.Helper()
	hosts := map[string]netip.Addr{"o": chainO, "s": chainS, "c": chainC}
	servers := []string{"o", "s"}
	if len(third) > 0 && third[0] {
		hosts["t"] = chainT
		servers = append(servers, "t")
	}
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, labSeq.Add(1))
	l := &chainLab{ns: map[string]string{}, h: map[string]netns.NsHandle{}, ifc: map[string]string{},
		mac: map[string]net.HardwareAddr{}, an: map[string]*Announcer{}}
	for _, n := range append([]string{"sw", "c"}, servers...) {
		l.ns[n] = "vt-dc-" + id + "-" + n
		netnstest.NewNS(t, l.ns[n])
		l.h[n] = netnstest.Handle(t, l.ns[n])
	}
	sw := l.ns["sw"]
	netnstest.Bridge(t, sw, "br0")
	for n, a := range hosts {
		// Unique per run (Go caches interface names to indexes).
		l.ifc[n] = "dc" + id + n
		if len(l.ifc[n]) > 15 {
			l.ifc[n] = l.ifc[n][len(l.ifc[n])-15:]
		}
		port := "p" + n
		ipCmd(t, "-n", sw, "link", "add", port, "type", "veth", "peer", "name", l.ifc[n], "netns", l.ns[n])
		ipCmd(t, "-n", sw, "link", "set", port, "master", "br0", "up")
		ipCmd(t, "-n", l.ns[n], "addr", "add", a.String()+"/24", "dev", l.ifc[n])
		ipCmd(t, "-n", l.ns[n], "link", "set", l.ifc[n], "up")
	}
	for n := range hosts {
		l.mac[n] = waitLinkUp(t, l.h[n], l.ifc[n])
	}
	for _, n := range servers {
		l.serve(t, n)
		cfg := Config{Interface: l.ifc[n], Logger: slog.New(slog.NewTextHandler(t.Output(), nil)).With("host", n)}
		var a *Announcer
		if err := netnstest.InHandle(l.h[n], func() (err error) {
			a, err = New(cfg)
			return err
		}); err != nil {
			t.Fatalf("New in %s: %v", n, err)
		}
		t.Cleanup(func() {
			if err := a.Close(); err != nil {
				t.Errorf("Close %s: %v", n, err)
			}
		})
		l.an[n] = a
	}
	return l
}

// in runs fn with host n's Announcer on a thread in n's namespace: Announce
// opens its advertisement sockets in the calling thread's namespace.
func (l *chainLab) in(n string, fn func(a *Announcer) error) error {
	return netnstest.InHandle(l.h[n], func() error { return fn(l.an[n]) })
}

// serve runs a TCP echo server on :6443 in namespace n until the test ends:
// it answers each read with "<n>:" and what it read.
func (l *chainLab) serve(t *testing.T, n string) {
	t.Helper()
	var ln net.Listener
	if err := netnstest.InHandle(l.h[n], func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", chainPort))
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", n, err)
	}
	conns := make(chan net.Conn, 16)
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-conns:
				c.Close()
			default:
				return
			}
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case conns <- c:
			default:
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 100)
				for {
					k, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := fmt.Fprintf(c, "%s:%s", n, buf[:k]); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// dial connects from C to the VIP (bounded: 5 tries of 1 s).
func (l *chainLab) dial(t *testing.T) net.Conn { t.Helper(); return l.dialFrom(t, "c") }

// dialFrom connects from host n to the VIP (bounded: 5 tries of 1 s).
func (l *chainLab) dialFrom(t *testing.T, n string) net.Conn {
	t.Helper()
	var c net.Conn
	err := netnstest.InHandle(l.h[n], func() error {
		var last error
		for range 5 {
			var err error
			if c, err = net.DialTimeout("tcp4", netip.AddrPortFrom(chainVIP, chainPort).String(), time.Second); err == nil {
				return nil
			}
			last = err
		}
		return last
	})
	if err != nil {
		t.Fatalf("connect from %s to %s: %v", n, chainVIP, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange sends msg on c and returns the answer (2 s at most).
func exchange(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	buf := make([]byte, 100)
	k, err := c.Read(buf)
	return string(buf[:k]), err
}

// mustServe checks that an exchange on c is answered by host n.
func mustServe(t *testing.T, c net.Conn, msg, n string) {
	t.Helper()
	got, err := exchange(c, msg)
	if err != nil {
		t.Fatalf("exchange %q: %v", msg, err)
	}
	if want := n + ":" + msg; got != want {
		t.Fatalf("exchange %q answered %q, want %q", msg, got, want)
	}
}

// neighMAC returns C's neighbor entry for the VIP (nil if none or not
// resolved).
func (l *chainLab) neighMAC(t *testing.T) net.HardwareAddr {
	t.Helper()
	h, err := netlink.NewHandleAt(l.h["c"])
	if err != nil {
		t.Fatalf("netlink in C: %v", err)
	}
	defer h.Close()
	ns, err := h.NeighList(0, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("list C's neighbors: %v", err)
	}
	for _, n := range ns {
		if n.IP.Equal(chainVIP.AsSlice()) && n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0 {
			return n.HardwareAddr
		}
	}
	return nil
}

// waitNeigh waits (bounded, 5 s) until C's neighbor entry for the VIP is
// host n's MAC.
func (l *chainLab) waitNeigh(t *testing.T, n string) {
	t.Helper()
	var got net.HardwareAddr
	for range 50 {
		if got = l.neighMAC(t); got.String() == l.mac[n].String() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("C's neighbor entry for %s is %v, want %s's %s", chainVIP, got, n, l.mac[n])
}

// arpRepliers sends an ARP request for the VIP from C and returns the
// hardware addresses that answered within a second.
func (l *chainLab) arpRepliers(t *testing.T) []string {
	t.Helper()
	var got []string
	err := netnstest.InHandle(l.h["c"], func() error {
		ifi, err := net.InterfaceByName(l.ifc["c"])
		if err != nil {
			return err
		}
		ac, err := arp.Dial(ifi)
		if err != nil {
			return fmt.Errorf("arp.Dial: %w", err)
		}
		defer ac.Close()
		if err := ac.Request(chainVIP); err != nil {
			return fmt.Errorf("ARP request: %w", err)
		}
		_ = ac.SetReadDeadline(time.Now().Add(time.Second))
		for {
			p, _, err := ac.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if err != nil {
				return err
			}
			if p.Operation == arp.OperationReply && p.SenderIP == chainVIP && !slices.Contains(got, p.SenderHardwareAddr.String()) {
				got = append(got, p.SenderHardwareAddr.String())
			}
		}
	})
	if err != nil {
		t.Fatalf("ARP from C: %v", err)
	}
	return got
}

// vipdTables returns the names of vipd's nftables tables in namespace n
// (read with the library; `nft list tables` too, when nft is installed).
func (l *chainLab) vipdTables(t *testing.T, n string) []string {
	t.Helper()
	var names []string
	err := netnstest.InHandle(l.h[n], func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		ts, err := c.ListTables()
		if err != nil {
			return err
		}
		for _, x := range ts {
			names = append(names, x.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list nftables tables in %s: %v", n, err)
	}
	if _, err := exec.LookPath("nft"); err == nil {
		out, err := exec.Command("ip", "netns", "exec", l.ns[n], "nft", "list", "tables").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list tables in %s: %v\n%s", n, err, out)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			names = append(names, "nft: "+s)
		}
	}
	return names
}

// handoff quiesces the VIP on O and announces it on S, forwarding first
// when forward is set, and waits for C's neighbor entry to move to S.
func (l *chainLab) handoff(t *testing.T, forward bool) {
	t.Helper()
	ctx := context.Background()
	if err := l.in("o", func(a *Announcer) error { return a.Quiesce(ctx, chainVIP) }); err != nil {
		t.Fatalf("Quiesce on O: %v", err)
	}
	if forward {
		if err := l.in("s", func(a *Announcer) error { return a.Forward(ctx, chainVIP, []uint16{chainPort}, chainO) }); err != nil {
			t.Fatalf("Forward on S: %v", err)
		}
	}
	if err := l.in("s", func(a *Announcer) error { return a.Announce(ctx, chainVIP) }); err != nil {
		t.Fatalf("Announce on S: %v", err)
	}
	l.waitNeigh(t, "s")
}

// start announces the VIP on O and opens C's connection, answered by O.
func (l *chainLab) start(t *testing.T) net.Conn {
	t.Helper()
	if err := l.in("o", func(a *Announcer) error { return a.Announce(context.Background(), chainVIP) }); err != nil {
		t.Fatalf("Announce on O: %v", err)
	}
	old := l.dial(t)
	mustServe(t, old, "hello", "o")
	l.waitNeigh(t, "o")
	return old
}

// TestNetnsDaisyChain: after a planned handoff with Forward on the successor
// and Quiesce on the old holder, the client's existing connection keeps
// being answered by the old holder through the successor, new connections
// and ARP land on the successor only, and once forwarding stops the old
// connection is reset; no nftables table is left.
func TestNetnsDaisyChain(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newChainLab(t)
	ctx := context.Background()
	old := l.start(t)

	l.handoff(t, true)
	// The old connection, spread over more than a second, is still O's,
	// while C sends its packets to S's MAC.
	for i := range 4 {
		mustServe(t, old, fmt.Sprintf("old%d", i), "o")
		if got := l.neighMAC(t); got.String() != l.mac["s"].String() {
			t.Fatalf("exchange %d: C's neighbor entry for the VIP is %v, want S's %s", i, got, l.mac["s"])
		}
		time.Sleep(400 * time.Millisecond)
	}
	// A new connection lands on S.
	mustServe(t, l.dial(t), "new", "s")
	// Only S answers ARP for the VIP; after a flush C resolves it to S.
	if got := l.arpRepliers(t); !slices.Equal(got, []string{l.mac["s"].String()}) {
		t.Fatalf("ARP replies for %s from %v, want only S's %s (O's is %s)", chainVIP, got, l.mac["s"], l.mac["o"])
	}
	ipCmd(t, "-n", l.ns["c"], "neigh", "flush", "to", chainVIP.String())
	mustServe(t, l.dial(t), "new2", "s")
	l.waitNeigh(t, "s")
	mustServe(t, old, "old-after-flush", "o")
	for n, want := range map[string]string{"o": QuiesceTable, "s": ForwardTable} {
		if got := l.vipdTables(t, n); !slices.Contains(got, want) {
			t.Fatalf("tables in %s: %v, want %s", n, got, want)
		}
	}

	// The end of the handoff: S stops forwarding, O releases the VIP. The
	// old connection is reset by S at its next send.
	if err := l.in("s", func(a *Announcer) error { return a.StopForward(ctx, chainVIP) }); err != nil {
		t.Fatalf("StopForward on S: %v", err)
	}
	if err := l.in("o", func(a *Announcer) error { return a.Withdraw(ctx, chainVIP) }); err != nil {
		t.Fatalf("Withdraw on O: %v", err)
	}
	if got, err := exchange(old, "last"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("old connection after StopForward answered %q, err %v; want a reset", got, err)
	}
	for _, n := range []string{"o", "s"} {
		if got := l.vipdTables(t, n); len(got) != 0 {
			t.Fatalf("tables left in %s: %v", n, got)
		}
	}
}

// TestNetnsHandoffWithoutForward is the control: the same handoff without
// Forward resets the old connection at its next send, so
// TestNetnsDaisyChain can fail.
func TestNetnsHandoffWithoutForward(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newChainLab(t)
	old := l.start(t)
	l.handoff(t, false)
	if got, err := exchange(old, "old0"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("old connection after the handoff answered %q, err %v; want a reset", got, err)
	}
	mustServe(t, l.dial(t), "new", "s")
}

// TestNetnsQuiesceCalledOff: Announce on the quiesced holder ends the
// quiesce (ARP answered again, table removed), and Close removes the rules
// of Forward and Quiesce.
func TestNetnsQuiesceCalledOff(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newChainLab(t)
	ctx := context.Background()
	old := l.start(t)
	if err := l.in("o", func(a *Announcer) error { return a.Quiesce(ctx, chainVIP) }); err != nil {
		t.Fatalf("Quiesce on O: %v", err)
	}
	if got := l.arpRepliers(t); len(got) != 0 {
		t.Fatalf("quiesced: ARP replies for %s from %v, want none", chainVIP, got)
	}
	if err := l.in("o", func(a *Announcer) error { return a.Announce(ctx, chainVIP) }); err != nil {
		t.Fatalf("Announce on O: %v", err)
	}
	if got := l.arpRepliers(t); !slices.Equal(got, []string{l.mac["o"].String()}) {
		t.Fatalf("after Announce: ARP replies from %v, want O's %s", got, l.mac["o"])
	}
	if got := l.vipdTables(t, "o"); len(got) != 0 {
		t.Fatalf("tables left in O after Announce: %v", got)
	}
	mustServe(t, old, "still", "o")

	// Close removes what Forward and Quiesce installed.
	if err := l.in("o", func(a *Announcer) error { return a.Quiesce(ctx, chainVIP) }); err != nil {
		t.Fatalf("Quiesce on O: %v", err)
	}
	if err := l.in("s", func(a *Announcer) error { return a.Forward(ctx, chainVIP, []uint16{chainPort, 443}, chainO) }); err != nil {
		t.Fatalf("Forward on S: %v", err)
	}
	for _, n := range []string{"o", "s"} {
		if len(l.vipdTables(t, n)) == 0 {
			t.Fatalf("no table in %s", n)
		}
		if err := l.in(n, func(a *Announcer) error { return a.Close() }); err != nil {
			t.Fatalf("Close %s: %v", n, err)
		}
		if got := l.vipdTables(t, n); len(got) != 0 {
			t.Fatalf("tables left in %s after Close: %v", n, got)
		}
	}
}

// TestNetnsCleanupNftables: CleanupNftables removes vipd's tables in the
// calling thread's namespace, and an Announcer closed afterwards finds
// nothing to remove.
func TestNetnsCleanupNftables(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newLab(t)
	a := newLabAnnouncer(t, l, Config{})
	ctx := context.Background()
	if err := a.Quiesce(ctx, labVIP4); err != nil {
		t.Fatalf("Quiesce: %v", err)
	}
	if err := a.Forward(ctx, labVIP4, []uint16{chainPort}, netip.MustParseAddr("192.0.2.2")); err != nil {
		t.Fatalf("Forward: %v", err)
	}
	tables := func() []string {
		var names []string
		if err := netnstest.InHandle(l.hA, func() error {
			c, err := nftables.New()
			if err != nil {
				return err
			}
			ts, err := c.ListTables()
			for _, x := range ts {
				names = append(names, x.Name)
			}
			return err
		}); err != nil {
			t.Fatalf("list tables: %v", err)
		}
		slices.Sort(names)
		return names
	}
	if got := tables(); !slices.Equal(got, []string{ForwardTable, QuiesceTable}) {
		t.Fatalf("tables %v, want %s and %s", got, ForwardTable, QuiesceTable)
	}
	// Called from the test's own thread, Forward and Quiesce used the
	// Announcer's socket, opened in A: nothing landed in this namespace.
	root, err := nftables.New()
	if err != nil {
		t.Fatalf("nftables here: %v", err)
	}
	ts, err := root.ListTables()
	if err != nil {
		t.Fatalf("list tables here: %v", err)
	}
	for _, x := range ts {
		if x.Name == ForwardTable || x.Name == QuiesceTable {
			t.Fatalf("table %s in the test's namespace", x.Name)
		}
	}
	var removed []string
	cleanup := func() (err error) { removed, err = CleanupNftables(); return err }
	if err := netnstest.InHandle(l.hA, cleanup); err != nil {
		t.Fatalf("CleanupNftables: %v", err)
	}
	if slices.Sort(removed); !slices.Equal(removed, []string{ForwardTable, QuiesceTable}) {
		t.Fatalf("CleanupNftables removed %v, want both tables", removed)
	}
	if got := tables(); len(got) != 0 {
		t.Fatalf("tables left after CleanupNftables: %v", got)
	}
	if err := netnstest.InHandle(l.hA, cleanup); err != nil || len(removed) != 0 {
		t.Fatalf("CleanupNftables with nothing to remove: removed %v, %v", removed, err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close after CleanupNftables: %v", err)
	}
}

// snmpIP returns a counter of the Ip lines of /proc/net/snmp in host n's
// namespace (ForwDatagrams: the packets it routed on).
func (l *chainLab) snmpIP(t *testing.T, n, name string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", l.ns[n], "cat", "/proc/net/snmp").CombinedOutput()
	if err != nil {
		t.Fatalf("read /proc/net/snmp in %s: %v\n%s", n, err, out)
	}
	var names []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Ip:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, k := range names {
			if k == name && i < len(f) {
				var v int
				if _, err := fmt.Sscan(f[i], &v); err != nil {
					t.Fatalf("/proc/net/snmp in %s: Ip %s = %q", n, name, f[i])
				}
				return v
			}
		}
	}
	t.Fatalf("/proc/net/snmp in %s: no Ip %s", n, name)
	return 0
}

// sendStray sends from C a bare ACK to the VIP's port from a port no
// connection uses: a segment of a connection that neither holder has any
// more (one the old holder closed whose reset was lost, a retransmission
// crossing the close), as a raw socket does it.
func (l *chainLab) sendStray(t *testing.T, sport uint16) {
	t.Helper()
	err := netnstest.InHandle(l.h["c"], func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
		if err != nil {
			return fmt.Errorf("raw socket: %w", err)
		}
		defer unix.Close(fd)
		seg := make([]byte, 20)
		binary.BigEndian.PutUint16(seg[0:], sport)
		binary.BigEndian.PutUint16(seg[2:], chainPort)
		binary.BigEndian.PutUint32(seg[4:], 0x12345678) // sequence
		binary.BigEndian.PutUint32(seg[8:], 0x9abcdef0) // acknowledgement
		seg[12] = 5 << 4                                // header length 20
		seg[13] = 0x10                                  // ACK
		binary.BigEndian.PutUint16(seg[14:], 64240)     // window
		// Checksum over the pseudo-header and the segment (conntrack
		// checks it: a bad one makes the segment invalid, not new).
		src, dst := chainC.As4(), chainVIP.As4()
		pseudo := slices.Concat(src[:], dst[:], []byte{0, unix.IPPROTO_TCP, 0, byte(len(seg))}, seg)
		var sum uint32
		for i := 0; i < len(pseudo); i += 2 {
			sum += uint32(pseudo[i])<<8 | uint32(pseudo[i+1])
		}
		for sum > 0xffff {
			sum = sum>>16 + sum&0xffff
		}
		binary.BigEndian.PutUint16(seg[16:], ^uint16(sum))
		return unix.Sendto(fd, seg, 0, &unix.SockaddrInet4{Addr: dst})
	})
	if err != nil {
		t.Fatalf("send a stray segment from C: %v", err)
	}
}

// TestNetnsDaisyChainReleaseNoLoop: production's order, on hosts that
// route (net.ipv4.ip_forward=1, as on every Kubernetes node): the old
// holder O releases the VIP while the successor S still forwards (the
// agent stops forwarding forwardGrace after the release). A segment of a
// connection neither has (S: conntrack new, no SYN) is passed to O, which
// no longer has the VIP and must not route it back to the VIP, that is to
// S, which would pass it to O again, until its TTL runs out. While O held
// the VIP the same segment reached O and stopped there (O answers it with
// a reset).
func TestNetnsDaisyChainReleaseNoLoop(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newChainLab(t)
	for _, n := range []string{"o", "s"} {
		ipCmd(t, "netns", "exec", l.ns[n], "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	}
	ctx := context.Background()
	old := l.start(t)
	l.handoff(t, true)
	mustServe(t, old, "through-s", "o")
	// O holds the VIP: a stray segment, forwarded to O, stops there. (A
	// loop takes microseconds: 300 ms after a send the counter has all.)
	before := l.snmpIP(t, "o", "ForwDatagrams")
	l.sendStray(t, 41000)
	time.Sleep(300 * time.Millisecond)
	if n := l.snmpIP(t, "o", "ForwDatagrams") - before; n != 0 {
		t.Fatalf("O, holding the VIP, routed %d packets on", n)
	}

	if err := l.in("o", func(a *Announcer) error { return a.Withdraw(ctx, chainVIP) }); err != nil {
		t.Fatalf("Withdraw on O: %v", err)
	}
	before = l.snmpIP(t, "o", "ForwDatagrams")
	l.sendStray(t, 41001)
	time.Sleep(300 * time.Millisecond)
	if looped := l.snmpIP(t, "o", "ForwDatagrams") - before; looped != 0 {
		t.Fatalf("O routed %d packets on after one stray segment, sent after it released the VIP while S forwarded: the segment loops between O and S", looped)
	}
	if err := l.in("s", func(a *Announcer) error { return a.StopForward(ctx, chainVIP) }); err != nil {
		t.Fatalf("StopForward on S: %v", err)
	}
	if got, err := exchange(old, "last"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("old connection after StopForward answered %q, err %v; want a reset", got, err)
	}
}

// hasVIP reports whether host n has the VIP on its interface, and whether
// it has Linger's local route for it.
func (l *chainLab) hasVIP(t *testing.T, n string) (addr, route bool) {
	t.Helper()
	h, err := netlink.NewHandleAt(l.h[n])
	if err != nil {
		t.Fatalf("netlink in %s: %v", n, err)
	}
	defer h.Close()
	as, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("addresses in %s: %v", n, err)
	}
	for _, a := range as {
		if a.IP.Equal(chainVIP.AsSlice()) {
			addr = true
		}
	}
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_LOCAL, Protocol: LingerProtocol},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatalf("routes in %s: %v", n, err)
	}
	for _, r := range rs {
		if r.Dst != nil && r.Dst.IP.Equal(chainVIP.AsSlice()) {
			route = true
		}
	}
	return addr, route
}

// TestNetnsLingerChain: two planned handoffs in a row, O to S to T, each
// with the old holder lingering (Linger) instead of closing: the client's
// connection to O and its connection to S both keep being answered by the
// host that accepted them, through T, which copies each segment it does
// not know to both (neither lingering host resets the other's
// connection); neither lingering host has the address or answers ARP; new
// connections land on T. StopLinger and StopForward leave no route and no
// table; CleanupLingerRoutes removes a route a vipd that ended while
// lingering left.
func TestNetnsLingerChain(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newChainLab(t, true)
	ctx := context.Background()
	toO := l.start(t)

	// O to S: S forwards to O, announces; O lingers.
	l.lingerHandoff(t, "o", "s", []uint16{chainPort}, chainO)
	if addr, route := l.hasVIP(t, "o"); addr || !route {
		t.Fatalf("lingering O: address %v, local route %v; want no address, the route", addr, route)
	}
	mustServe(t, toO, "o-after-move", "o")
	toS := l.dial(t)
	mustServe(t, toS, "hello-s", "s")

	// S to T: T forwards to both, announces; S lingers.
	if err := l.in("t", func(a *Announcer) error {
		return a.Forward(ctx, chainVIP, []uint16{chainPort}, chainS, chainO)
	}); err != nil {
		t.Fatalf("Forward on T: %v", err)
	}
	if err := l.in("t", func(a *Announcer) error { return a.Announce(ctx, chainVIP) }); err != nil {
		t.Fatalf("Announce on T: %v", err)
	}
	if err := l.in("s", func(a *Announcer) error { return a.StopForward(ctx, chainVIP) }); err != nil {
		t.Fatalf("StopForward on S: %v", err)
	}
	if err := l.in("s", func(a *Announcer) error { return a.Linger(ctx, chainVIP) }); err != nil {
		t.Fatalf("Linger on S: %v", err)
	}
	l.waitNeigh(t, "t")
	// Both old connections, over more than a second, each still its own
	// host's, while every segment goes to T first and both lingering hosts
	// get a copy of each.
	for i := range 4 {
		mustServe(t, toO, fmt.Sprintf("o%d", i), "o")
		mustServe(t, toS, fmt.Sprintf("s%d", i), "s")
		time.Sleep(300 * time.Millisecond)
	}
	// A lingering host that must resolve its client again does not move
	// the client's entry for the VIP to itself: its ARP request carries
	// its own address, not the VIP.
	ipCmd(t, "-n", l.ns["o"], "neigh", "del", chainC.String(), "dev", l.ifc["o"])
	mustServe(t, toO, "o-resolves-again", "o")
	time.Sleep(200 * time.Millisecond)
	if got := l.neighMAC(t); got.String() != l.mac["t"].String() {
		t.Fatalf("after lingering O resolved C again, C's entry for the VIP is %v, want T's %s (O's is %s)", got, l.mac["t"], l.mac["o"])
	}
	mustServe(t, l.dial(t), "new", "t")
	// A lingering host's own new connection to the VIP (its kubelet's)
	// is served: the local route delivers it to the host itself, whose
	// apiserver is healthy (an unhealthy one ends the lingering), and the
	// drop of segments no socket takes is for the copies from the
	// network only.
	mustServe(t, l.dialFrom(t, "s"), "s-own", "s")
	if got := l.arpRepliers(t); !slices.Equal(got, []string{l.mac["t"].String()}) {
		t.Fatalf("ARP replies for %s from %v, want only T's %s", chainVIP, got, l.mac["t"])
	}
	for _, n := range []string{"o", "s"} {
		if addr, _ := l.hasVIP(t, n); addr {
			t.Fatalf("lingering %s has the VIP's address", n)
		}
	}

	// O's connection ends; O stops lingering and T forwards to S only:
	// S's connection still works.
	toO.Close()
	if err := l.in("o", func(a *Announcer) error { return a.StopLinger(ctx, chainVIP) }); err != nil {
		t.Fatalf("StopLinger on O: %v", err)
	}
	if err := l.in("t", func(a *Announcer) error { return a.Forward(ctx, chainVIP, []uint16{chainPort}, chainS) }); err != nil {
		t.Fatalf("Forward on T: %v", err)
	}
	if addr, route := l.hasVIP(t, "o"); addr || route {
		t.Fatalf("O after StopLinger: address %v, local route %v", addr, route)
	}
	if got := l.vipdTables(t, "o"); len(got) != 0 {
		t.Fatalf("tables left in O: %v", got)
	}
	mustServe(t, toS, "s-last", "s")

	// A vipd that ended while lingering leaves its route behind (Close
	// removes it; a kill does not): CleanupLingerRoutes finds it.
	var removed []string
	if err := netnstest.InHandle(l.h["s"], func() (err error) {
		ifi, err := net.InterfaceByName(l.ifc["s"])
		if err != nil {
			return err
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		if err := h.RouteAdd(lingerRoute(ifi.Index, netip.MustParseAddr("192.0.2.77"))); err != nil {
			return err
		}
		removed, err = CleanupLingerRoutes()
		return err
	}); err != nil {
		t.Fatalf("CleanupLingerRoutes in S: %v", err)
	}
	if !slices.Equal(removed, []string{"192.0.2.10/32", "192.0.2.77/32"}) {
		t.Fatalf("CleanupLingerRoutes removed %v, want the VIP's and the stray one", removed)
	}
	if _, route := l.hasVIP(t, "s"); route {
		t.Fatal("S's route is still there after CleanupLingerRoutes")
	}
	if err := l.in("s", func(a *Announcer) error { return a.StopLinger(ctx, chainVIP) }); err != nil {
		t.Fatalf("StopLinger on S: %v", err)
	}
	if err := l.in("t", func(a *Announcer) error { return a.StopForward(ctx, chainVIP) }); err != nil {
		t.Fatalf("StopForward on T: %v", err)
	}
	for _, n := range []string{"o", "s", "t"} {
		if got := l.vipdTables(t, n); len(got) != 0 {
			t.Fatalf("tables left in %s: %v", n, got)
		}
	}
}

// TestNetnsReclaimKeepsOwnConnections: a host's own connection to the VIP
// (its kubelet's, its Node watch) goes through loopback, never through the
// successor: when the host hands the VIP off, lingers, and takes it back
// (elected again), the forwarding it installs for the other lingering host
// must leave it alone. Accepted before any rule needed conntrack, the
// connection is untracked, so its next segment looks new to the
// forwarding rule, which would copy it away and drop it: a deaf
// connection, found only by the client's own pings tens of seconds later.
func TestNetnsReclaimKeepsOwnConnections(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	l := newChainLab(t, true)
	ctx := context.Background()
	toO := l.start(t)
	own := l.dialFrom(t, "o")
	mustServe(t, own, "own-held", "o")
	// A connection of O to itself through the VIP on which the server
	// speaks first (a watch's events), on another port.
	var ln net.Listener
	if err := netnstest.InHandle(l.h["o"], func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(chainVIP, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listen in O: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	var watch net.Conn
	if err := netnstest.InHandle(l.h["o"], func() (err error) {
		watch, err = net.DialTimeout("tcp4", ln.Addr().String(), time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect in O: %v", err)
	}
	t.Cleanup(func() { watch.Close() })
	server, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept in O: %v", err)
	}
	t.Cleanup(func() { server.Close() })
	push := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(server, msg); err != nil {
			t.Fatalf("push %q: %v", msg, err)
		}
		_ = watch.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(watch, buf); err != nil || string(buf) != msg {
			t.Fatalf("push %q: read %q, %v", msg, buf, err)
		}
	}
	push("event-held")

	// O to S: O lingers, its own connection still its own.
	l.lingerHandoff(t, "o", "s", []uint16{chainPort}, chainO)
	mustServe(t, own, "own-lingering", "o")
	push("event-lingering")
	mustServe(t, toO, "client-lingering", "o")

	// S back to O: O forwards to S, announces; S lingers. Every port
	// ([connections] ports left empty, as kubeadm's lab has it): the
	// rule then matches both directions of a connection to itself.
	l.lingerHandoff(t, "s", "o", nil, chainS)
	push("event-reclaimed")
	mustServe(t, own, "own-reclaimed", "o")
	mustServe(t, toO, "client-reclaimed", "o")
	mustServe(t, l.dialFrom(t, "o"), "own-new", "o")

	if err := l.in("s", func(a *Announcer) error { return a.StopLinger(ctx, chainVIP) }); err != nil {
		t.Fatalf("StopLinger on S: %v", err)
	}
	if err := l.in("o", func(a *Announcer) error { return a.StopForward(ctx, chainVIP) }); err != nil {
		t.Fatalf("StopForward on O: %v", err)
	}
}

// lingerHandoff hands the VIP from host from to host to as the agent does
// a planned L2 handoff: to forwards the segments it does not know on ports
// (every port if none) to targets and announces; from lingers; the client
// has moved to to's MAC when it returns.
func (l *chainLab) lingerHandoff(t *testing.T, from, to string, ports []uint16, targets ...netip.Addr) {
	t.Helper()
	ctx := context.Background()
	if err := l.in(to, func(a *Announcer) error { return a.Forward(ctx, chainVIP, ports, targets...) }); err != nil {
		t.Fatalf("Forward on %s: %v", to, err)
	}
	if err := l.in(to, func(a *Announcer) error { return a.Announce(ctx, chainVIP) }); err != nil {
		t.Fatalf("Announce on %s: %v", to, err)
	}
	if err := l.in(from, func(a *Announcer) error { return a.Linger(ctx, chainVIP) }); err != nil {
		t.Fatalf("Linger on %s: %v", from, err)
	}
	l.waitNeigh(t, to)
}
