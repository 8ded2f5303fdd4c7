package conns

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// benchSet returns n connections to one VIP's port 6443 from clients with
// two connections each (a kubelet's, say), spread over the RFC 2544
// benchmarking network 198.18.0.0/15 (IPv4) or over /64s of 2001:db8::/32
// with random interface identifiers (IPv6), from random ephemeral ports.
func benchSet(rng *rand.Rand, n int, v6 bool) Set {
	vip := netip.MustParseAddr("192.0.2.10")
	if v6 {
		vip = netip.MustParseAddr("2001:db8::10")
	}
	cs := make([]Conn, 0, n)
	for len(cs) < n {
		var client netip.Addr
		if v6 {
			b := netip.MustParseAddr("2001:db8:100::").As16()
			b[6] = byte(rng.IntN(4)) // four subnets
			for i := 8; i < 16; i++ {
				b[i] = byte(rng.Uint32())
			}
			client = netip.AddrFrom16(b)
		} else {
			x := rng.IntN(1 << 17)
			client = netip.AddrFrom4([4]byte{198, 18 + byte(x>>16), byte(x >> 8), byte(x)})
		}
		for range 2 {
			port := uint16(32768 + rng.IntN(28232))
			cs = append(cs, Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.AddrPortFrom(client, port)})
		}
	}
	return NewSet(cs[:n]...)
}

// churn returns s with a hundredth of its connections (at least one)
// replaced by new ones: a second's change on a busy control plane.
func churn(rng *rand.Rand, s Set, v6 bool) Set {
	k := max(1, s.Len()/100)
	gone := s.Filter(func(Conn) bool { return rng.IntN(s.Len()) < k })
	return s.Apply(Delta{Removed: gone, Added: benchSet(rng, k, v6)})
}

var benchSizes = []int{10, 1000, 20000}

// BenchmarkEncodeSet: a full snapshot, encoded. B/set is the encoding's
// size.
func BenchmarkEncodeSet(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/conns=%d", family(v6), n), func(b *testing.B) {
				s := benchSet(rand.New(rand.NewPCG(1, uint64(n))), n, v6)
				buf := make([]byte, 0, 32*n)
				var size int
				b.ReportAllocs()
				for b.Loop() {
					buf, _ = s.AppendBinary(buf[:0])
					size = len(buf)
				}
				b.ReportMetric(float64(size), "B/set")
				b.ReportMetric(float64(size)/float64(n), "B/conn")
			})
		}
	}
}

// BenchmarkDecodeSet: a full snapshot, decoded (what each peer does).
func BenchmarkDecodeSet(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("ipv4/conns=%d", n), func(b *testing.B) {
			enc, _ := benchSet(rand.New(rand.NewPCG(1, uint64(n))), n, false).MarshalBinary()
			b.ReportAllocs()
			for b.Loop() {
				var s Set
				if err := s.UnmarshalBinary(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDelta: one second's publishing on the holder after a 1% change:
// the delta from the last list (Diff) and its encoding. B/delta is its
// size.
func BenchmarkDelta(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("ipv4/conns=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(2, uint64(n)))
			before := benchSet(rng, n, false)
			after := churn(rng, before, false)
			var size int
			b.ReportAllocs()
			for b.Loop() {
				enc, _ := Diff(before, after).MarshalBinary()
				size = len(enc)
			}
			b.ReportMetric(float64(size), "B/delta")
		})
	}
}

// BenchmarkApplyDelta: a peer applies the delta (decode and Apply).
func BenchmarkApplyDelta(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("ipv4/conns=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, uint64(n)))
			before := benchSet(rng, n, false)
			enc, _ := Diff(before, churn(rng, before, false)).MarshalBinary()
			b.ReportAllocs()
			for b.Loop() {
				var d Delta
				if err := d.UnmarshalBinary(enc); err != nil {
					b.Fatal(err)
				}
				_ = before.Apply(d)
			}
		})
	}
}

func family(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ipv4"
}

// BenchmarkNewSet: sorting a listing (the kernel answers in hash order).
func BenchmarkNewSet(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("ipv4/conns=%d", n), func(b *testing.B) {
			cs := benchSet(rand.New(rand.NewPCG(4, uint64(n))), n, false).Conns()
			rand.New(rand.NewPCG(5, 6)).Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
			b.ReportAllocs()
			for b.Loop() {
				_ = NewSet(cs...)
			}
		})
	}
}
