//go:build linux

package conns

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vipd/vipd/internal/netnstest"
)

// A process may hold 20,000 files here (and may not raise it), fewer than
// the 42,020 sockets BenchmarkList needs: the clients live in helper
// processes (this test binary again, running TestHelperHoldConns), and the
// server's ends are never accepted. A connection waiting in a listener's
// accept queue is established and listed like any other.

// helperEnv tells the test binary to hold connections: "ADDR:PORT N".
const helperEnv = "VIPD_CONNS_HOLD"

// TestHelperHoldConns is not a test: run by holdConns, it opens N
// connections from 192.0.2.1 to ADDR:PORT, says "ready", and keeps them
// until its standard input closes.
func TestHelperHoldConns(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process for BenchmarkList")
	}
	var to string
	var n int
	if _, err := fmt.Sscan(spec, &to, &n); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)}, KeepAlive: -1}
	cs := make([]net.Conn, 0, n)
	for range n {
		c, err := d.Dial("tcp", to)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range cs {
		c.Close()
	}
}

// holdConns opens n connections from 192.0.2.1 to to in ns, held by
// helper processes of at most 8,000 each until cleanup.
func holdConns(b *testing.B, ns string, to netip.AddrPort, n int) {
	b.Helper()
	for n > 0 {
		k := min(n, 8000)
		n -= k
		cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestHelperHoldConns$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", helperEnv, to, k))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, read := make(chan string, 1), make(chan struct{})
		go func() {
			defer close(read)
			s, _ := bufio.NewReader(stdout).ReadString('\n')
			line <- s
			_, _ = io.Copy(io.Discard, stdout)
		}()
		// Closing stdin ends the helper, its output ends, then Wait.
		b.Cleanup(func() { stdin.Close(); <-read; _ = cmd.Wait() })
		select {
		case s := <-line:
			if s != "ready\n" {
				b.Fatalf("helper holding %d connections to %s: %q", k, to, s)
			}
		case <-time.After(60 * time.Second):
			b.Fatalf("helper holding %d connections to %s: not ready after 60 s", k, to)
		}
	}
}

// listenQueue listens on to in ns with an accept queue for n connections
// and never accepts, until cleanup.
func listenQueue(b *testing.B, ns string, to netip.AddrPort, n int) {
	b.Helper()
	var fd int
	netnstest.MustIn(b, ns, func() (err error) {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err = unix.Bind(fd, &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}); err != nil {
			return err
		}
		return unix.Listen(fd, n)
	})
	b.Cleanup(func() { unix.Close(fd) })
}

// benchServer accepts connections to vip:6443 in ns until cleanup.
type benchServer struct {
	ns       string
	vip      netip.Addr
	accepted chan net.Conn
}

func serve(b *testing.B, ns string, vip netip.Addr) *benchServer {
	b.Helper()
	var l net.Listener
	netnstest.MustIn(b, ns, func() (err error) {
		l, err = net.Listen("tcp", netip.AddrPortFrom(vip, 6443).String())
		return err
	})
	s := &benchServer{ns: ns, vip: vip, accepted: make(chan net.Conn, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted <- c
		}
	}()
	b.Cleanup(func() { l.Close(); <-done })
	return s
}

// connect opens n connections from 192.0.2.1 to the server (both ends in
// this process) and returns both ends of each.
func (s *benchServer) connect(b *testing.B, n int) []net.Conn {
	b.Helper()
	out := make([]net.Conn, 0, 2*n)
	netnstest.MustIn(b, s.ns, func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)}, KeepAlive: -1}
		for range n {
			c, err := d.Dial("tcp", netip.AddrPortFrom(s.vip, 6443).String())
			if err != nil {
				return err
			}
			out = append(out, c, <-s.accepted)
		}
		return nil
	})
	return out
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// BenchmarkList lists one VIP's connections on a host that has three VIPs
// with 10, 1,000 and 20,000 client connections (42,020 TCP sockets in all):
// what a holder does every second to publish its connections. The
// "library" case is what netlink.SocketDiagTCP (vishvananda/netlink, the
// version in go.mod) costs for the same answer: every TCP socket of the
// host, in every state, with its tcp_info, filtered in Go.
func BenchmarkList(b *testing.B) {
	netnstest.SkipUnlessEnabled(b)
	ns := netnstest.NewNS(b, netnstest.Name("cn", "bench"))
	if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", "net.core.somaxconn=65535").CombinedOutput(); err != nil {
		b.Fatalf("somaxconn: %v %s", err, out)
	}
	counts := map[string]int{"192.0.2.10": 10, "192.0.2.11": 1000, "192.0.2.12": 20000}
	netnstest.MustRun(b, "ip", "-n", ns, "addr", "add", "192.0.2.1/32", "dev", "lo")
	for vip, n := range counts {
		netnstest.MustRun(b, "ip", "-n", ns, "addr", "add", vip+"/32", "dev", "lo")
		to := netip.AddrPortFrom(netip.MustParseAddr(vip), 6443)
		listenQueue(b, ns, to, n)
		holdConns(b, ns, to, n)
	}
	tab := openTableIn(b, ns)
	for _, vip := range []string{"192.0.2.10", "192.0.2.11", "192.0.2.12"} {
		n := counts[vip]
		f := Filter{Addrs: []netip.Addr{netip.MustParseAddr(vip)}, Ports: []uint16{6443}}
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := tab.List(f)
				if err != nil {
					b.Fatal(err)
				}
				if s.Len() != n {
					b.Fatalf("listed %d connections, want %d", s.Len(), n)
				}
			}
		})
	}
	b.Run("conns=20000/library", func(b *testing.B) {
		vip := netip.MustParseAddr("192.0.2.12")
		var h *netlink.Handle
		netnstest.MustIn(b, ns, func() (err error) { h, err = netlink.NewHandle(unix.NETLINK_SOCK_DIAG); return err })
		defer h.Close()
		b.ReportAllocs()
		for b.Loop() {
			socks, err := h.SocketDiagTCP(unix.AF_INET)
			if err != nil {
				b.Fatal(err)
			}
			var cs []Conn
			for _, s := range socks {
				local, _ := netip.AddrFromSlice(s.ID.Source.To4())
				remote, _ := netip.AddrFromSlice(s.ID.Destination.To4())
				if s.State == tcpEstablished && local == vip && s.ID.SourcePort == 6443 {
					cs = append(cs, Conn{Local: netip.AddrPortFrom(local, s.ID.SourcePort), Remote: netip.AddrPortFrom(remote, s.ID.DestinationPort)})
				}
			}
			if set := NewSet(cs...); set.Len() != 20000 {
				b.Fatalf("listed %d connections", set.Len())
			}
		}
	})
}

// BenchmarkDestroy closes 1,000 connections per operation (a planned
// release); setting them up is not counted.
func BenchmarkDestroy(b *testing.B) {
	netnstest.SkipUnlessEnabled(b)
	ns := netnstest.NewNS(b, netnstest.Name("cn", "bench"))
	vip := netip.MustParseAddr("192.0.2.10")
	netnstest.MustRun(b, "ip", "-n", ns, "addr", "add", "192.0.2.1/32", "dev", "lo")
	netnstest.MustRun(b, "ip", "-n", ns, "addr", "add", "192.0.2.10/32", "dev", "lo")
	tab := openTableIn(b, ns)
	srv := serve(b, ns, vip)
	const n = 1000
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		cs := srv.connect(b, n)
		b.StartTimer()
		got, err := tab.Destroy(Filter{Addrs: []netip.Addr{vip}, Ports: []uint16{6443}})
		if err != nil || got != n {
			b.Fatalf("Destroy = %d, %v; want %d", got, err, n)
		}
		b.StopTimer()
		closeAll(cs)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/conn")
}

// BenchmarkPoke sends 20,000 pokes per operation, unpaced, to clients
// behind a gateway whose neighbour entry is permanent and names a MAC
// nobody has (the other end of the veth drops the frames): the sender's own
// cost, the kernel's output path included.
func BenchmarkPoke(b *testing.B) {
	netnstest.SkipUnlessEnabled(b)
	ns, sink := netnstest.NewNS(b, netnstest.Name("cn", "bench")), netnstest.NewNS(b, netnstest.Name("cn", "sink"))
	netnstest.MustRun(b, "ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1", "netns", sink)
	netnstest.MustRun(b, "ip", "-n", ns, "addr", "add", "192.0.2.1/24", "dev", "p0")
	netnstest.MustRun(b, "ip", "-n", ns, "addr", "add", "192.0.2.10/32", "dev", "p0")
	netnstest.MustRun(b, "ip", "-n", ns, "link", "set", "p0", "up")
	netnstest.MustRun(b, "ip", "-n", sink, "link", "set", "p1", "up")
	netnstest.MustRun(b, "ip", "-n", ns, "neigh", "add", "192.0.2.254", "lladdr", "02:00:00:00:27:fe", "dev", "p0", "nud", "permanent")
	netnstest.MustRun(b, "ip", "-n", ns, "route", "add", "198.51.100.0/24", "via", "192.0.2.254")
	p, err := NewPoker(PokeConfig{Rate: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	const n = 20000
	cs := make([]Conn, n)
	for i := range cs {
		cs[i] = Conn{
			Local:  netip.MustParseAddrPort("192.0.2.10:6443"),
			Remote: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i%250)}), uint16(32768+i)),
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		netnstest.MustIn(b, ns, func() error {
			res, err := p.Poke(context.Background(), cs)
			if err == nil && res.Sent != n {
				err = fmt.Errorf("poke: %+v", res)
			}
			return err
		})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/poke")
}
