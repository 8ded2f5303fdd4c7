package conns

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func conn(local, remote string) Conn {
	return Conn{Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote)}
}

func TestNewSetSortsUnmapsAndDropsInvalid(t *testing.T) {
	s := NewSet(
		conn("[2001:db8::10]:6443", "[2001:db8::7]:40000"),
		conn("192.0.2.10:6443", "198.51.100.9:40001"),
		conn("[::ffff:192.0.2.10]:6443", "[::ffff:198.51.100.7]:40000"), // a dual-stack socket's IPv4 client
		conn("192.0.2.10:6443", "198.51.100.9:40001"),                   // twice
		conn("192.0.2.10:6443", "[2001:db8::7]:40000"),                  // families differ
		conn("192.0.2.10:0", "198.51.100.9:40001"),                      // port 0
		conn("[fe80::1%eth0]:6443", "[fe80::2%eth0]:40000"),             // zones
		Conn{},
	)
	want := []Conn{
		conn("192.0.2.10:6443", "198.51.100.7:40000"),
		conn("192.0.2.10:6443", "198.51.100.9:40001"),
		conn("[2001:db8::10]:6443", "[2001:db8::7]:40000"),
	}
	if got := s.Conns(); !slices.Equal(got, want) {
		t.Fatalf("NewSet = %v, want %v", got, want)
	}
	if !s.Contains(conn("[::ffff:192.0.2.10]:6443", "[::ffff:198.51.100.7]:40000")) {
		t.Error("Contains does not unmap")
	}
	if s.Contains(conn("192.0.2.10:6443", "198.51.100.7:40001")) {
		t.Error("Contains reports a connection not in the set")
	}
}

func TestDiffApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		a, b := randomSet(rng, rng.IntN(60)), randomSet(rng, rng.IntN(60))
		if round%3 == 0 {
			// Mostly the same connections: the usual second to second change.
			b = a.Apply(Delta{Removed: randomSubset(rng, a), Added: randomSet(rng, 3)})
		}
		d := Diff(a, b)
		if got := a.Apply(d); !got.Equal(b) {
			t.Fatalf("round %d: a.Apply(Diff(a, b)) = %v, want %v", round, got.Conns(), b.Conns())
		}
		for c := range d.Removed.All() {
			if !a.Contains(c) || b.Contains(c) {
				t.Fatalf("round %d: removed %v: in a %v, in b %v", round, c, a.Contains(c), b.Contains(c))
			}
		}
		for c := range d.Added.All() {
			if a.Contains(c) || !b.Contains(c) {
				t.Fatalf("round %d: added %v: in a %v, in b %v", round, c, a.Contains(c), b.Contains(c))
			}
		}
		if d.Empty() != a.Equal(b) {
			t.Fatalf("round %d: Empty %v, Equal %v", round, d.Empty(), a.Equal(b))
		}
	}
}

func TestFilter(t *testing.T) {
	s := NewSet(conn("192.0.2.10:6443", "198.51.100.7:1"), conn("192.0.2.11:6443", "198.51.100.7:1"))
	got := s.Filter(func(c Conn) bool { return c.Local.Addr() == netip.MustParseAddr("192.0.2.11") })
	if want := []Conn{conn("192.0.2.11:6443", "198.51.100.7:1")}; !slices.Equal(got.Conns(), want) {
		t.Fatalf("Filter = %v, want %v", got.Conns(), want)
	}
}

// randomSet returns a set of up to n connections to two VIPs of each family
// on two ports, from clients in a few subnets (so the encoding's prefix
// sharing and the multi-port runs are exercised).
func randomSet(rng *rand.Rand, n int) Set {
	vips := []netip.Addr{
		netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20"),
		netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8:1::20"),
	}
	cs := make([]Conn, 0, n)
	for range n {
		vip := vips[rng.IntN(len(vips))]
		port := []uint16{6443, 443}[rng.IntN(2)]
		var client netip.Addr
		if vip.Is4() {
			client = netip.AddrFrom4([4]byte{198, 51, byte(100 + rng.IntN(2)), byte(rng.IntN(6) * 40)})
		} else {
			b := netip.MustParseAddr("2001:db8:2::").As16()
			b[7] = byte(rng.IntN(3))
			b[15] = byte(rng.IntN(4))
			b[10] = byte(rng.IntN(2) * 200)
			client = netip.AddrFrom16(b)
		}
		cs = append(cs, Conn{Local: netip.AddrPortFrom(vip, port), Remote: netip.AddrPortFrom(client, uint16(1+rng.IntN(65535)))})
	}
	return NewSet(cs...)
}

func randomSubset(rng *rand.Rand, s Set) Set {
	return s.Filter(func(Conn) bool { return rng.IntN(10) == 0 })
}

// TestSortKeys: the packed IPv4 sort orders as cmpKey does, with one local
// end or several, and with more local ends than it packs.
func TestSortKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, locals := range []int{1, 3, 256, 300} {
		ks := make([]key, 0, 2000)
		for range 2000 {
			l := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(rng.IntN(locals) % 256)}), uint16(6443+rng.IntN(locals)/256))
			r := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, byte(rng.IntN(256)), byte(rng.IntN(256))}), uint16(1+rng.IntN(65535)))
			ks = append(ks, toKey(Conn{Local: l, Remote: r}))
		}
		want := slices.Clone(ks)
		slices.SortFunc(want, cmpKey)
		sortKeys(ks)
		if !slices.Equal(ks, want) {
			t.Fatalf("%d local ends: sortKeys differs from sorting by cmpKey", locals)
		}
	}
}
