package conns

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire format, version 1. A Set and a Delta share one header:
//
//	byte 0      version (1)
//	byte 1      kind: 1 a Set, 2 a Delta
//
// then a Set is one group list and a Delta two (Removed, then Added). A
// group list is
//
//	uvarint     number of groups
//	per group (one local address and port; groups in Conn.Compare order):
//	  byte      family: 4 or 6
//	  4 or 16   local address (the VIP)
//	  2         local port, big endian
//	  uvarint   number of runs (one per remote address, in order)
//	  per run:
//	    byte    p: how many leading bytes the remote address shares with
//	            the previous run's (0 in a group's first run)
//	    n-p     the other bytes of the remote address (n is 4 or 16)
//	    uvarint number of remote ports (at least 1)
//	    2 each  the remote ports, big endian, ascending
//
// A client address is usually close to the one before it (sorted clients
// in one subnet share all but a byte or two), so a connection costs about
// 4 bytes with IPv4 and 6-12 with IPv6 instead of 6 and 18.
//
// The encoding is canonical: the decoder refuses anything Append would not
// have written (unsorted or repeated entries, a shared prefix that is not
// the longest, port 0, IPv4-mapped addresses, trailing bytes), so decoding
// and encoding again gives the same bytes. Version 1 decoders refuse other
// versions: a peer running a newer vipd sends what the older one reads
// until every node is upgraded.
const (
	encVersion = 1
	kindSet    = 1
	kindDelta  = 2
)

// ErrFormat is wrapped by every decoding error.
var ErrFormat = errors.New("conns: malformed connection set")

// AppendBinary appends the encoding of s to b. It implements
// encoding.BinaryAppender and never fails.
func (s Set) AppendBinary(b []byte) ([]byte, error) {
	return appendGroups(append(b, encVersion, kindSet), s.k), nil
}

// MarshalBinary returns the encoding of s. It implements
// encoding.BinaryMarshaler and never fails.
func (s Set) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

// UnmarshalBinary sets s to the Set encoded in b. It implements
// encoding.BinaryUnmarshaler.
func (s *Set) UnmarshalBinary(b []byte) error {
	rest, err := header(b, kindSet)
	if err != nil {
		return err
	}
	cs, rest, err := parseGroups(rest)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d bytes after the set", ErrFormat, len(rest))
	}
	*s = Set{k: cs}
	return nil
}

// AppendBinary appends the encoding of d to b. It implements
// encoding.BinaryAppender and never fails.
func (d Delta) AppendBinary(b []byte) ([]byte, error) {
	b = appendGroups(append(b, encVersion, kindDelta), d.Removed.k)
	return appendGroups(b, d.Added.k), nil
}

// MarshalBinary returns the encoding of d. It implements
// encoding.BinaryMarshaler and never fails.
func (d Delta) MarshalBinary() ([]byte, error) { return d.AppendBinary(nil) }

// UnmarshalBinary sets d to the Delta encoded in b. It implements
// encoding.BinaryUnmarshaler. A delta whose Removed and Added share a
// connection is refused (Diff never makes one).
func (d *Delta) UnmarshalBinary(b []byte) error {
	rest, err := header(b, kindDelta)
	if err != nil {
		return err
	}
	rm, rest, err := parseGroups(rest)
	if err != nil {
		return fmt.Errorf("removed: %w", err)
	}
	add, rest, err := parseGroups(rest)
	if err != nil {
		return fmt.Errorf("added: %w", err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d bytes after the delta", ErrFormat, len(rest))
	}
	if !disjoint(rm, add) {
		return fmt.Errorf("%w: a connection both removed and added", ErrFormat)
	}
	*d = Delta{Removed: Set{k: rm}, Added: Set{k: add}}
	return nil
}

func header(b []byte, kind byte) ([]byte, error) {
	switch {
	case len(b) < 2:
		return nil, fmt.Errorf("%w: %d bytes, no header", ErrFormat, len(b))
	case b[0] != encVersion:
		return nil, fmt.Errorf("%w: version %d, this release reads %d", ErrFormat, b[0], encVersion)
	case b[1] != kind:
		return nil, fmt.Errorf("%w: kind %d, want %d", ErrFormat, b[1], kind)
	}
	return b[2:], nil
}

// appendGroups appends the group list of the sorted, unique ks.
func appendGroups(b []byte, ks []key) []byte {
	groups := 0
	for i := range ks {
		if i == 0 || !ks[i].sameLocal(ks[i-1]) {
			groups++
		}
	}
	b = binary.AppendUvarint(b, uint64(groups))
	for i := 0; i < len(ks); {
		j := i + 1
		for j < len(ks) && ks[j].sameLocal(ks[i]) {
			j++
		}
		b = appendGroup(b, ks[i:j])
		i = j
	}
	return b
}

// addrBytes returns an address of k's family: 4 or 16 bytes of b.
func addrBytes(v6 bool, b *[16]byte, hi, lo uint64) []byte {
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	if v6 {
		return b[:]
	}
	return b[12:]
}

// appendGroup appends one group: connections sharing their local address
// and port.
func appendGroup(b []byte, ks []key) []byte {
	first := ks[0]
	var buf, prevBuf [16]byte
	if first.v6 {
		b = append(b, 6)
	} else {
		b = append(b, 4)
	}
	b = append(b, addrBytes(first.v6, &buf, first.lhi, first.llo)...)
	b = binary.BigEndian.AppendUint16(b, first.lport)
	runs := 0
	for i := range ks {
		if i == 0 || ks[i].rhi != ks[i-1].rhi || ks[i].rlo != ks[i-1].rlo {
			runs++
		}
	}
	b = binary.AppendUvarint(b, uint64(runs))
	var prev []byte
	for i := 0; i < len(ks); {
		j := i + 1
		for j < len(ks) && ks[j].rhi == ks[i].rhi && ks[j].rlo == ks[i].rlo {
			j++
		}
		cur := addrBytes(first.v6, &buf, ks[i].rhi, ks[i].rlo)
		p := 0
		for prev != nil && p < len(cur)-1 && cur[p] == prev[p] {
			p++
		}
		b = append(b, byte(p))
		b = append(b, cur[p:]...)
		b = binary.AppendUvarint(b, uint64(j-i))
		for _, k := range ks[i:j] {
			b = binary.BigEndian.AppendUint16(b, k.rport)
		}
		prevBuf = buf
		prev = prevBuf[len(prevBuf)-len(cur):]
		i = j
	}
	return b
}

// Smallest encodings, used to bound counts read from the wire before
// anything is allocated for them.
const (
	minGroup = 1 + 4 + 2 + 1 + minRun // family, address, port, runs, one run
	minRun   = 1 + 1 + 1 + 2          // prefix length, a byte, count, a port
)

// MaxConns bounds the connections of a decoded Set, and of each half of a
// decoded Delta: a longer list is refused before anything is allocated
// for it, so decoding one takes at most about 10 MB (40 bytes a
// connection) whatever the message's size (memberlist lets a peer send
// 20 MB). A VIP's clients are far fewer (a kubelet keeps one or two
// connections to the apiserver); a publisher with more publishes the
// first MaxConns (Feed).
const MaxConns = 1 << 18

// countConns returns the number of connections in the n groups at the
// start of b, reading only counts: it allocates nothing and checks only
// what it needs to stay within b (parseGroups checks the rest). A list
// of more than MaxConns is an error.
func countConns(b []byte, n uint64) (int, error) {
	total := uint64(0)
	for range n {
		if len(b) < 1 {
			return 0, fmt.Errorf("%w: truncated group", ErrFormat)
		}
		size := 4
		if b[0] == 6 {
			size = 16
		}
		if len(b) < 1+size+2 {
			return 0, fmt.Errorf("%w: truncated group", ErrFormat)
		}
		runs, rest, err := uvarint(b[1+size+2:])
		if err != nil {
			return 0, err
		}
		b = rest
		for range runs {
			if len(b) < 1 || int(b[0]) >= size || len(b) < 1+size-int(b[0]) {
				return 0, fmt.Errorf("%w: truncated client", ErrFormat)
			}
			ports, rest, err := uvarint(b[1+size-int(b[0]):])
			if err != nil {
				return 0, err
			}
			if ports > uint64(len(rest)/2) {
				return 0, fmt.Errorf("%w: %d ports in %d bytes", ErrFormat, ports, len(rest))
			}
			if total += ports; total > MaxConns {
				return 0, fmt.Errorf("%w: more than %d connections", ErrFormat, MaxConns)
			}
			b = rest[2*ports:]
		}
	}
	return int(total), nil
}

// parseGroups decodes a group list, checking that it is canonical.
func parseGroups(b []byte) ([]key, []byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(b)/minGroup) {
		return nil, nil, fmt.Errorf("%w: %d groups in %d bytes", ErrFormat, n, len(b))
	}
	// One allocation, never grown, of the size the list says it has: a
	// connection may take 2 bytes on the wire and 40 in memory, so a
	// capacity guessed from the length would be up to 20 times the
	// message.
	total, err := countConns(b, n)
	if err != nil {
		return nil, nil, err
	}
	out := make([]key, 0, total)
	for g := uint64(0); g < n; g++ {
		start := len(out)
		if out, b, err = parseGroup(out, b); err != nil {
			return nil, nil, err
		}
		if start > 0 && cmpLocal(out[start-1], out[start]) >= 0 {
			return nil, nil, fmt.Errorf("%w: groups out of order or repeated", ErrFormat)
		}
	}
	return out, b, nil
}

// words returns the 16-byte form of a 4- or 16-byte address as two words
// (IPv4 mapped), as a key holds it, and whether it is an IPv4-mapped IPv6
// address.
func words(a []byte) (hi, lo uint64, mapped bool) {
	if len(a) == 4 {
		return 0, 0xffff<<32 | uint64(binary.BigEndian.Uint32(a)), false
	}
	hi, lo = binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	return hi, lo, hi == 0 && lo>>32 == 0xffff
}

func parseGroup(out []key, b []byte) ([]key, []byte, error) {
	if len(b) < 1 {
		return nil, nil, fmt.Errorf("%w: truncated group", ErrFormat)
	}
	var k key
	size := 0
	switch b[0] {
	case 4:
		size = 4
	case 6:
		size, k.v6 = 16, true
	default:
		return nil, nil, fmt.Errorf("%w: family %d", ErrFormat, b[0])
	}
	b = b[1:]
	if len(b) < size+2 {
		return nil, nil, fmt.Errorf("%w: truncated group", ErrFormat)
	}
	var mapped bool
	k.lhi, k.llo, mapped = words(b[:size])
	k.lport = binary.BigEndian.Uint16(b[size:])
	if mapped || k.lport == 0 {
		return nil, nil, fmt.Errorf("%w: local address or port", ErrFormat)
	}
	b = b[size+2:]
	runs, b, err := uvarint(b)
	if err != nil {
		return nil, nil, err
	}
	if runs == 0 || runs > uint64(len(b)/minRun) {
		return nil, nil, fmt.Errorf("%w: %d clients in %d bytes", ErrFormat, runs, len(b))
	}
	var prev, cur [16]byte
	for r := uint64(0); r < runs; r++ {
		if len(b) < 1 {
			return nil, nil, fmt.Errorf("%w: truncated client", ErrFormat)
		}
		p := int(b[0])
		b = b[1:]
		if p >= size || (r == 0 && p != 0) || len(b) < size-p {
			return nil, nil, fmt.Errorf("%w: client address prefix %d", ErrFormat, p)
		}
		copy(cur[p:size], b[:size-p])
		b = b[size-p:]
		// The byte after the shared prefix must grow: addresses ascend
		// and the prefix is the longest (canonical).
		if r > 0 && cur[p] <= prev[p] {
			return nil, nil, fmt.Errorf("%w: client addresses out of order", ErrFormat)
		}
		if k.rhi, k.rlo, mapped = words(cur[:size]); mapped {
			return nil, nil, fmt.Errorf("%w: IPv4-mapped client address", ErrFormat)
		}
		var n uint64
		if n, b, err = uvarint(b); err != nil {
			return nil, nil, err
		}
		if n == 0 || n > uint64(len(b)/2) {
			return nil, nil, fmt.Errorf("%w: %d ports in %d bytes", ErrFormat, n, len(b))
		}
		k.rport = 0
		for i := uint64(0); i < n; i++ {
			port := binary.BigEndian.Uint16(b)
			b = b[2:]
			if port <= k.rport {
				return nil, nil, fmt.Errorf("%w: client ports out of order", ErrFormat)
			}
			k.rport = port
			out = append(out, k)
		}
		prev = cur
	}
	return out, b, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: bad count", ErrFormat)
	}
	// Canonical: the shortest encoding (no trailing 0x80 continuation).
	if n > 1 && b[n-1] == 0 {
		return 0, nil, fmt.Errorf("%w: count not minimally encoded", ErrFormat)
	}
	return v, b[n:], nil
}
