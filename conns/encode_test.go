package conns

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEncodeLayout pins the wire format (version 1) with a small example,
// so a change of the format is a deliberate one.
func TestEncodeLayout(t *testing.T) {
	s := NewSet(
		conn("192.0.2.10:6443", "198.51.100.7:40000"),
		conn("192.0.2.10:6443", "198.51.100.7:40002"),
		conn("192.0.2.10:6443", "198.51.100.9:1025"),
		conn("[2001:db8::10]:443", "[2001:db8::7]:40000"),
	)
	b, _ := s.MarshalBinary()
	want := strings.Join([]string{
		"01 01",                    // version 1, a set
		"02",                       // two groups
		"04 c000020a 192b",         // IPv4, 192.0.2.10, port 6443
		"02",                       //   two clients
		"00 c6336407 02 9c40 9c42", // no shared prefix, 198.51.100.7, two ports 40000 40002
		"03 09 01 0401",            //   3 bytes shared, .9, one port 1025
		"06 20010db8000000000000000000000010 01bb", // IPv6, 2001:db8::10, port 443
		"01", //   one client
		"00 20010db8000000000000000000000007 01 9c40",
	}, "")
	if got := hex.EncodeToString(b); got != strings.ReplaceAll(want, " ", "") {
		t.Fatalf("encoding\n got %s\nwant %s", got, strings.ReplaceAll(want, " ", ""))
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		a, b := randomSet(rng, rng.IntN(80)), randomSet(rng, rng.IntN(80))
		enc, _ := a.MarshalBinary()
		var got Set
		if err := got.UnmarshalBinary(enc); err != nil {
			t.Fatalf("round %d: decode %x: %v", round, enc, err)
		}
		if !got.Equal(a) {
			t.Fatalf("round %d: decoded %v, want %v", round, got.Conns(), a.Conns())
		}
		d := Diff(a, b)
		denc, _ := d.MarshalBinary()
		var gotD Delta
		if err := gotD.UnmarshalBinary(denc); err != nil {
			t.Fatalf("round %d: decode delta %x: %v", round, denc, err)
		}
		if !gotD.Removed.Equal(d.Removed) || !gotD.Added.Equal(d.Added) {
			t.Fatalf("round %d: delta decoded differently", round)
		}
		// A set is not a delta and the other way round.
		if err := gotD.UnmarshalBinary(enc); err == nil {
			t.Fatalf("round %d: a set decoded as a delta", round)
		}
		if err := got.UnmarshalBinary(denc); err == nil {
			t.Fatalf("round %d: a delta decoded as a set", round)
		}
	}
}

func TestDecodeRefusesNonCanonical(t *testing.T) {
	const (
		hdr = "0101"           // version 1, a set
		g4  = "04c000020a192b" // group: IPv4 192.0.2.10 port 6443
		g4b = "04c000020b192b" // group: IPv4 192.0.2.11 port 6443
		c7  = "00c6336407"     // first client 198.51.100.7
		c9  = "0309"           // next client, 3 bytes shared: 198.51.100.9
		p1  = "01" + "9c40"    // one port: 40000
	)
	good := hdr + "01" + g4 + "02" + c7 + p1 + c9 + "01" + "0401"
	var s Set
	if err := s.UnmarshalBinary(unhex(t, good)); err != nil {
		t.Fatalf("the reference encoding does not decode: %v", err)
	}
	if s.Len() != 2 {
		t.Fatalf("the reference encoding decodes to %v", s.Conns())
	}
	cases := map[string]string{
		"empty":                       "",
		"version 2":                   "0201" + good[4:],
		"kind delta":                  "0102" + good[4:],
		"trailing byte":               good + "00",
		"truncated":                   good[:len(good)-2],
		"family 5":                    hdr + "01" + "05" + g4[2:] + "01" + c7 + p1,
		"no clients":                  hdr + "01" + g4 + "00",
		"local port 0":                hdr + "01" + "04c000020a0000" + "01" + c7 + p1,
		"shared prefix not longest":   hdr + "01" + g4 + "02" + c7 + p1 + "026409" + p1,
		"clients out of order":        hdr + "01" + g4 + "02" + "00c6336409" + p1 + "0307" + p1,
		"same client twice":           hdr + "01" + g4 + "02" + c7 + p1 + "0307" + p1,
		"prefix in first client":      hdr + "01" + g4 + "01" + "01336407" + p1,
		"prefix of the whole address": hdr + "01" + g4 + "02" + c7 + p1 + "04" + p1,
		"ports out of order":          hdr + "01" + g4 + "01" + c7 + "02" + "9c42" + "9c40",
		"port twice":                  hdr + "01" + g4 + "01" + c7 + "02" + "9c40" + "9c40",
		"client port 0":               hdr + "01" + g4 + "01" + c7 + "01" + "0000",
		"no ports":                    hdr + "01" + g4 + "01" + c7 + "00",
		"count not minimal":           hdr + "8100" + g4 + "01" + c7 + p1,
		"huge count":                  hdr + "ffffffffffffffffff01",
		"groups out of order":         hdr + "02" + g4b + "01" + c7 + p1 + g4 + "01" + c7 + p1,
		"group twice":                 hdr + "02" + g4 + "01" + c7 + p1 + g4 + "01" + "00c6336408" + p1,
		"IPv4-mapped VIP":             hdr + "01" + "0600000000000000000000ffffc000020a192b" + "01" + "0020010db8000000000000000000000007" + p1,
		"IPv4-mapped client":          hdr + "01" + "0620010db8000000000000000000000010192b" + "01" + "0000000000000000000000ffffc6336407" + p1,
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			var s Set
			err := s.UnmarshalBinary(unhex(t, h))
			if err == nil {
				t.Fatalf("decoded %s as %v", h, s.Conns())
			}
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
		})
	}
}

func TestDecodeDeltaRefusesOverlap(t *testing.T) {
	s := NewSet(conn("192.0.2.10:6443", "198.51.100.7:40000"))
	b, _ := Delta{Removed: s, Added: s}.MarshalBinary()
	var d Delta
	if err := d.UnmarshalBinary(b); !errors.Is(err, ErrFormat) {
		t.Fatalf("a delta removing and adding one connection: err %v", err)
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("test case %q: %v", s, err)
	}
	return b
}

// FuzzDecodeSet: garbage never panics, and what decodes encodes to the same
// bytes (the encoding is canonical).
func FuzzDecodeSet(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 5, 40} {
		b, _ := randomSet(rng, n).MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Set
		if err := s.UnmarshalBinary(b); err != nil {
			return
		}
		again, _ := s.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %x, encodes as %x", b, again)
		}
		for c := range s.All() {
			if !c.Valid() {
				t.Fatalf("decoded an invalid connection %v", c)
			}
		}
	})
}

// FuzzDecodeDelta: as FuzzDecodeSet, and a decoded delta applies as Diff
// says it should.
func FuzzDecodeDelta(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 3, 30} {
		a := randomSet(rng, n)
		b, _ := Diff(a, a.Apply(Delta{Removed: randomSubset(rng, a), Added: randomSet(rng, 4)})).MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Delta
		if err := d.UnmarshalBinary(b); err != nil {
			return
		}
		again, _ := d.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %x, encodes as %x", b, again)
		}
		after := d.Removed.Apply(d)
		if !after.Equal(d.Added) {
			t.Fatalf("Removed.Apply(d) = %v, want Added %v", after.Conns(), d.Added.Conns())
		}
	})
}
