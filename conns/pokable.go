package conns

import "net/netip"

// A Takeover is what a node knows about one VIP when it considers poking
// the clients of the VIP's previous holder.
type Takeover struct {
	// VIP is the VIP's address.
	VIP netip.Addr
	// Held: this node holds the VIP now (it is on its interface).
	Held bool
	// PreviousHolds: the node that published the connections may still
	// hold the VIP: it has not said it released it, and its fence has not
	// expired. Its clients may be talking to it; they must not be reset.
	PreviousHolds bool
}

// Pokable returns the connections of published (the previous holder's
// last list) that this node may poke, in order:
//
//   - only connections to a VIP that this node holds (a Takeover with
//     Held), and only once the previous holder no longer holds it
//     (PreviousHolds false): a holder cut off from the others but still
//     serving its clients is left alone until its fence expires;
//   - never a connection this node has itself (in own, this node's
//     listing of the same VIPs): a poke would reach a live connection;
//   - never a connection whose client is one of the VIPs (the previous
//     holder's connection to itself);
//   - only unicast client addresses (no loopback, multicast, broadcast or
//     unspecified one), and at most MaxPokesPerClient connections of one
//     client address (the first in order).
//
// The last rule bounds what a list can make this node send: the list is
// its publisher's word (the peers check only that it came from the
// member it names), so a faulty or hostile member could list addresses of
// its choosing; each then gets at most MaxPokesPerClient bare ACKs of 40
// to 60 bytes, and the whole at most PokeConfig's rate for its timeout.
//
// A VIP without a Takeover is not poked.
func Pokable(published, own Set, takeovers []Takeover) []Conn {
	may := map[netip.Addr]bool{}
	vips := map[netip.Addr]bool{}
	for _, t := range takeovers {
		a := t.VIP.Unmap()
		ok, seen := may[a]
		// Two entries for one VIP: poke only if both allow it.
		may[a] = (ok || !seen) && t.Held && !t.PreviousHolds
		vips[a] = true
	}
	var out []Conn
	per := map[netip.Addr]int{}
	for c := range published.All() {
		r := c.Remote.Addr()
		if may[c.Local.Addr()] && !vips[r] && unicast(r) && per[r] < MaxPokesPerClient && !own.Contains(c) {
			per[r]++
			out = append(out, c)
		}
	}
	return out
}

// MaxPokesPerClient bounds the connections of one client address a new
// holder pokes. A kubelet keeps one or two connections to the apiserver;
// clients behind one address translation with more than this many
// connections to the VIP have the rest not reset (they wait for their own
// timeouts, as without vipd).
const MaxPokesPerClient = 256

// unicast reports whether a is an address a client connects from.
func unicast(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() &&
		a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}
