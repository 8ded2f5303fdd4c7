package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"strings"
	"time"
)

// BGPSpeaker is the [bgp] section as typed values, with the addresses of
// the VIPs with mode "bgp": what the daemon's BGP speaker is built from
// (backendconfig.Speaker copies it into the bgp package's Config, field by
// field). A zero value is the speaker's default, as in the bgp package.
type BGPSpeaker struct {
	// ASN is bgp.asn.
	ASN uint32
	// RouterID is bgp.router_id, or cluster.bind_address when it is IPv4.
	RouterID netip.Addr
	// ListenPort is bgp.listen_port (-1: do not listen).
	ListenPort int32
	// Peers are the [[bgp.peer]] sections, in file order.
	Peers []BGPPeer
	// VIPs are the addresses of the VIPs with mode "bgp", in file order.
	VIPs []netip.Addr
	// VIPAttrs are the med and local_pref of the bgp VIPs that set any,
	// by address (nil when none does).
	VIPAttrs map[netip.Addr]BGPAttrs
	// GracefulRestartTime is bgp.graceful_restart_time (0: off).
	GracefulRestartTime time.Duration
	// LongLivedStaleTime is bgp.long_lived_stale_time (0: off).
	LongLivedStaleTime time.Duration
}

// BGPPeer is one [[bgp.peer]] as typed values (0: the speaker's default).
type BGPPeer struct {
	Address     netip.Addr
	ASN         uint32
	Password    string // read from password_file
	HoldTime    time.Duration
	Keepalive   time.Duration
	Communities []string
	MaxPrefixes uint32
	// BFD, BFDMinInterval and BFDMultiplier are bfd, bfd_min_interval
	// and bfd_multiplier.
	BFD             bool
	BFDMinInterval  time.Duration
	BFDMultiplier   uint8
	LocalAddress    netip.Addr
	EBGPMultihop    uint8
	TTLSecurityHops uint8
	// Attrs are the peer's med and local_pref.
	Attrs BGPAttrs
}

// BGPAttrs are the path attributes med and local_pref (nil: not set).
type BGPAttrs struct {
	MED       *uint32
	LocalPref *uint32
}

// IsZero reports whether a sets no attribute.
func (a BGPAttrs) IsZero() bool { return a.MED == nil && a.LocalPref == nil }

// FieldError is a problem a backend's rules (BackendRules) found in what
// it takes. Field names the field as the file spells it within its
// section ("asn", "peer.hold_time"; "vip" for an address of
// BGPSpeaker.VIPs, "vip.med"; "" for the section as a whole), and Index
// the peer or VIP it is in (-1: the section itself); Parse places it at
// that key.
type FieldError struct {
	Field string
	Index int
	// Err says what is wrong.
	Err error
}

// Limits of the speaker that the conversion of a [[bgp.peer]] needs (a
// written value out of range is refused before it is narrowed). They are
// the bgp package's MaxPrefixesLimit and MaxTTLSecurityHops, which
// TestSpeakerLimits checks they equal.
const (
	maxPrefixesLimit   = 1000000
	maxTTLSecurityHops = 254
)

// checkBGP reads the [bgp] section into the BGPSpeaker the daemon's
// speaker is built from, then checks it with the speaker's rules
// (v.rules.BGP: the bgp package's ranges, whole seconds, a keepalive
// shorter than the hold time, communities, BFD limits, peers listed
// twice), placed here at the key they are about. What is checked here is
// only what the conversion needs: values that parse, and the keys whose
// zero the bgp package would take for its default.
func (v *validator) checkBGP(c *Config) {
	b, cl := c.BGP, &c.Cluster
	sc := BGPSpeaker{ASN: b.ASN}
	if !v.written("bgp.asn") {
		v.at("bgp", "bgp.asn is required: this node's AS number (a private one, 64512-65534, when the routers are yours; docs/bgp.md)")
		v.placed["bgp.asn"] = true
	}
	switch {
	case b.RouterID != "":
		a, err := netip.ParseAddr(b.RouterID)
		if err != nil {
			v.at("bgp.router_id", "router_id must be an IPv4 address, got %q", b.RouterID)
		}
		sc.RouterID = a
	case cl.bindAddr.Is4():
		sc.RouterID = cl.bindAddr
	default:
		v.at("bgp.router_id", "bgp.router_id is required when cluster.bind_address is not IPv4")
	}
	switch lp := *b.ListenPort; {
	case lp == 0 || lp < math.MinInt32 || lp > math.MaxInt32:
		// Zero would be the speaker's default (-1), not a port.
		v.at("bgp.listen_port", "listen_port must be -1 or 1-65535, got %d", lp)
	default:
		sc.ListenPort = int32(lp)
	}
	if b.GracefulShutdown == "0s" || b.GracefulShutdown == "0" {
		b.gracefulShutdown = 0
	} else {
		b.gracefulShutdown, _ = v.duration("bgp.graceful_shutdown", b.GracefulShutdown)
	}
	// Zero is off for both; the bgp package checks the rest (whole
	// seconds, the capability's limits, long-lived needs graceful
	// restart).
	for _, k := range []struct {
		path, s string
		d       *time.Duration
	}{{"bgp.graceful_restart_time", b.GracefulRestartTime, &sc.GracefulRestartTime},
		{"bgp.long_lived_stale_time", b.LongLivedStaleTime, &sc.LongLivedStaleTime}} {
		if k.s != "0s" && k.s != "0" {
			*k.d, _ = v.duration(k.path, k.s)
		}
	}
	if len(b.Peers) == 0 {
		v.at("bgp", "bgp needs at least one [[bgp.peer]]")
	}
	for i := range b.Peers {
		pr := &b.Peers[i]
		p := fmt.Sprintf("bgp.peer[%d]", i)
		peer := BGPPeer{ASN: pr.ASN, Communities: pr.Communities, BFD: pr.BFD}
		if a, err := netip.ParseAddr(pr.Address); err != nil || pr.Address == "" {
			v.at(p+".address", "invalid peer address %q", pr.Address)
		} else {
			peer.Address = a.Unmap()
			if peer.Address == cl.bindAddr {
				v.at(p+".address", "%s.address %s is this node's cluster.bind_address: list the routers this node peers with, not the node", p, peer.Address)
			}
		}
		peer.HoldTime, _ = v.duration(p+".hold_time", pr.HoldTime)
		peer.Keepalive, _ = v.duration(p+".keepalive", pr.Keepalive)
		peer.BFDMinInterval, _ = v.duration(p+".bfd_min_interval", pr.BFDMinInterval)
		if pr.PasswordFile != "" {
			pw, err := readSecretFile(pr.PasswordFile)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				f := pr.PasswordFile
				v.at(p+".password_file", "password_file %v: write the router's password to it (umask 077; printf '%%s' PASSWORD > %s), then chown vipd %s", err, f, f)
			case err != nil:
				v.at(p+".password_file", "password_file %v", err)
			}
			peer.Password = pw
		}
		// Zero is the speaker's default for both: written, it is refused.
		if pr.MaxPrefixes != nil {
			switch n := *pr.MaxPrefixes; {
			case n < 1:
				v.at(p+".max_prefixes", "max_prefixes must be at least 1, got %d", n)
			case n > math.MaxUint32:
				v.at(p+".max_prefixes", "max_prefixes %d: must be at most %d", n, maxPrefixesLimit)
			default:
				peer.MaxPrefixes = uint32(n)
			}
		}
		if pr.BFDMultiplier != nil {
			if n := *pr.BFDMultiplier; n < 1 || n > math.MaxUint8 {
				v.at(p+".bfd_multiplier", "bfd_multiplier must be 1-255, got %d", n)
			} else {
				peer.BFDMultiplier = uint8(n)
			}
		}
		v.readPeerHops(p, pr, &peer)
		sc.Peers = append(sc.Peers, peer)
	}
	// The VIPs are checked with the section (bgp refuses addresses it
	// cannot route, such as link-local ones); vipIndex maps their place
	// in sc.VIPs back to c.VIPs.
	b.speaker = sc
	var vipIndex []int
	for i, vip := range c.VIPs {
		if vip.Mode == ModeBGP && vip.addr.IsValid() {
			sc.VIPs = append(sc.VIPs, vip.addr)
			vipIndex = append(vipIndex, i)
		}
	}
	sc.VIPAttrs = vipAttrs(c.VIPs)
	if v.rules.BGP == nil {
		return
	}
	for _, fe := range v.rules.BGP(sc) {
		path := "bgp"
		switch field, inPeer := strings.CutPrefix(fe.Field, "peer."); {
		case fe.Field == "":
		case inPeer && fe.Index >= 0:
			path = fmt.Sprintf("bgp.peer[%d].%s", fe.Index, field)
		case fe.Field == "vip" && fe.Index >= 0 && fe.Index < len(vipIndex):
			path = fmt.Sprintf("vip[%d].address", vipIndex[fe.Index])
		case strings.HasPrefix(fe.Field, "vip.") && fe.Index >= 0 && fe.Index < len(vipIndex):
			path = fmt.Sprintf("vip[%d].%s", vipIndex[fe.Index], strings.TrimPrefix(fe.Field, "vip."))
		default:
			path = "bgp." + fe.Field
		}
		// A key that has a problem already would be reported again for
		// the zero value left in its place.
		if !v.placed[path] {
			v.at(path, "bgp: %v", fe.Err)
		}
	}
}
