package conns

import (
	"cmp"
	"encoding/binary"
	"iter"
	"net/netip"
	"slices"
)

// A Conn is one TCP connection as the holder of a VIP sees it: Local is the
// VIP and the port the client connected to, Remote is the client's address
// and port.
type Conn struct {
	Local, Remote netip.AddrPort
}

// Valid reports whether c can be a connection in a Set: both addresses
// valid, of one family (IPv4-mapped IPv6 addresses count as IPv4 once
// unmapped, see Set), without an IPv6 zone, and both ports non-zero.
func (c Conn) Valid() bool {
	l, r := c.Local.Addr(), c.Remote.Addr()
	return l.IsValid() && r.IsValid() && l.Is4() == r.Is4() && !l.Is4In6() && !r.Is4In6() &&
		l.Zone() == "" && r.Zone() == "" && c.Local.Port() != 0 && c.Remote.Port() != 0
}

// Compare orders connections by local address, local port, remote address
// and remote port (IPv4 before IPv6). It returns -1, 0 or +1.
func (c Conn) Compare(d Conn) int {
	if x := c.Local.Compare(d.Local); x != 0 {
		return x
	}
	return c.Remote.Compare(d.Remote)
}

// String returns "local<-remote", as "192.0.2.10:6443<-198.51.100.7:40312".
func (c Conn) String() string { return c.Local.String() + "<-" + c.Remote.String() }

// unmap returns c with IPv4-mapped IPv6 addresses as IPv4 (a dual-stack
// socket reports an IPv4 client that way).
func (c Conn) unmap() Conn {
	return Conn{
		Local:  netip.AddrPortFrom(c.Local.Addr().Unmap(), c.Local.Port()),
		Remote: netip.AddrPortFrom(c.Remote.Addr().Unmap(), c.Remote.Port()),
	}
}

// key is a Conn in the form a Set keeps: no pointers (a slice of them is
// not scanned by the garbage collector) and ordered by plain integer
// comparisons, in Conn.Compare's order. Addresses are 16 bytes, IPv4 in
// the IPv4-mapped form; v6 tells the family of both.
type key struct {
	v6           bool
	lport, rport uint16
	lhi, llo     uint64
	rhi, rlo     uint64
}

func toKey(c Conn) key {
	l, r := c.Local.Addr().As16(), c.Remote.Addr().As16()
	return key{
		v6: c.Local.Addr().Is6(), lport: c.Local.Port(), rport: c.Remote.Port(),
		lhi: binary.BigEndian.Uint64(l[:8]), llo: binary.BigEndian.Uint64(l[8:]),
		rhi: binary.BigEndian.Uint64(r[:8]), rlo: binary.BigEndian.Uint64(r[8:]),
	}
}

func (k key) conn() Conn {
	return Conn{Local: netip.AddrPortFrom(k.addr(k.lhi, k.llo), k.lport), Remote: netip.AddrPortFrom(k.addr(k.rhi, k.rlo), k.rport)}
}

func (k key) addr(hi, lo uint64) netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	a := netip.AddrFrom16(b)
	if !k.v6 {
		return a.Unmap()
	}
	return a
}

// sameLocal reports whether k and j have the same local address and port.
func (k key) sameLocal(j key) bool {
	return k.v6 == j.v6 && k.lhi == j.lhi && k.llo == j.llo && k.lport == j.lport
}

// cmpLocal orders keys by their local end only.
func cmpLocal(a, b key) int {
	if a.v6 != b.v6 {
		if a.v6 {
			return 1
		}
		return -1
	}
	if x := cmp.Compare(a.lhi, b.lhi); x != 0 {
		return x
	}
	if x := cmp.Compare(a.llo, b.llo); x != 0 {
		return x
	}
	return cmp.Compare(a.lport, b.lport)
}

// cmpKey orders keys as Conn.Compare orders their connections.
func cmpKey(a, b key) int {
	if x := cmpLocal(a, b); x != 0 {
		return x
	}
	if x := cmp.Compare(a.rhi, b.rhi); x != 0 {
		return x
	}
	if x := cmp.Compare(a.rlo, b.rlo); x != 0 {
		return x
	}
	return cmp.Compare(a.rport, b.rport)
}

// A Set is a set of connections, kept in Conn.Compare order and without
// duplicates. It is a value: no method changes a Set, and it may be shared
// between goroutines. The zero value is the empty set.
type Set struct {
	k []key // sorted by cmpKey, unique, every element a Valid Conn
}

// NewSet returns the set of the given connections. IPv4-mapped IPv6
// addresses are taken as IPv4; connections that are not Valid then are left
// out. cs is not kept.
func NewSet(cs ...Conn) Set {
	out := make([]key, 0, len(cs))
	for _, c := range cs {
		if c = c.unmap(); c.Valid() {
			out = append(out, toKey(c))
		}
	}
	sortKeys(out)
	return Set{k: slices.Compact(out)}
}

// sortKeys sorts ks by cmpKey. A listing of IPv4 connections (the usual
// case) is sorted as plain integers: each key packed into one uint64, the
// rank of its local end among the few distinct ones (VIPs and ports) above
// the 48 bits of its remote address and port. That is several times faster
// than comparing keys, which a holder does for its whole listing every
// second.
func sortKeys(ks []key) {
	type local struct {
		addr uint64
		port uint16
	}
	var locals []local
	for _, k := range ks {
		l := local{k.llo, k.lport}
		if k.v6 || k.rhi != 0 || k.lhi != 0 {
			slices.SortFunc(ks, cmpKey)
			return
		}
		if !slices.Contains(locals, l) {
			if len(locals) == 256 {
				slices.SortFunc(ks, cmpKey)
				return
			}
			locals = append(locals, l)
		}
	}
	slices.SortFunc(locals, func(a, b local) int {
		return cmp.Or(cmp.Compare(a.addr, b.addr), cmp.Compare(a.port, b.port))
	})
	packed := make([]uint64, len(ks))
	for i, k := range ks {
		rank := uint64(slices.Index(locals, local{k.llo, k.lport}))
		packed[i] = rank<<48 | (k.rlo&0xffffffff)<<16 | uint64(k.rport)
	}
	slices.Sort(packed)
	for i, p := range packed {
		l := locals[p>>48]
		ks[i] = key{lport: l.port, llo: l.addr, rlo: 0xffff<<32 | (p>>16)&0xffffffff, rport: uint16(p)}
	}
}

// Len returns the number of connections in s.
func (s Set) Len() int { return len(s.k) }

// All returns the connections of s, in order.
func (s Set) All() iter.Seq[Conn] {
	return func(yield func(Conn) bool) {
		for _, k := range s.k {
			if !yield(k.conn()) {
				return
			}
		}
	}
}

// Conns returns the connections of s, in order.
func (s Set) Conns() []Conn {
	out := make([]Conn, len(s.k))
	for i, k := range s.k {
		out[i] = k.conn()
	}
	return out
}

// Contains reports whether c is in s.
func (s Set) Contains(c Conn) bool {
	c = c.unmap()
	if !c.Valid() {
		return false
	}
	_, ok := slices.BinarySearchFunc(s.k, toKey(c), cmpKey)
	return ok
}

// Equal reports whether s and t hold the same connections.
func (s Set) Equal(t Set) bool { return slices.Equal(s.k, t.k) }

// Filter returns the connections of s for which keep returns true.
func (s Set) Filter(keep func(Conn) bool) Set {
	var out []key
	for _, k := range s.k {
		if keep(k.conn()) {
			out = append(out, k)
		}
	}
	return Set{k: out}
}

// A Delta is the change from one Set to another: the connections that
// went and the ones that came. Removed and Added are disjoint.
type Delta struct {
	Removed, Added Set
}

// Empty reports whether d changes nothing.
func (d Delta) Empty() bool { return d.Removed.Len() == 0 && d.Added.Len() == 0 }

// Diff returns the delta that turns from into to: from.Apply(Diff(from, to))
// equals to.
func Diff(from, to Set) Delta {
	var rm, add []key
	i, j := 0, 0
	for i < len(from.k) && j < len(to.k) {
		switch x := cmpKey(from.k[i], to.k[j]); {
		case x < 0:
			rm = append(rm, from.k[i])
			i++
		case x > 0:
			add = append(add, to.k[j])
			j++
		default:
			i++
			j++
		}
	}
	rm = append(rm, from.k[i:]...)
	add = append(add, to.k[j:]...)
	return Delta{Removed: Set{k: rm}, Added: Set{k: add}}
}

// Apply returns s without d.Removed and with d.Added.
func (s Set) Apply(d Delta) Set {
	rm, add := d.Removed.k, d.Added.k
	out := make([]key, 0, len(s.k)+len(add))
	i, j, r := 0, 0, 0
	for i < len(s.k) || j < len(add) {
		if j == len(add) || (i < len(s.k) && cmpKey(s.k[i], add[j]) < 0) {
			k := s.k[i]
			i++
			for r < len(rm) && cmpKey(rm[r], k) < 0 {
				r++
			}
			if r < len(rm) && rm[r] == k {
				continue
			}
			out = append(out, k)
			continue
		}
		if i < len(s.k) && s.k[i] == add[j] {
			i++ // in both: once
		}
		out = append(out, add[j])
		j++
	}
	return Set{k: out}
}

// disjoint reports whether the sorted a and b share no element.
func disjoint(a, b []key) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch x := cmpKey(a[i], b[j]); {
		case x < 0:
			i++
		case x > 0:
			j++
		default:
			return false
		}
	}
	return true
}
