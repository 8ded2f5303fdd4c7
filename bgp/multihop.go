package bgp

import (
	api "github.com/osrg/gobgp/v4/api"
)

// MaxTTLSecurityHops is the largest Peer.TTLSecurityHops: the kernel then
// accepts TTL 2 and above (FRR's `ttl-security hops` has the same range).
const MaxTTLSecurityHops = 254

// validateHops reports the problems of p's session reach (local address,
// multihop, TTL security) to add. localASN is the speaker's AS.
func (p Peer) validateHops(localASN uint32, add func(field, format string, args ...any)) {
	if a := p.LocalAddress; a.IsValid() {
		switch {
		case a.Zone() != "" || a.Is4In6() || a.IsUnspecified() || a.IsMulticast():
			add("local_address", "local_address %s: must be a unicast IPv4 or IPv6 address without zone", a)
		case p.Address.IsValid() && a.Is4() != p.Address.Is4():
			add("local_address", "local_address %s: not of the peer address's family", a)
		}
	}
	if p.EBGPMultihop > 0 && p.ASN == localASN {
		add("ebgp_multihop", "ebgp_multihop %d: only for eBGP peers (an iBGP session is not limited to one hop)", p.EBGPMultihop)
	}
	switch {
	case p.TTLSecurityHops > MaxTTLSecurityHops:
		add("ttl_security_hops", "ttl_security_hops %d: must be 1-%d", p.TTLSecurityHops, MaxTTLSecurityHops)
	case p.TTLSecurityHops > 0 && p.EBGPMultihop > 0:
		// GoBGP refuses the pair (AddPeer fails), and so does FRR.
		add("ttl_security_hops", "ttl_security_hops and ebgp_multihop exclude each other: with TTL security the packets leave with TTL 255, which reaches a router ttl_security_hops away; drop ebgp_multihop")
	}
	if p.BFD.Enabled && (p.EBGPMultihop > 1 || p.TTLSecurityHops > 1) {
		add("bfd", "bfd is single-hop BFD (RFC 5881), for a directly connected router: not with ebgp_multihop or ttl_security_hops above 1")
	}
}

// minTTL is the lowest TTL the kernel accepts on p's session with TTL
// security (RFC 5082 section 3: 255 for a directly connected neighbor, one
// less per hop), or 0 when TTL security is off.
func (p Peer) minTTL() uint8 {
	if p.TTLSecurityHops == 0 {
		return 0
	}
	return uint8(256 - int(p.TTLSecurityHops))
}

// sendTTL is the TTL of the packets GoBGP sends on p's session (0: the
// kernel's default), as GoBGP's setPeerConnTTL chooses it: 255 with TTL
// security, the multihop TTL (1 by default) for eBGP, the default for
// iBGP.
func (p Peer) sendTTL(localASN uint32) uint8 {
	switch {
	case p.TTLSecurityHops > 0:
		return 255
	case p.ASN == localASN:
		return 0
	case p.EBGPMultihop > 0:
		return p.EBGPMultihop
	default:
		return 1
	}
}

// applyHops sets p's local address, multihop and TTL security on peer.
func (p Peer) applyHops(peer *api.Peer) {
	if p.LocalAddress.IsValid() {
		peer.Transport = &api.Transport{LocalAddress: p.LocalAddress.String()}
	}
	if p.EBGPMultihop > 0 {
		peer.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.EBGPMultihop)}
	}
	if m := p.minTTL(); m > 0 {
		peer.TtlSecurity = &api.TtlSecurity{Enabled: true, TtlMin: uint32(m)}
	}
}

// hopsEqual reports whether a and b reach their neighbor the same way.
func hopsEqual(a, b Peer) bool {
	return a.LocalAddress == b.LocalAddress && a.EBGPMultihop == b.EBGPMultihop && a.TTLSecurityHops == b.TTLSecurityHops
}
