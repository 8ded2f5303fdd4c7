package bgp

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// fakeRouter accepts one session on a loopback port and plays a router's
// side of a flush: it reads the OPEN, answers with its own and a
// KEEPALIVE, reads the KEEPALIVE, sends after (an UPDATE, a NOTIFICATION or
// nothing) and returns every message it read.
func fakeRouter(t *testing.T, after func(net.Conn)) (netip.AddrPort, <-chan []*bgp.BGPMessage) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []*bgp.BGPMessage, 1)
	go func() {
		var msgs []*bgp.BGPMessage
		defer func() { got <- msgs }()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		read := func() *bgp.BGPMessage {
			hdr := make([]byte, bgp.BGP_HEADER_LENGTH)
			if _, err := io.ReadFull(c, hdr); err != nil {
				return nil
			}
			b := make([]byte, binary.BigEndian.Uint16(hdr[16:]))
			copy(b, hdr)
			if _, err := io.ReadFull(c, b[bgp.BGP_HEADER_LENGTH:]); err != nil {
				return nil
			}
			m, err := bgp.ParseBGPMessage(b)
			if err != nil {
				t.Errorf("router: parse: %v", err)
				return nil
			}
			msgs = append(msgs, m)
			return m
		}
		write := func(m *bgp.BGPMessage) {
			b, _ := m.Serialize()
			c.Write(b)
		}
		if m := read(); m == nil || m.Header.Type != bgp.BGP_MSG_OPEN {
			return
		}
		open, err := bgp.NewBGPOpenMessage(65000, 3, netip.MustParseAddr("192.0.2.1"), nil)
		if err != nil {
			return
		}
		write(open)
		write(bgp.NewBGPKeepAliveMessage())
		if m := read(); m == nil || m.Header.Type != bgp.BGP_MSG_KEEPALIVE {
			return
		}
		after(c)
		for read() != nil {
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String()), got
}

func flushConfig() Config {
	c := validConfig()
	c.ASN = 4200000001 // a 4-octet AS: AS_TRANS in the OPEN
	c.Peers[0].HoldTime = 9 * time.Second
	c.GracefulRestart = GracefulRestart{RestartTime: 5 * time.Second}
	return c
}

// TestFlushPeerSession: the OPEN says graceful restart without the restart
// and forwarding bits (so the router drops stale routes), and the session
// ends with a CEASE carrying a shutdown communication once the router sent
// its End-of-RIB.
func TestFlushPeerSession(t *testing.T) {
	addr, got := fakeRouter(t, func(c net.Conn) {
		eor, _ := bgp.NewEndOfRib(bgp.RF_IPv4_UC).Serialize()
		c.Write(eor)
	})
	cfg := flushConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := flushPeer(ctx, cfg, cfg.Peers[0], addr); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= flushWaitUpdate {
		t.Errorf("flush took %v: it should not wait once the End-of-RIB came", d)
	}
	msgs := <-got
	if len(msgs) != 4 {
		t.Fatalf("router read %d messages, want OPEN, KEEPALIVE, End-of-RIB, NOTIFICATION", len(msgs))
	}
	open := msgs[0].Body.(*bgp.BGPOpen)
	if open.MyAS != asTrans || open.HoldTime != 9 || open.ID.String() != "192.0.2.1" {
		t.Errorf("open: as %d hold %d id %s, want %d, 9, 192.0.2.1", open.MyAS, open.HoldTime, open.ID, asTrans)
	}
	var gr *bgp.CapGracefulRestart
	var as4 uint32
	for _, o := range open.OptParams {
		for _, c := range o.(*bgp.OptionParameterCapability).Capability {
			switch c := c.(type) {
			case *bgp.CapGracefulRestart:
				gr = c
			case *bgp.CapFourOctetASNumber:
				as4 = c.CapValue
			}
		}
	}
	if as4 != cfg.ASN {
		t.Errorf("4-octet AS %d, want %d", as4, cfg.ASN)
	}
	if gr == nil || gr.Flags != 0 || gr.Time != 5 || len(gr.Tuples) != 1 || gr.Tuples[0].Flags != 0 ||
		bgp.NewFamily(gr.Tuples[0].AFI, gr.Tuples[0].SAFI) != bgp.RF_IPv4_UC {
		t.Errorf("graceful restart capability %+v, want restart time 5, no restart bit, ipv4 unicast without the forwarding bit", gr)
	}
	if msgs[1].Header.Type != bgp.BGP_MSG_KEEPALIVE {
		t.Errorf("second message type %d, want KEEPALIVE", msgs[1].Header.Type)
	}
	if u, ok := msgs[2].Body.(*bgp.BGPUpdate); !ok {
		t.Errorf("third message %+v, want an End-of-RIB", msgs[2].Body)
	} else if eor, fam := u.IsEndOfRib(); !eor || fam != bgp.RF_IPv4_UC {
		t.Errorf("third message: end-of-rib %t for %v, want the End-of-RIB of ipv4 unicast", eor, fam)
	}
	n, ok := msgs[3].Body.(*bgp.BGPNotification)
	if !ok || n.ErrorCode != bgp.BGP_ERROR_CEASE || n.ErrorSubcode != bgp.BGP_ERROR_SUB_ADMINISTRATIVE_SHUTDOWN ||
		!strings.Contains(string(n.Data), flushCommunication) {
		t.Errorf("last message %+v, want a CEASE (administrative shutdown) saying %q", msgs[3].Body, flushCommunication)
	}
}

// TestFlushPeerNoUpdate: a router that sends no UPDATE still gets the CEASE,
// after flushWaitUpdate.
func TestFlushPeerNoUpdate(t *testing.T) {
	addr, got := fakeRouter(t, func(net.Conn) {})
	cfg := flushConfig()
	if err := flushPeer(context.Background(), cfg, cfg.Peers[0], addr); err != nil {
		t.Fatal(err)
	}
	msgs := <-got
	if len(msgs) != 4 || msgs[3].Header.Type != bgp.BGP_MSG_NOTIFICATION {
		t.Fatalf("router read %d messages, want OPEN, KEEPALIVE, End-of-RIB, NOTIFICATION", len(msgs))
	}
}

// TestFlushPeerRefused: a router's NOTIFICATION (a bad AS, say) is the error.
func TestFlushPeerRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := bgp.NewBGPNotificationMessage(bgp.BGP_ERROR_OPEN_MESSAGE_ERROR, bgp.BGP_ERROR_SUB_BAD_PEER_AS, nil).Serialize()
		c.Write(n)
		io.Copy(io.Discard, c)
	}()
	cfg := flushConfig()
	err = flushPeer(context.Background(), cfg, cfg.Peers[0], netip.MustParseAddrPort(ln.Addr().String()))
	if err == nil || !strings.Contains(err.Error(), "notification: code 2 subcode 2") {
		t.Fatalf("err = %v, want the router's notification", err)
	}
}

// TestFlushStaleWithoutGracefulRestart: routers kept nothing; no session is
// opened (the peer here could not be reached).
func TestFlushStaleWithoutGracefulRestart(t *testing.T) {
	cfg := validConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := FlushStale(ctx, cfg); err != nil {
		t.Fatalf("FlushStale without graceful restart: %v", err)
	}
	cfg.ASN = 0
	if err := FlushStale(ctx, cfg); err == nil {
		t.Fatal("FlushStale with an invalid config: no error")
	}
}
