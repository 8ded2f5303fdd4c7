package conns

import (
	"net/netip"
	"slices"
)

// UnlistedSpan is how many client ports below a client's first new
// connection Unlisted returns: Linux gives a client's successive
// connections to one address and port increasing source ports (RFC 6056,
// algorithm 4: a counter per destination, moved on by 2 or a few more per
// connection), so the connections it opened after its previous holder's
// last list lie a few ports below the first one it opens to the new
// holder. 64 covers a client that opened about 30 connections to the VIP
// in the second between two lists.
const UnlistedSpan = 64

// Unlisted returns the connections to published's VIPs that their
// clients may have opened after published was listed, and that this node
// does not have: for each client address and VIP endpoint (address and
// port) in published, the client ports below the lowest port of the
// client's connections to that endpoint in own that lies above every port
// of published's connections of the client to it (the client's first
// connection to this node after the takeover), down to span ports below
// it and never down to a published port. A client with no such
// connection in own (it has not come back, or its ports wrapped around)
// gets none.
//
// A new holder pokes them (after Pokable's rules) once its clients came
// back: a connection the previous holder had not listed yet (a kubectl's,
// which lives for a request) whose request the previous holder had
// acknowledged but not answered waits for the client's own timeout
// otherwise, the client having nothing to send again. A port without
// such a connection costs a poke and the client's reset, which this node
// drops.
func Unlisted(published, own Set, span int) []Conn {
	if span <= 0 {
		return nil
	}
	type endpoint struct {
		local  netip.AddrPort
		client netip.Addr
	}
	maxPub := map[endpoint]uint16{}
	for c := range published.All() {
		e := endpoint{c.Local, c.Remote.Addr()}
		maxPub[e] = max(maxPub[e], c.Remote.Port())
	}
	firstNew := map[endpoint]uint16{}
	for c := range own.All() {
		e := endpoint{c.Local, c.Remote.Addr()}
		top, ok := maxPub[e]
		if !ok || c.Remote.Port() <= top {
			continue
		}
		if p, seen := firstNew[e]; !seen || c.Remote.Port() < p {
			firstNew[e] = c.Remote.Port()
		}
	}
	var out []Conn
	for e, upper := range firstNew {
		lower := max(int(maxPub[e])+1, int(upper)-span)
		for p := lower; p < int(upper); p++ {
			c := Conn{Local: e.local, Remote: netip.AddrPortFrom(e.client, uint16(p))}
			if !own.Contains(c) {
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, Conn.Compare)
	return out
}
