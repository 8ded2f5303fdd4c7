//go:build linux

package conns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
)

// These tests run the real kernel paths in network namespaces they create
// (addresses from 192.0.2.0/24 and 2001:db8::/64, no default routes);
// nothing is created in the caller's namespace but the namespace names.

// resetWithin bounds how long a client may take to see its reset (poke or
// destroy); the experiment measured about 0.1 s.
const resetWithin = 2 * time.Second

// ifSeq makes interface names unique per test, so Go's interface-name
// cache cannot map a name to an index from an earlier namespace.
var ifSeq atomic.Int32

// openTableIn opens a Table in namespace ns and closes it when the test
// ends.
func openTableIn(t testing.TB, ns string) *Table {
	t.Helper()
	var tab *Table
	netnstest.MustIn(t, ns, func() (err error) { tab, err = Open(); return err })
	t.Cleanup(func() { tab.Close() })
	return tab
}

// listen listens on addr in ns and accepts connections until cleanup,
// echoing what each sends. accepted receives every accepted connection.
func listen(t testing.TB, ns, addr string) <-chan net.Conn {
	t.Helper()
	var l net.Listener
	netnstest.MustIn(t, ns, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	accepted := make(chan net.Conn, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			accepted <- c
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	return accepted
}

// dial connects from ns to addr (no keepalive: an idle client, as the
// tests want), closed at cleanup.
func dial(t testing.TB, ns, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	netnstest.MustIn(t, ns, func() (err error) {
		d := net.Dialer{Timeout: 2 * time.Second, KeepAlive: -1}
		c, err = d.Dial("tcp", addr)
		return err
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func localConn(t testing.TB, c net.Conn) Conn {
	t.Helper()
	// The server's view: local is what the client dialled, remote the client.
	return NewSet(Conn{
		Local:  c.RemoteAddr().(*net.TCPAddr).AddrPort(),
		Remote: c.LocalAddr().(*net.TCPAddr).AddrPort(),
	}).Conns()[0]
}

// waitReset reads from c until deadline and returns how long after from
// the read failed with a reset, or an error saying what happened instead.
func waitReset(c net.Conn, from, deadline time.Time) (time.Duration, error) {
	if err := c.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	_, err := c.Read(make([]byte, 1))
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return time.Since(from), nil
	case err == nil:
		return 0, errors.New("read data instead of a reset")
	default:
		return 0, fmt.Errorf("no reset: %w", err)
	}
}

// echoes checks that c still works: what it sends comes back.
func echoes(c net.Conn) error {
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != "ping" {
		return fmt.Errorf("echo %q", b)
	}
	return nil
}

// failoverLab is the poke experiment's topology: a bridge in a switch
// namespace, the VIP's old holder s1 (192.0.2.11, 2001:db8::11), the new
// holder s2 (.12, ::12) and a client c (.100, ::100).
type failoverLab struct {
	sw, s1, s2, c string
	s1Port        string // s1's port on the bridge
	s2MAC         string
}

func newFailoverLab(t *testing.T) *failoverLab {
	t.Helper()
	l := &failoverLab{sw: netnstest.NewNS(t, netnstest.Name("cn", "sw")), s1: netnstest.NewNS(t, netnstest.Name("cn", "s1")), s2: netnstest.NewNS(t, netnstest.Name("cn", "s2")), c: netnstest.NewNS(t, netnstest.Name("cn", "c")), s2MAC: "02:00:00:27:00:12"}
	netnstest.Bridge(t, l.sw, "br0")
	id := ifSeq.Add(1)
	attach := func(ns, name string, octet int, mac string) string {
		port := fmt.Sprintf("p%d%s", id, name)
		netnstest.MustRun(t, "ip", "-n", l.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		netnstest.MustRun(t, "ip", "-n", l.sw, "link", "set", port, "master", "br0", "up")
		netnstest.MustRun(t, "ip", "-n", ns, "link", "set", "eth0", "address", mac)
		netnstest.MustRun(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("192.0.2.%d/24", octet), "dev", "eth0")
		netnstest.MustRun(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("2001:db8::%d/64", octet), "dev", "eth0", "nodad")
		netnstest.MustRun(t, "ip", "-n", ns, "link", "set", "eth0", "up")
		return port
	}
	l.s1Port = attach(l.s1, "s1", 11, "02:00:00:27:00:11")
	attach(l.s2, "s2", 12, l.s2MAC)
	attach(l.c, "c", 100, "02:00:00:27:01:00")
	return l
}

// addVIP adds vip's host prefix to eth0 in ns as l2 does: IPv4 with scope
// host, IPv6 without DAD and deprecated (so the host never takes it as a
// source address; the VIP's own connections and pokes still leave from it).
func addVIP(t *testing.T, ns string, vip netip.Addr) {
	t.Helper()
	args := []string{"-n", ns, "addr", "add", netip.PrefixFrom(vip, vip.BitLen()).String(), "dev", "eth0"}
	if vip.Is6() {
		args = append(args, "nodad", "preferred_lft", "0")
	} else {
		args = append(args, "scope", "host")
	}
	netnstest.MustRun(t, "ip", args...)
}

// TestNetnsPokeResetsClient is the scenario: a client holds an idle
// connection to VIP:6443 on s1; s1's link goes down; s2 adds the VIP and
// the client's neighbour entry moves to s2 (what its gratuitous ARP or
// neighbour advertisement does; l2's tests cover those); s2 pokes the
// connection s1 had listed. The client's connection must reset within
// resetWithin of the poke. The control (no poke) shows it would not have:
// the connection is still silent after the same time.
func TestNetnsPokeResetsClient(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	for _, tc := range []struct {
		name     string
		vip      string
		poke     bool
		s2Listen bool // s2 runs a server on :6443 (the new holder's apiserver)
	}{
		{"ipv4/poke", "192.0.2.10", true, false},
		{"ipv4/poke, s2 listens on :6443", "192.0.2.10", true, true},
		{"ipv4/no poke", "192.0.2.10", false, true},
		{"ipv6/poke", "2001:db8::10", true, false},
		{"ipv6/poke, s2 listens on :6443", "2001:db8::10", true, true},
		{"ipv6/no poke", "2001:db8::10", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFailoverLab(t)
			vip := netip.MustParseAddr(tc.vip)
			addVIP(t, l.s1, vip)
			accepted := listen(t, l.s1, netip.AddrPortFrom(vip, 6443).String())
			client := dial(t, l.c, netip.AddrPortFrom(vip, 6443).String())
			select {
			case <-accepted:
			case <-time.After(2 * time.Second):
				t.Fatal("s1 accepted nothing")
			}

			// s1 publishes its connections.
			published, err := openTableIn(t, l.s1).List(Filter{Addrs: []netip.Addr{vip}, Ports: []uint16{6443}})
			if err != nil {
				t.Fatal(err)
			}
			if want := localConn(t, client); published.Len() != 1 || !published.Contains(want) {
				t.Fatalf("s1 lists %v, want only %v", published.Conns(), want)
			}

			// s1 is lost; s2 takes the VIP over.
			netnstest.MustRun(t, "ip", "-n", l.sw, "link", "set", l.s1Port, "down")
			if tc.s2Listen {
				listen(t, l.s2, ":6443")
			}
			addVIP(t, l.s2, vip)
			netnstest.MustRun(t, "ip", "-n", l.c, "neigh", "replace", vip.String(), "lladdr", l.s2MAC, "dev", "eth0", "nud", "reachable")

			start := time.Now()
			if tc.poke {
				p, err := NewPoker(PokeConfig{})
				if err != nil {
					t.Fatal(err)
				}
				var own Set
				var res PokeResult
				netnstest.MustIn(t, l.s2, func() error {
					tab, err := Open()
					if err != nil {
						return err
					}
					defer tab.Close()
					if own, err = tab.List(Filter{Addrs: []netip.Addr{vip}}); err != nil {
						return err
					}
					cs := Pokable(published, own, []Takeover{{VIP: vip, Held: true}})
					res, err = p.Poke(context.Background(), cs)
					return err
				})
				if res.Sent != 1 {
					t.Fatalf("poke: %+v, want one sent", res)
				}
			}
			took, err := waitReset(client, start, start.Add(resetWithin))
			switch {
			case tc.poke && err != nil:
				t.Fatalf("client after the poke: %v", err)
			case tc.poke:
				t.Logf("client reset %v after the poke", took.Round(time.Millisecond))
			case err == nil:
				t.Fatalf("client reset %v after the takeover without a poke: the control shows nothing", took)
			case !errors.Is(err, os.ErrDeadlineExceeded):
				t.Fatalf("client without a poke: %v, want still waiting", err)
			}
		})
	}
}

// hostAndClient creates a host namespace h and a client namespace c joined
// by a veth pair: hIf in h, eth0 in c (no addresses yet).
func hostAndClient(t *testing.T) (h, c, hIf string) {
	t.Helper()
	h, c = netnstest.NewNS(t, netnstest.Name("cn", "h")), netnstest.NewNS(t, netnstest.Name("cn", "c"))
	hIf = fmt.Sprintf("h%d", ifSeq.Add(1))
	netnstest.MustRun(t, "ip", "-n", h, "link", "add", hIf, "type", "veth", "peer", "name", "eth0", "netns", c)
	return h, c, hIf
}

// TestNetnsDestroy: Destroy closes the host's connections to the VIP on the
// given port (IPv4 on a dual-stack listener, IPv6) and nothing else: not a
// connection to the node's own address on the same port, not one to the
// VIP on another port, not the host's own connection to its VIP. The
// clients of the closed ones see a reset at once.
func TestNetnsDestroy(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	h, c, hIf := hostAndClient(t)
	for _, a := range [][]string{
		{h, "192.0.2.1/24", hIf}, {h, "192.0.2.10/32", hIf}, {h, "2001:db8::1/64", hIf}, {h, "2001:db8::10/128", hIf},
		{c, "192.0.2.2/24", "eth0"}, {c, "2001:db8::2/64", "eth0"},
	} {
		args := []string{"-n", a[0], "addr", "add", a[1], "dev", a[2]}
		if strings.Contains(a[1], ":") {
			args = append(args, "nodad")
		}
		netnstest.MustRun(t, "ip", args...)
	}
	netnstest.MustRun(t, "ip", "-n", h, "link", "set", hIf, "up")
	netnstest.MustRun(t, "ip", "-n", c, "link", "set", "eth0", "up")

	listen(t, h, ":6443")           // dual-stack: IPv4 clients on an IPv6 socket
	listen(t, h, "192.0.2.10:8080") // IPv4 only, another port
	vip4 := dial(t, c, "192.0.2.10:6443")
	node4 := dial(t, c, "192.0.2.1:6443")
	vip6 := dial(t, c, "[2001:db8::10]:6443")
	node6 := dial(t, c, "[2001:db8::1]:6443")
	other := dial(t, c, "192.0.2.10:8080")
	self := dial(t, h, "192.0.2.10:6443") // the host's own client of its VIP
	for _, k := range []net.Conn{vip4, node4, vip6, node6, other, self} {
		if err := echoes(k); err != nil {
			t.Fatalf("connection %s->%s before: %v", k.LocalAddr(), k.RemoteAddr(), err)
		}
	}

	vips := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	tab := openTableIn(t, h)
	list := func(f Filter) Set {
		t.Helper()
		s, err := tab.List(f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		return s
	}
	if got, want := list(Filter{Addrs: vips, Ports: []uint16{6443}}), NewSet(localConn(t, vip4), localConn(t, vip6)); !got.Equal(want) {
		t.Fatalf("List on port 6443 = %v, want %v", got.Conns(), want.Conns())
	}
	if got, want := list(Filter{Addrs: vips}), NewSet(localConn(t, vip4), localConn(t, vip6), localConn(t, other)); !got.Equal(want) {
		t.Fatalf("List on every port = %v, want %v", got.Conns(), want.Conns())
	}
	if got, want := list(Filter{Addrs: vips[:1]}), NewSet(localConn(t, vip4), localConn(t, other)); !got.Equal(want) {
		t.Fatalf("List of the IPv4 VIP = %v, want %v", got.Conns(), want.Conns())
	}

	start := time.Now()
	n, err := tab.Destroy(Filter{Addrs: vips, Ports: []uint16{6443}})
	if err != nil || n != 2 {
		t.Fatalf("Destroy = %d, %v; want 2 closed", n, err)
	}
	for _, k := range []net.Conn{vip4, vip6} {
		took, err := waitReset(k, start, start.Add(resetWithin))
		if err != nil {
			t.Fatalf("client %s->%s after Destroy: %v", k.LocalAddr(), k.RemoteAddr(), err)
		}
		t.Logf("client of %s reset %v after Destroy", k.RemoteAddr(), took.Round(time.Millisecond))
	}
	for _, k := range []net.Conn{node4, node6, other, self} {
		if err := echoes(k); err != nil {
			t.Errorf("connection %s->%s after Destroy: %v (it should be untouched)", k.LocalAddr(), k.RemoteAddr(), err)
		}
	}
	if got := list(Filter{Addrs: vips, Ports: []uint16{6443}}); got.Len() != 0 {
		t.Errorf("List after Destroy = %v, want none", got.Conns())
	}

	// The host's connection to itself through the VIP: both ends go (the
	// first one's reset may close the other before its turn).
	loop := Filter{Addrs: vips, Ports: []uint16{6443}, Side: Loopback}
	if got := list(loop); got.Len() != 2 {
		t.Fatalf("List(Loopback) = %v, want the two ends of the host's own connection", got.Conns())
	}
	if n, err := tab.Destroy(loop); err != nil || n < 1 {
		t.Fatalf("Destroy(Loopback) = %d, %v; want its connection closed", n, err)
	}
	if got := list(loop); got.Len() != 0 {
		t.Errorf("List(Loopback) after Destroy = %v, want none", got.Conns())
	}
	if err := echoes(self); err == nil {
		t.Error("the host's own connection to its VIP still echoes after Destroy(Loopback)")
	}
	// The client's own connection to the VIP, seen from the client: its
	// other connections stay.
	again := dial(t, c, "192.0.2.10:6443")
	ctab := openTableIn(t, c)
	if n, err := ctab.Destroy(Filter{Addrs: vips, Ports: []uint16{6443}, Side: Outbound}); err != nil || n != 1 {
		t.Fatalf("Destroy(Outbound) in the client = %d, %v; want 1", n, err)
	}
	if err := echoes(again); err == nil {
		t.Error("the client's connection to the VIP still echoes after its Destroy(Outbound)")
	}
	for _, k := range []net.Conn{node4, node6, other} {
		if err := echoes(k); err != nil {
			t.Errorf("connection %s->%s after Destroy(Outbound): %v (it should be untouched)", k.LocalAddr(), k.RemoteAddr(), err)
		}
	}
}

// TestNetnsDestroyIdle: DestroyIdle closes an idle connection at once,
// waits for a connection whose request is being answered until the answer
// has gone out (its client reads the whole answer, then the reset), and
// closes one whose request is never answered at Until, counted as busy. Destroy would cut the request being answered.
func TestNetnsDestroyIdle(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	h, c, hIf := hostAndClient(t)
	netnstest.MustRun(t, "ip", "-n", h, "addr", "add", "192.0.2.1/24", "dev", hIf)
	netnstest.MustRun(t, "ip", "-n", h, "addr", "add", "192.0.2.10/32", "dev", hIf)
	netnstest.MustRun(t, "ip", "-n", c, "addr", "add", "192.0.2.2/24", "dev", "eth0")
	netnstest.MustRun(t, "ip", "-n", h, "link", "set", hIf, "up")
	netnstest.MustRun(t, "ip", "-n", c, "link", "set", "eth0", "up")

	// A server that answers "quick" at once, "slow" after slowAnswer and
	// "stuck" never.
	const slowAnswer = 400 * time.Millisecond
	var l net.Listener
	netnstest.MustIn(t, h, func() (err error) { l, err = net.Listen("tcp", "192.0.2.10:6443"); return err })
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			k, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer k.Close()
				r := bufio.NewReader(k)
				for {
					_ = k.SetReadDeadline(time.Now().Add(10 * time.Second))
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					switch strings.TrimSpace(line) {
					case "slow":
						time.Sleep(slowAnswer)
					case "stuck":
						continue // never answered
					}
					if _, err := k.Write([]byte("answer to " + line)); err != nil {
						return
					}
				}
			})
		}
	})
	ask := func(k net.Conn, what string) (string, error) {
		if err := k.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return "", err
		}
		if _, err := k.Write([]byte(what + "\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(k).ReadString('\n')
	}
	idle, slow, stuck := dial(t, c, "192.0.2.10:6443"), dial(t, c, "192.0.2.10:6443"), dial(t, c, "192.0.2.10:6443")
	for _, k := range []net.Conn{idle, slow, stuck} {
		if got, err := ask(k, "quick"); err != nil || got != "answer to quick\n" {
			t.Fatalf("before: %q, %v", got, err)
		}
	}
	// The next requests come a few kernel ticks after those answers (one
	// in the same tick as an answer counts as answered SameTickIdle later).
	time.Sleep(30 * time.Millisecond)
	if _, err := stuck.Write([]byte("stuck\n")); err != nil {
		t.Fatal(err)
	}
	slowAnswered := make(chan error, 1)
	go func() {
		got, err := ask(slow, "slow")
		if err == nil && got != "answer to slow\n" {
			err = fmt.Errorf("answer %q", got)
		}
		slowAnswered <- err
	}()
	time.Sleep(50 * time.Millisecond) // the slow request is in the server's hands

	tab := openTableIn(t, h)
	start := time.Now()
	res, err := destroyIdle(tab, vipFilter, start.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DestroyIdle: %+v in %v", res, time.Since(start).Round(time.Millisecond))
	if res.Idle != 2 || res.Busy != 1 {
		t.Errorf("DestroyIdle = %+v, want 2 idle (the idle one, the slow one once answered) and 1 busy (the stuck one)", res)
	}
	if err := <-slowAnswered; err != nil {
		t.Errorf("the slow request, answered while DestroyIdle ran: %v (its connection was closed before the answer went out)", err)
	}
	for name, k := range map[string]net.Conn{"idle": idle, "stuck": stuck} {
		if _, err := waitReset(k, start, time.Now().Add(resetWithin)); err != nil {
			t.Errorf("%s client after DestroyIdle: %v", name, err)
		}
	}
}
