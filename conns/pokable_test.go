package conns

import (
	"net/netip"
	"slices"
	"testing"
)

func TestPokable(t *testing.T) {
	vip1, vip2 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	a := conn("192.0.2.10:6443", "198.51.100.7:40000")
	b := conn("192.0.2.10:6443", "198.51.100.8:40001")
	c := conn("[2001:db8::10]:6443", "[2001:db8::7]:40000")
	self := conn("192.0.2.10:6443", "192.0.2.10:50000") // the old holder's own connection to the VIP
	published := NewSet(a, b, c, self)
	cases := []struct {
		name      string
		published Set
		own       Set
		takeovers []Takeover
		want      []Conn
	}{
		{
			published: published,
			name:      "old holder lost, this node holds both VIPs",
			takeovers: []Takeover{{VIP: vip1, Held: true}, {VIP: vip2, Held: true}},
			want:      []Conn{a, b, c},
		},
		{
			published: published,
			name:      "old holder still holds one VIP (partitioned, fence not expired)",
			takeovers: []Takeover{{VIP: vip1, Held: true, PreviousHolds: true}, {VIP: vip2, Held: true}},
			want:      []Conn{c},
		},
		{
			published: published,
			name:      "this node does not hold the VIP (yet)",
			takeovers: []Takeover{{VIP: vip1, Held: false}, {VIP: vip2, Held: true}},
			want:      []Conn{c},
		},
		{
			published: published,
			name:      "VIP moved to a third node: no takeover here",
			takeovers: []Takeover{{VIP: vip2, Held: true}},
			want:      []Conn{c},
		},
		{
			published: published,
			name:      "a connection this node has itself is never poked",
			own:       NewSet(b),
			takeovers: []Takeover{{VIP: vip1, Held: true}, {VIP: vip2, Held: true}},
			want:      []Conn{a, c},
		},
		{
			published: published,
			name:      "conflicting entries for one VIP: the cautious one wins",
			takeovers: []Takeover{{VIP: vip1, Held: true}, {VIP: vip1, Held: true, PreviousHolds: true}},
			want:      nil,
		},
		{
			published: published,
			name:      "IPv4-mapped VIP in the takeover",
			takeovers: []Takeover{{VIP: netip.MustParseAddr("::ffff:192.0.2.10"), Held: true}},
			want:      []Conn{a, b},
		},
		{
			name:      "nothing published",
			takeovers: []Takeover{{VIP: vip1, Held: true}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Pokable(tc.published, tc.own, tc.takeovers); !slices.Equal(got, tc.want) {
				t.Fatalf("Pokable = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPokableBounds: what a publisher's list can make a new holder send
// is bounded: pokes go only to unicast client addresses (no loopback,
// multicast, broadcast or unspecified address), and at most
// MaxPokesPerClient to one client address, however many connections the
// list gives it.
func TestPokableBounds(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.10")
	var cs []Conn
	for p := range 1000 {
		cs = append(cs, Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.AddrPortFrom(netip.MustParseAddr("203.0.113.7"), uint16(1024+p))})
	}
	good := conn("192.0.2.10:6443", "198.51.100.8:40001")
	bad := []Conn{
		conn("192.0.2.10:6443", "127.0.0.1:40000"),
		conn("192.0.2.10:6443", "224.0.0.1:40000"),
		conn("192.0.2.10:6443", "255.255.255.255:40000"),
		conn("192.0.2.10:6443", "0.0.0.0:40000"),
		conn("[2001:db8::10]:6443", "[ff02::1]:40000"),
		conn("[2001:db8::10]:6443", "[::1]:40000"),
		conn("[2001:db8::10]:6443", "[::]:40000"),
	}
	published := NewSet(slices.Concat(cs, []Conn{good}, bad)...)
	got := Pokable(published, Set{}, []Takeover{{VIP: vip, Held: true}, {VIP: netip.MustParseAddr("2001:db8::10"), Held: true}})
	per := map[netip.Addr]int{}
	for _, c := range got {
		per[c.Remote.Addr()]++
		if slices.Contains(bad, c) {
			t.Errorf("poked %v: not a unicast client address", c)
		}
	}
	if n := per[netip.MustParseAddr("203.0.113.7")]; n != MaxPokesPerClient {
		t.Errorf("poked %d connections of one client address listed with 1000, want %d", n, MaxPokesPerClient)
	}
	if per[good.Remote.Addr()] != 1 {
		t.Errorf("the other client was not poked: %v", per)
	}
}
