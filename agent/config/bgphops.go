package config

import (
	"fmt"
	"net/netip"
)

// readPeerHops reads how the router of [[bgp.peer]] p (at path, such as
// "bgp.peer[0]") is reached (local_address, ebgp_multihop,
// ttl_security_hops) and the path attributes sent to it (med,
// local_pref) into peer. The bgp package checks the rest (multihop only
// for eBGP, not with TTL security, LOCAL_PREF only to iBGP peers).
func (v *validator) readPeerHops(path string, pr *BGPPeerConfig, peer *BGPPeer) {
	if pr.LocalAddress != "" {
		if a, err := netip.ParseAddr(pr.LocalAddress); err != nil {
			v.at(path+".local_address", "invalid local_address %q: this node's address the session starts from", pr.LocalAddress)
		} else {
			peer.LocalAddress = a.Unmap()
		}
	}
	// Zero is the speaker's "off" for both: written, it is refused.
	if pr.EBGPMultihop != nil {
		if n := *pr.EBGPMultihop; n < 1 || n > 255 {
			v.at(path+".ebgp_multihop", "ebgp_multihop must be 1-255, got %d", n)
		} else {
			peer.EBGPMultihop = uint8(n)
		}
	}
	if pr.TTLSecurityHops != nil {
		if n := *pr.TTLSecurityHops; n < 1 || n > maxTTLSecurityHops {
			v.at(path+".ttl_security_hops", "ttl_security_hops must be 1-%d, got %d", maxTTLSecurityHops, n)
		} else {
			peer.TTLSecurityHops = uint8(n)
		}
	}
	peer.Attrs = BGPAttrs{MED: pr.MED, LocalPref: pr.LocalPref}
}

// checkVIPAttrs refuses med and local_pref on a VIP that is not announced
// by BGP; the bgp package checks them on the others.
func (v *validator) checkVIPAttrs(c *Config) {
	for i, vip := range c.VIPs {
		if vip.Mode == ModeBGP {
			continue
		}
		p := fmt.Sprintf("vip[%d]", i)
		for _, k := range []struct {
			key string
			set bool
		}{{"med", vip.MED != nil}, {"local_pref", vip.LocalPref != nil}} {
			if k.set {
				v.at(p+"."+k.key, "vip %q: %s needs mode %q (it is a BGP path attribute)", vip.Name, k.key, ModeBGP)
			}
		}
	}
}

// vipAttrs returns the path attributes of the bgp VIPs that set any, by
// address (nil when none does).
func vipAttrs(vips []VIPConfig) map[netip.Addr]BGPAttrs {
	var m map[netip.Addr]BGPAttrs
	for _, vip := range vips {
		a := BGPAttrs{MED: vip.MED, LocalPref: vip.LocalPref}
		if vip.Mode != ModeBGP || !vip.addr.IsValid() || a.IsZero() {
			continue
		}
		if m == nil {
			m = map[netip.Addr]BGPAttrs{}
		}
		m[vip.addr] = a
	}
	return m
}

// checkLocalAddresses warns about a peer's local_address that is not an
// address of this host (owned: the host's addresses): the kernel refuses
// to bind it, and the session cannot start until it is added.
func (v *validator) checkLocalAddresses(peers []BGPPeer, owned map[netip.Addr]string) {
	for i, p := range peers {
		if a := p.LocalAddress; a.IsValid() {
			if _, ok := owned[a]; !ok {
				v.at(fmt.Sprintf("bgp.peer[%d].local_address", i), "bgp.peer[%d].local_address %s is not an address of this host (yet): the session with %s cannot start from it until it is (a loopback address: ip addr add %s/%d dev lo)", i, a, p.Address, a, a.BitLen())
			}
		}
	}
}
