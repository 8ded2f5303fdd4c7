package agent

import (
	"bytes"
	"io"
	"log"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/vipd/vipd/conns"
)

// testKeyring returns a keyring whose key is s repeated.
func testKeyring(t *testing.T, s string) *memberlist.Keyring {
	t.Helper()
	kr, err := memberlist.NewKeyring(nil, bytes.Repeat([]byte(s), 32)[:32])
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// TestClientsListInAnotherName: a list is taken only from the membership
// address of the member it names; a member sending one in another's name
// (or a sender that is no member) is ignored.
func TestClientsListInAnotherName(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.10")
	c := &clients{self: "c", log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		members: func() []memberInfo {
			return []memberInfo{{Name: "a", Address: "192.0.2.11:7946", State: StateAlive}, {Name: "b", Address: "192.0.2.12:7946", State: StateAlive}}
		},
		wantFull: make(chan string, 1), askFull: make(chan string, 1), mirrors: map[string]*conns.Mirror{}, asked: map[string]time.Time{}}
	set := conns.NewSet(conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.MustParseAddrPort("203.0.113.7:40000")})
	body := conns.NewFeed(1, time.Minute).Next(set, time.Now())
	c.receive(clientsMessage(clientsFeed, "b", body), netip.MustParseAddrPort("192.0.2.11:40000")) // a, in b's name
	if got := c.published("b", vip); got.Len() != 0 {
		t.Fatalf("a list sent by a in b's name was taken as b's: %v", got.Conns())
	}
	c.receive(clientsMessage(clientsFeed, "d", body), netip.MustParseAddrPort("192.0.2.99:40000")) // no member
	if got := c.published("d", vip); got.Len() != 0 {
		t.Fatalf("a list from no member was taken: %v", got.Conns())
	}
	c.receive(clientsMessage(clientsWantFull, "b", nil), netip.MustParseAddrPort("192.0.2.11:40000"))
	if len(c.wantFull) != 0 {
		t.Fatalf("a request for the full set in another's name was taken")
	}
	c.receive(clientsMessage(clientsFeed, "b", body), netip.MustParseAddrPort("192.0.2.12:40001")) // b itself
	if got := c.published("b", vip); !got.Equal(set) {
		t.Fatalf("b's own list: got %v, want %v", got.Conns(), set.Conns())
	}
}

// TestTransportListStream: a list goes on a stream of its own, sealed
// under the cluster key, and arrives with the sender's bind address; a
// transport with another key cannot read it; memberlist's own streams
// still reach memberlist whole.
func TestTransportListStream(t *testing.T) {
	var any atomic.Pointer[[]netip.Prefix]
	kr := testKeyring(t, "a")
	start := func(addr string, kr0 *memberlist.Keyring) (*transport, chan netip.AddrPort) {
		tr, err := newTransport(netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(freePort(t))), log.New(io.Discard, "", 0), &any, func() {}, kr0)
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
