package bgp

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// The BGP peer fuzzer's messages, written byte by byte (RFC 4271 section 4)
// rather than with GoBGP's encoder, so that they can be as wrong as a
// broken or hostile router makes them. TestPeerFuzz (fuzz_netns_test.go)
// sends them to the speaker over a real session.

// BGP message types (RFC 4271 section 4.1).
const (
	msgOpen         = 1
	msgUpdate       = 2
	msgNotification = 3
	msgKeepalive    = 4
)

// Path attribute flags and types (RFC 4271 section 4.3, RFC 4760, RFC 5701,
// RFC 6793).
const (
	flagOptional   = 0x80
	flagTransitive = 0x40
	flagExtLen     = 0x10

	attrOrigin      = 1
	attrASPath      = 2
	attrNextHop     = 3
	attrMPReach     = 14
	attrAS4Path     = 17
	attrIP6ExtComms = 25
)

// bgpMsg frames body as a BGP message of type typ: marker, length, type.
func bgpMsg(typ byte, body []byte) []byte {
	m := make([]byte, 19, 19+len(body))
	for i := range 16 {
		m[i] = 0xff
	}
	binary.BigEndian.PutUint16(m[16:], uint16(19+len(body)))
	m[18] = typ
	return append(m, body...)
}

// capability is one capability TLV (RFC 5492) as it appears in an OPEN.
func capability(code byte, value []byte) []byte {
	return append([]byte{code, byte(len(value))}, value...)
}

// openMsg is an OPEN from asn (the 4-octet AS capability carries it; the
// 2-octet field says AS_TRANS when it does not fit) with router ID id, hold
// time hold and the given capabilities in one optional parameter.
func openMsg(asn uint32, hold uint16, id netip.Addr, caps ...[]byte) []byte {
	var params []byte
	for _, c := range caps {
		params = append(params, c...)
	}
	as2 := uint16(23456)
	if asn <= 0xffff {
		as2 = uint16(asn)
	}
	body := []byte{4, byte(as2 >> 8), byte(as2), byte(hold >> 8), byte(hold)}
	body = append(body, id.AsSlice()...)
	if len(params) == 0 {
		return bgpMsg(msgOpen, append(body, 0))
	}
	body = append(body, byte(len(params)+2), 2, byte(len(params)))
	return bgpMsg(msgOpen, append(body, params...))
}

// validCaps are the capabilities of a plain IPv4 unicast eBGP peer with
// 4-octet AS numbers.
func validCaps(asn uint32) [][]byte {
	return [][]byte{
		capability(1, []byte{0, 1, 0, 1}),
		capability(65, binary.BigEndian.AppendUint32(nil, asn)),
	}
}

// attr is one path attribute; the extended length flag is set when value
// needs it.
func attr(flags, typ byte, value []byte) []byte {
	if len(value) > 255 || flags&flagExtLen != 0 {
		return append([]byte{flags | flagExtLen, typ, byte(len(value) >> 8), byte(len(value))}, value...)
	}
	return append([]byte{flags, typ, byte(len(value))}, value...)
}

// rawAttr is a path attribute header with a length of its own, whatever
// value follows.
func rawAttr(flags, typ, length byte, value []byte) []byte {
	return append([]byte{flags, typ, length}, value...)
}

// updateMsg is an UPDATE with the given withdrawn routes, path attributes
// and NLRI, its two length fields computed.
func updateMsg(withdrawn, attrs, nlri []byte) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(withdrawn)))
	body = append(body, withdrawn...)
	body = binary.BigEndian.AppendUint16(body, uint16(len(attrs)))
	body = append(body, attrs...)
	return bgpMsg(msgUpdate, append(body, nlri...))
}

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// fuzzPeerAddrs are the fuzz peers' addresses; fuzzPeerAddr is the one
// the messages name (router ID, next hop), and fuzzNLRI the prefix the
// valid UPDATE announces (198.51.100.128/25).
var (
	fuzzPeerAddrs = []netip.Addr{
		netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"),
		netip.MustParseAddr("198.51.100.3"), netip.MustParseAddr("198.51.100.4"),
	}
	fuzzPeerAddr = fuzzPeerAddrs[0]
	fuzzNLRI     = []byte{25, 198, 51, 100, 128}
)

// validAttrs are ORIGIN IGP, AS_PATH (one AS_SEQUENCE of asn, 4 octets)
// and NEXT_HOP fuzzPeerAddr.
func validAttrs(asn uint32) (origin, asPath, nextHop []byte) {
	origin = attr(flagTransitive, attrOrigin, []byte{0})
	asPath = attr(flagTransitive, attrASPath, binary.BigEndian.AppendUint32([]byte{2, 1}, asn))
	nextHop = attr(flagTransitive, attrNextHop, fuzzPeerAddr.AsSlice())
	return
}

// validUpdate announces fuzzNLRI from asn.
func validUpdate(asn uint32) []byte {
	o, p, n := validAttrs(asn)
	return updateMsg(nil, concat(o, p, n), fuzzNLRI)
}

// shape is one malformed message of a published GoBGP advisory: sent as the
// peer's OPEN (open) or, on an established session, as an UPDATE.
type shape struct {
	advisory string
	name     string
	open     bool
	msg      []byte
}

// advisoryShapes are the malformed OPEN and UPDATE shapes of GoBGP's 2026
// advisories that a BGP peer can send (GO-2026-5427 is in the MRT parser
// and GO-2026-5699 in the BMP parser: vipd reads neither, and no BGP
// session reaches them). Each is built from the advisory's report and fix.
func advisoryShapes(asn uint32) []shape {
	origin, asPath, nextHop := validAttrs(asn)
	nh := fuzzPeerAddr.AsSlice()
	var s []shape
	add := func(adv, name string, msg []byte) { s = append(s, shape{advisory: adv, name: name, msg: msg}) }
	addOpen := func(adv, name string, msg []byte) {
		s = append(s, shape{advisory: adv, name: name, open: true, msg: msg})
	}

	// GO-2026-4736 (GoBGP issue 3305): NEXT_HOP with flags 0 or
	// transitive and a length of 0-3, its four address octets still
	// following, so that the attributes after it are parsed misaligned.
	for _, flags := range []byte{0, flagTransitive} {
		for l := byte(0); l < 4; l++ {
			add("GO-2026-4736", fmt.Sprintf("NEXT_HOP flags %#02x length %d", flags, l),
				updateMsg(nil, concat(origin, asPath, rawAttr(flags, attrNextHop, l, nh)), fuzzNLRI))
		}
	}
	// GO-2026-5198: an unrecognised attribute marked well-known (optional
	// bit 0), and ORIGIN without its transitive flag (GoBGP issue 3392).
	add("GO-2026-5198", "unknown well-known attribute type 240",
		updateMsg(nil, concat(origin, asPath, nextHop, attr(flagTransitive, 240, []byte{1})), fuzzNLRI))
	add("GO-2026-5198", "ORIGIN without the transitive flag",
		updateMsg(nil, concat(attr(0, attrOrigin, []byte{0}), asPath, nextHop), fuzzNLRI))
	// GO-2026-5266 (GoBGP issue 3308): AS4_PATH of length 1 before AS_PATH,
	// the report's payload, and the same with AS4_PATH's proper flags.
	add("GO-2026-5266", "AS4_PATH length 1 before AS_PATH (issue 3308 payload)",
		updateMsg(nil, concat(rawAttr(flagTransitive, attrAS4Path, 1, []byte{2}),
			rawAttr(flagTransitive, attrASPath, 4, []byte{0xff, 0xff, 0xde, 0xad})), nil))
	add("GO-2026-5266", "optional transitive AS4_PATH length 1 before AS_PATH",
		updateMsg(nil, concat(rawAttr(flagOptional|flagTransitive, attrAS4Path, 1, []byte{2}), origin, asPath, nextHop), fuzzNLRI))
	// GO-2026-5525: an UPDATE treated as withdraw (a bad ORIGIN value)
	// whose MP_REACH_NLRI names a family the session did not negotiate.
	for _, fam := range [][3]byte{{0x12, 0x34, 0x56}, {0, 1, 128}, {0, 2, 1}} {
		mp := concat(fam[:], []byte{4}, nh, []byte{0}, []byte{24, 203, 0, 113})
		add("GO-2026-5525", fmt.Sprintf("bad ORIGIN and MP_REACH_NLRI of AFI/SAFI %d/%d", int(fam[0])<<8|int(fam[1]), fam[2]),
			updateMsg(nil, concat(attr(flagTransitive, attrOrigin, []byte{9}), asPath, nextHop,
				attr(flagOptional, attrMPReach, mp)), nil))
	}
	// GO-2026-5713: IPv6 address specific extended communities whose
	// length is not a multiple of 20.
	for _, l := range []int{1, 19, 21, 39} {
		add("GO-2026-5713", fmt.Sprintf("IPv6 extended communities length %d", l),
			updateMsg(nil, concat(origin, asPath, nextHop, attr(flagOptional|flagTransitive, attrIP6ExtComms, make([]byte, l))), fuzzNLRI))
	}
	// GO-2026-5954: an empty AS_PATH (length 0), and an AS_PATH segment
	// that claims more AS numbers than it holds.
	add("GO-2026-5954", "AS_PATH length 0",
		updateMsg(nil, concat(origin, attr(flagTransitive, attrASPath, nil), nextHop), fuzzNLRI))
	add("GO-2026-5954", "AS_PATH segment of 5 AS numbers holding 1",
		updateMsg(nil, concat(origin, attr(flagTransitive, attrASPath, binary.BigEndian.AppendUint32([]byte{2, 5}, asn)), nextHop), fuzzNLRI))
	// GO-2026-5971: UPDATE length fields that exceed the message (the
	// subtraction that underflowed).
	add("GO-2026-5971", "withdrawn routes length 0xffff", bgpMsg(msgUpdate, []byte{0xff, 0xff, 0, 0}))
	add("GO-2026-5971", "total path attribute length 0xffff", bgpMsg(msgUpdate, concat([]byte{0, 0, 0xff, 0xff}, origin)))
	add("GO-2026-5971", "withdrawn routes fill the body, no attribute length", bgpMsg(msgUpdate, []byte{0, 2, 24, 198}))
	add("GO-2026-5971", "UPDATE body of 2 octets", bgpMsg(msgUpdate, []byte{0, 0}))
	add("GO-2026-5971", "UPDATE body of 3 octets", bgpMsg(msgUpdate, []byte{0, 0, 0}))
	add("GO-2026-5971", "attribute length past the attributes",
		updateMsg(nil, concat(origin, asPath, rawAttr(flagTransitive, attrNextHop, 200, nh)), nil))
	// Found by TestPeerFuzz's mutations (no advisory): a message of a
	// type BGP does not define. GoBGP v3.37.0's parseBody returns no
	// message for it and fsmHandler.handlingError dereferences that nil
	// (fsm.go:917): the process panicked, which is why vipd moved to
	// v4, whose recvMessageWithError resets the session ("if m == nil").
	// A misframed stream did the same on v3, which does not check the
	// marker; v4 does, and resets the session on a bad one.
	for _, typ := range []byte{0, 6, 7, 255} {
		add("no advisory", fmt.Sprintf("message of unknown type %d", typ), bgpMsg(typ, nil))
	}
	badMarker := updateMsg(nil, concat(origin, asPath, nextHop), fuzzNLRI)
	badMarker[0] = 0
	add("no advisory", "UPDATE with a marker not all ones", badMarker)

	// GO-2026-5955: OPEN capabilities whose values reach past their
	// declared length.
	mp := capability(1, []byte{0, 1, 0, 1})
	as4 := capability(65, binary.BigEndian.AppendUint32(nil, asn))
	id := fuzzPeerAddr
	addOpen("GO-2026-5955", "4-octet AS capability of length 2",
		openMsg(asn, 9, id, mp, []byte{65, 2, 0, 0}))
	addOpen("GO-2026-5955", "multiprotocol capability of length 1",
		openMsg(asn, 9, id, []byte{1, 1, 0}, as4))
	addOpen("GO-2026-5955", "graceful restart capability of length 1",
		openMsg(asn, 9, id, mp, as4, []byte{64, 1, 0x80}))
	addOpen("GO-2026-5955", "FQDN capability whose host name length exceeds it",
		openMsg(asn, 9, id, mp, as4, []byte{73, 3, 200, 'a', 'b'}))
	addOpen("GO-2026-5955", "software version capability whose length exceeds it",
		openMsg(asn, 9, id, mp, as4, []byte{75, 2, 64, 'v'}))
	addOpen("GO-2026-5955", "add-path capability of length 3",
		openMsg(asn, 9, id, mp, as4, []byte{69, 3, 0, 1, 1}))
	addOpen("GO-2026-5955", "capability length past the optional parameter",
		openMsg(asn, 9, id, mp, []byte{65, 40, 0, 0, 0xfd, 0xea}))
	return s
}

// mutate returns a random variation of the valid message m: bytes flipped,
// inserted, removed or set to boundary values, length fields rewritten,
// attributes duplicated or truncated. The header is kept and its length
// set to the result's, so that the body's decoder runs (misframing and
// unknown message types are advisoryShapes of their own).
func mutate(r *rand.Rand, m []byte) []byte {
	b := append([]byte(nil), m...)
	for n := 1 + r.IntN(4); n > 0; n-- {
		if len(b) <= 19 {
			b = append(b, byte(r.IntN(256)))
			continue
		}
		i := 19 + r.IntN(len(b)-19)
		switch r.IntN(8) {
		case 0: // flip bits
			b[i] ^= byte(1 << r.IntN(8))
		case 1: // boundary value
			b[i] = []byte{0, 1, 0x7f, 0x80, 0xff, 0x40, 0xc0, 0x10}[r.IntN(8)]
		case 2: // random byte
			b[i] = byte(r.IntN(256))
		case 3: // insert
			b = append(b[:i], append([]byte{byte(r.IntN(256))}, b[i:]...)...)
		case 4: // remove
			b = append(b[:i], b[i+1:]...)
		case 5: // truncate
			b = b[:i]
		case 6: // duplicate a tail (an attribute twice, NLRI twice)
			j := i + r.IntN(len(b)-i)
			b = append(b, b[i:j+1]...)
		case 7: // a two-octet length field somewhere set to a small or large value
			if i+1 < len(b) {
				binary.BigEndian.PutUint16(b[i:], []uint16{0, 1, 2, 3, 4, 0xff, 0x100, 0xfff, 0xffff}[r.IntN(9)])
			}
		}
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	if len(b) < 19 {
		b = append(b, make([]byte, 19-len(b))...)
	}
	binary.BigEndian.PutUint16(b[16:], uint16(len(b)))
	return b
}
