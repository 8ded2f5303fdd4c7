package membership

import (
	"bytes"
	"encoding/base64"
	"io"
	"log"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/vipd/vipd/internal/testkit"
)

// TestTransportHeartbeats: heartbeats go between two transports on
// loopback, sealed with the cluster key; a transport without the key, or
// with another, cannot read them; a sender outside the admitted networks is
// dropped before anything reads its packets.
func TestTransportHeartbeats(t *testing.T) {
	key := func(s string) *memberlist.Keyring {
		k, _ := base64.StdEncoding.DecodeString(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(s), 32)[:32]))
		kr, err := memberlist.NewKeyring(nil, k)
		if err != nil {
			t.Fatal(err)
		}
		return kr
	}
	var any atomic.Pointer[[]netip.Prefix]
	var dropped atomic.Int32
	start := func(kr *memberlist.Keyring, allowed *atomic.Pointer[[]netip.Prefix]) (*transport, chan []byte) {
		tr, err := newTransport(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(testkit.FreePort(t))), log.New(io.Discard, "", 0), allowed, func() { dropped.Add(1) }, kr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Shutdown() })
		got := make(chan []byte, 4)
		f := func(p []byte, _ netip.AddrPort) { got <- append([]byte(nil), p...) }
		tr.heartbeat.Store(&f)
		return tr, got
	}
	recv := func(ch chan []byte) []byte {
		select {
		case p := <-ch:
			return p
		case <-time.After(500 * time.Millisecond):
			return nil
		}
	}
	k1 := key("a")
	a, _ := start(k1, &any)
	b, gotB := start(k1, &any)
	if err := a.sendHeartbeat([]byte("hello"), b.bind); err != nil {
		t.Fatal(err)
	}
	if p := recv(gotB); string(p) != "hello" {
		t.Fatalf("b got %q, want hello", p)
	}
	c, gotC := start(key("b"), &any) // another key
	d, gotD := start(nil, &any)      // no key
	a.sendHeartbeat([]byte("secret"), c.bind)
	a.sendHeartbeat([]byte("secret"), d.bind)
	if p := recv(gotC); p != nil {
		t.Errorf("a transport with another key read %q", p)
	}
	if p := recv(gotD); p != nil {
		t.Errorf("a transport without the key read %q", p)
	}
	d.sendHeartbeat([]byte("forged"), b.bind) // in the clear to a keyed node
	if p := recv(gotB); p != nil {
		t.Errorf("a keyed transport accepted a heartbeat in the clear: %q", p)
	}

	var onlyOthers atomic.Pointer[[]netip.Prefix]
	nets := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	onlyOthers.Store(&nets)
	e, gotE := start(nil, &onlyOthers)
	before := dropped.Load()
	d.sendHeartbeat([]byte("from loopback"), e.bind)
	if p := recv(gotE); p != nil {
		t.Errorf("a packet from outside the admitted networks was read: %q", p)
	}
	if dropped.Load() == before {
		t.Errorf("the dropped packet was not counted")
	}
}

// testKeyring returns a keyring whose key is s repeated.
func testKeyring(t *testing.T, s string) *memberlist.Keyring {
	t.Helper()
	kr, err := memberlist.NewKeyring(nil, bytes.Repeat([]byte(s), 32)[:32])
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// TestTransportListStream: a list goes on a stream of its own, sealed
// under the cluster key, and arrives with the sender's bind address; a
// transport with another key cannot read it; memberlist's own streams
// still reach memberlist whole.
func TestTransportListStream(t *testing.T) {
	var any atomic.Pointer[[]netip.Prefix]
	kr := testKeyring(t, "a")
	start := func(addr string, kr0 *memberlist.Keyring) (*transport, chan netip.AddrPort) {
		tr, err := newTransport(netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(testkit.FreePort(t))), log.New(io.Discard, "", 0), &any, func() {}, kr0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Shutdown() })
		got := make(chan netip.AddrPort, 4)
		f := func(p []byte, from netip.AddrPort) {
			if string(p) == "list" {
				got <- from
			}
		}
		tr.list.Store(&f)
		return tr, got
	}
	a, _ := start("127.0.0.2", kr)
	b, gotB := start("127.0.0.1", kr)
	if err := a.sendList([]byte("list"), b.bind); err != nil {
		t.Fatal(err)
	}
	select {
	case from := <-gotB:
		if from.Addr() != a.bind.Addr() {
			t.Fatalf("the list came from %s, want a's bind address %s", from, a.bind.Addr())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no list in 5 s")
	}
	other, gotO := start("127.0.0.1", testKeyring(t, "b"))
	if err := a.sendList([]byte("list"), other.bind); err != nil {
		t.Fatal(err)
	}
	select {
	case from := <-gotO:
		t.Fatalf("a transport with another key read a list from %s", from)
	case <-time.After(500 * time.Millisecond):
	}
	// memberlist's streams: the bytes the transport peeked are read again.
	conn, err := a.DialTimeout(b.bind.String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{8, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-b.StreamCh():
		defer s.Close()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "\x08\x01\x02\x03" {
			t.Fatalf("memberlist's stream read %x, %v; want 08010203", buf, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("memberlist's stream did not arrive in 5 s")
	}
}
