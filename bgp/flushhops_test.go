package bgp

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFlushPeerFromLocalAddress: the flush session of a peer with a local
// address starts from it, as the speaker's sessions do: a router that
// peers with this host's loopback knows no other source.
func TestFlushPeerFromLocalAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	from := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			from <- err.Error()
			return
		}
		from <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		c.Close()
	}()
	cfg := flushConfig()
	cfg.Peers[0].LocalAddress = netip.MustParseAddr("127.0.0.2")
	_ = flushPeer(context.Background(), cfg, cfg.Peers[0], netip.MustParseAddrPort(ln.Addr().String()))
	if got := <-from; got != "127.0.0.2" {
		t.Errorf("router saw the flush session from %s, want the local address 127.0.0.2", got)
	}
}

// TestPeerDialerTTL: the flush session sends with the TTL the speaker's
// session would (1 for a directly connected eBGP router, the multihop TTL,
// 255 with TTL security) and, with TTL security, drops what arrives below
// 256 - hops (IP_MINTTL).
func TestPeerDialerTTL(t *testing.T) {
	// The listener answers with TTL 255, as a GTSM router does: the
	// dialer's minimum TTL would drop its SYN-ACK otherwise.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error { return setTTL(c, true, 255, 0) }}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	sockopt := func(c net.Conn, opt int) int {
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var serr error
		if err := rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, opt) }); err != nil {
			t.Fatal(err)
		}
		if serr != nil {
			t.Fatal(serr)
		}
		return v
	}
	cfg := flushConfig() // AS 4200000001
	for _, tt := range []struct {
		name          string
		peer          Peer
		ttl, minTTL   int
		kernelDefault bool
	}{
		{name: "ebgp, directly connected", peer: Peer{ASN: 65000}, ttl: 1},
		{name: "ebgp multihop 3", peer: Peer{ASN: 65000, EBGPMultihop: 3}, ttl: 3},
		{name: "gtsm two hops", peer: Peer{ASN: 65000, TTLSecurityHops: 2}, ttl: 255, minTTL: 254},
		{name: "ibgp", peer: Peer{ASN: cfg.ASN}, kernelDefault: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.peer.Address = netip.MustParseAddr("127.0.0.1")
			d := peerDialer(cfg, tt.peer)
			d.Timeout = 5 * time.Second
			c, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ttl, minTTL := sockopt(c, unix.IP_TTL), sockopt(c, unix.IP_MINTTL)
			if !tt.kernelDefault && ttl != tt.ttl {
				t.Errorf("IP_TTL %d, want %d", ttl, tt.ttl)
			}
			if tt.kernelDefault && (ttl == 1 || ttl == 255) {
				t.Errorf("IP_TTL %d, want the kernel's default", ttl)
			}
			if minTTL != tt.minTTL {
				t.Errorf("IP_MINTTL %d, want %d", minTTL, tt.minTTL)
			}
		})
	}
}
