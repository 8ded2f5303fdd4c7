package conns

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"runtime"
	"testing"
)

// denseSet crafts the encoding of a Set with one group (192.0.2.10:6443)
// of clients clients (198.51.100.1, .2, ...), each with ports ports
// (1..ports): the densest encoding there is, 2 bytes a connection.
func denseSet(clients, ports int) []byte {
	b := []byte{encVersion, kindSet, 1, 4, 192, 0, 2, 10}
	b = binary.BigEndian.AppendUint16(b, 6443)
	b = binary.AppendUvarint(b, uint64(clients))
	for c := range clients {
		if c == 0 {
			b = append(b, 0, 198, 51, 100, 1)
		} else {
			b = append(b, 3, byte(c+1))
		}
		b = binary.AppendUvarint(b, uint64(ports))
		for p := range ports {
			b = binary.BigEndian.AppendUint16(b, uint16(p+1))
		}
	}
	return b
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeAllocationBounded: decoding a message allocates what the
// connections it holds take (a key each) and no more, and a message of
// more than MaxConns connections is refused before anything is allocated
// for them, whatever its size (memberlist lets a peer send 20 MB).
func TestDecodeAllocationBounded(t *testing.T) {
	const keySize = 40 // unsafe.Sizeof(key{})
	// Within the bound: 50,000 IPv6 clients with a port each, about 5
	// bytes a connection.
	cs := make([]Conn, 50000)
	for i := range cs {
		var a [16]byte
		a[0], a[1], a[2], a[3] = 0x20, 0x01, 0x0d, 0xb8
		binary.BigEndian.PutUint32(a[12:], uint32(i+1))
		cs[i] = Conn{Local: netip.MustParseAddrPort("[2001:db8::10]:6443"), Remote: netip.AddrPortFrom(netip.AddrFrom16(a), 40000)}
	}
	ok, _ := NewSet(cs...).MarshalBinary()
	var s Set
	got := allocated(func() {
		if err := s.UnmarshalBinary(ok); err != nil {
			t.Fatalf("decode: %v", err)
		}
	})
	if s.Len() != len(cs) {
		t.Fatalf("decoded %d connections, want %d", s.Len(), len(cs))
	}
	if limit := uint64(keySize*s.Len() + 64<<10); got > limit {
		t.Errorf("decoding %d connections in %d bytes allocated %d bytes, want at most %d (a key each)", s.Len(), len(ok), got, limit)
	}
	// Over the bound: 6 clients with every port, 393,210 connections in
	// 786 KB; refused, and what is allocated is far below the message.
	big := denseSet(6, 65535)
	var d Set
	var err error
	got = allocated(func() { err = d.UnmarshalBinary(big) })
	if !errors.Is(err, ErrFormat) {
		t.Errorf("a set of %d connections (more than MaxConns %d): err %v, want ErrFormat", 6*65535, MaxConns, err)
	}
	if limit := uint64(64 << 10); got > limit {
		t.Errorf("refusing a set of %d connections in %d bytes allocated %d bytes, want at most %d", 6*65535, len(big), got, limit)
	}
}

// TestFeedMirrorMaxConns: a holder listing more than MaxConns connections
// publishes the first MaxConns, which its peers take; a peer refuses a
// delta that would take its copy past MaxConns.
func TestFeedMirrorMaxConns(t *testing.T) {
	big := make([]Conn, MaxConns+10)
	for i := range big {
		var a [16]byte
		a[0], a[1], a[2], a[3] = 0x20, 0x01, 0x0d, 0xb8
		binary.BigEndian.PutUint32(a[12:], uint32(i+1))
		big[i] = Conn{Local: netip.MustParseAddrPort("[2001:db8::10]:6443"), Remote: netip.AddrPortFrom(netip.AddrFrom16(a), 40000)}
	}
	f := NewFeed(1, 0)
	var m Mirror
	if _, err := m.Apply(f.Next(NewSet(big...), t0), t0); err != nil {
		t.Fatalf("the full set of a holder with %d connections: %v", len(big), err)
	}
	if s, synced, _ := m.Set(); s.Len() != MaxConns || !synced {
		t.Fatalf("the peer's copy has %d connections (synced %v), want the first %d", s.Len(), synced, MaxConns)
	}
	// A delta adding 10 to a full copy.
	var full Set
	if err := full.UnmarshalBinary(f.Full()[16:]); err != nil {
		t.Fatal(err)
	}
	d, _ := Delta{Added: NewSet(big[MaxConns:]...)}.AppendBinary(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 1), 2))
	if _, err := m.Apply(d, t0); !errors.Is(err, ErrFormat) {
		t.Fatalf("a delta taking the copy to %d connections: err %v, want ErrFormat", len(big), err)
	}
}
