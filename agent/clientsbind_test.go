package agent

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/vipd/vipd/conns"
)

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
