package bgp

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/vipd/vipd/bfd"
)

// Defaults applied by New and Reconfigure to zero-valued fields.
const (
	// DefaultHoldTime is the hold time proposed to a peer when Peer.HoldTime is zero.
	DefaultHoldTime = 90 * time.Second
	// MinHoldTime is the smallest non-zero hold time BGP allows (RFC 4271 section 4.2).
	MinHoldTime = 3 * time.Second
	// DefaultListenPort is used when Config.ListenPort is zero: do not listen, the
	// speaker initiates every session.
	DefaultListenPort = -1
	// DefaultMaxPrefixes is the prefix limit of a peer whose MaxPrefixes is
	// zero.
	DefaultMaxPrefixes = 100
	// DefaultBFDMinInterval is the BFD interval when BFD.MinInterval is zero.
	DefaultBFDMinInterval = 300 * time.Millisecond
	// MinBFDInterval is the smallest BFD interval allowed.
	MinBFDInterval = 50 * time.Millisecond
	// DefaultBFDMultiplier is the BFD detect multiplier when BFD.Multiplier
	// is zero.
	DefaultBFDMultiplier = 3
	// MaxRestartTime is the largest GracefulRestart.RestartTime: the
	// capability carries it in 12 bits of seconds (RFC 4724 section 3).
	MaxRestartTime = 4095 * time.Second
	// MaxLongLivedStaleTime is the largest
	// GracefulRestart.LongLivedStaleTime: 24 bits of seconds (RFC 9494
	// section 3).
	MaxLongLivedStaleTime = (1<<24 - 1) * time.Second
)

// GracefulShutdown is the well-known GRACEFUL_SHUTDOWN community 65535:0
// (RFC 8326) that Drain adds to an announcement.
const GracefulShutdown uint32 = 0xFFFF0000

// Peer is one BGP neighbor the speaker connects to.
type Peer struct {
	// Address is the neighbor's address; the session uses the address family
	// of Address, and only routes of that family are sent over it (IPv4 VIPs
	// to IPv4 peers, IPv6 VIPs to IPv6 peers).
	Address netip.Addr
	// ASN is the neighbor's autonomous system number; equal to Config.ASN
	// makes the session iBGP.
	ASN uint32
	// Password enables TCP MD5 signatures (RFC 2385) when not empty.
	Password string
	// HoldTime is the hold time proposed in OPEN. Zero means DefaultHoldTime;
	// otherwise it must be at least MinHoldTime.
	HoldTime time.Duration
	// Keepalive is the keepalive interval. Zero means HoldTime/3.
	Keepalive time.Duration
	// Communities are standard communities "asn:value" (each part 0-65535)
	// added to every announcement sent to this peer.
	Communities []string
	// MaxPrefixes is how many prefixes the neighbor may send before the
	// session is closed (CEASE "maximum number of prefixes reached",
	// retried after the idle hold time). Nothing received is used: the
	// limit bounds the memory a misbehaving router can take. Zero means
	// DefaultMaxPrefixes.
	MaxPrefixes uint32
	// BFD runs a BFD session with the neighbor.
	BFD BFD
	// LocalAddress is the session's source address, such as this host's
	// loopback address that the router peers with; the zero value lets
	// the kernel choose by route. It is also the next hop of the routes
	// sent (next hop self): the router needs a route to it.
	LocalAddress netip.Addr
	// EBGPMultihop is the TTL of the packets sent to an eBGP neighbor: how
	// many routed hops away it may be. Zero means 1, a directly connected
	// neighbor (GoBGP's, FRR's and BIRD's default for eBGP). Only for eBGP
	// peers (iBGP sessions are not limited), and not with
	// TTLSecurityHops.
	EBGPMultihop uint8
	// TTLSecurityHops turns on the Generalized TTL Security Mechanism
	// (RFC 5082): packets are sent with TTL 255 and the kernel drops
	// received packets whose TTL is below 256 - TTLSecurityHops, so
	// nothing more hops away (a spoofer, a router further off) reaches
	// the session. 1 is a directly connected neighbor; at most
	// MaxTTLSecurityHops. Zero turns it off. It covers a neighbor that
	// many hops away, so EBGPMultihop must be zero with it.
	TTLSecurityHops uint8
	// Attrs are path attributes of every route sent to this neighbor; a
	// VIP's own (Config.VIPAttrs) replace them for that VIP's route.
	Attrs Attrs
}

// BFD configures single-hop BFD (RFC 5880, RFC 5881) toward a peer. When the
// BFD session goes from Up to Down (unless the neighbor took it
// administratively down), the BGP session is closed at once, and it is
// opened again when BFD is Up again. Stop sends AdminDown first.
type BFD struct {
	// Enabled turns BFD on for the peer.
	Enabled bool
	// MinInterval is the desired minimum TX and required minimum RX
	// interval. Zero means DefaultBFDMinInterval; otherwise at least
	// MinBFDInterval.
	MinInterval time.Duration
	// Multiplier is the detect multiplier. Zero means DefaultBFDMultiplier.
	Multiplier uint8
}

// Config configures a Speaker.
type Config struct {
	// ASN is the local autonomous system number; it must not be zero.
	ASN uint32
	// RouterID is the BGP identifier; it must be an IPv4 address.
	RouterID netip.Addr
	// ListenPort is the TCP port to accept sessions on. -1 means do not listen
	// (the speaker initiates); zero means DefaultListenPort.
	ListenPort int32
	// ListenAddresses restricts the listening sockets to these addresses.
	// Empty means all addresses. Ignored when not listening.
	ListenAddresses []string
	// Peers are the neighbors to connect to.
	Peers []Peer
	// VIPs are the addresses Announce and Drain accept. The export policy
	// sends their host routes (/32, /128), originated here, and nothing
	// else; everything received is rejected on import.
	VIPs []netip.Addr
	// VIPAttrs are path attributes of single VIPs' routes, sent to every
	// peer: an attribute set here replaces the peer's (Peer.Attrs) for
	// that route. Every key must be one of VIPs.
	VIPAttrs map[netip.Addr]Attrs
	// GracefulRestart asks the routers to keep this speaker's routes while
	// the process restarts. The zero value turns it off.
	GracefulRestart GracefulRestart
	// Logger receives the speaker's logs; GoBGP's own logs go to it at debug
	// level (warnings and errors keep their level). Nil means slog.Default().
	Logger *slog.Logger
}

// GracefulRestart configures BGP graceful restart (RFC 4724) and, on top of
// it, long-lived graceful restart (RFC 9494), as the restarting speaker:
// the speaker sends the Graceful Restart capability, and a router that
// sends it too (FRR and BIRD do by default, as helpers) keeps this
// speaker's routes, marked stale, when the session ends without a
// NOTIFICATION: the process exited (Detach) or crashed. Stop still ends
// every session with a CEASE, and routers drop the routes at once.
//
// When the session comes back, the router keeps the stale routes until
// this speaker's End-of-RIB if the new speaker said it kept its
// forwarding state (the F bit): Resume does, and sends the held routes
// before that End-of-RIB, so the routes never leave the router's table.
// Start does not: a speaker started after a crash makes the routers drop
// the stale routes as soon as its session is up.
//
// Routers prefer a stale route like any other (RFC 4724 does not lower
// it): after a crash, traffic keeps going to this host until the session
// comes back or RestartTime passes, even when another node announces the
// VIP meanwhile. Keep RestartTime short. Long-lived stale routes (after
// RestartTime, for LongLivedStaleTime) carry the LLGR_STALE community and
// are the least preferred (RFC 9494 section 4.3): any other node's route
// wins at once, and the stale one serves only when there is none.
type GracefulRestart struct {
	// RestartTime is the Restart Time of the capability: how long a router
	// waits for the session to come back before it drops the stale routes.
	// Zero turns graceful restart off (no capability is sent). Whole
	// seconds, at most MaxRestartTime.
	RestartTime time.Duration
	// LongLivedStaleTime adds the Long-lived Graceful Restart capability
	// for every family: a router that supports it keeps the routes this
	// much longer after RestartTime, least preferred. Zero turns it off;
	// it needs RestartTime. Whole seconds, at most MaxLongLivedStaleTime.
	LongLivedStaleTime time.Duration
}

// Enabled reports whether the speaker sends the Graceful Restart
// capability.
func (g GracefulRestart) Enabled() bool { return g.RestartTime > 0 }

// validate reports every problem found in g to add (field, message).
func (g GracefulRestart) validate(add func(field, format string, args ...any)) {
	switch {
	case g.RestartTime < 0 || g.RestartTime%time.Second != 0:
		add("graceful_restart_time", "graceful_restart_time %s: must be whole non-negative seconds", g.RestartTime)
	case g.RestartTime > MaxRestartTime:
		add("graceful_restart_time", "graceful_restart_time %s: must be at most %s (12 bits of seconds)", g.RestartTime, MaxRestartTime)
	}
	switch {
	case g.LongLivedStaleTime < 0 || g.LongLivedStaleTime%time.Second != 0:
		add("long_lived_stale_time", "long_lived_stale_time %s: must be whole non-negative seconds", g.LongLivedStaleTime)
	case g.LongLivedStaleTime > MaxLongLivedStaleTime:
		add("long_lived_stale_time", "long_lived_stale_time %s: must be at most %s (24 bits of seconds)", g.LongLivedStaleTime, MaxLongLivedStaleTime)
	case g.LongLivedStaleTime > 0 && g.RestartTime <= 0:
		add("long_lived_stale_time", "long_lived_stale_time %s: needs graceful_restart_time (long-lived graceful restart extends graceful restart)", g.LongLivedStaleTime)
	}
}

// MaxPrefixesLimit is the largest Peer.MaxPrefixes allowed.
const MaxPrefixesLimit = 1000000

// FieldError is one problem Validate found. It names the field it is about,
// so that a caller that read the configuration from a file can place it
// there.
type FieldError struct {
	// Field is the field as vipd's configuration spells it: "asn",
	// "router_id", "listen_port", "listen_addresses",
	// "graceful_restart_time", "long_lived_stale_time"; "peer.address",
	// "peer.asn", "peer.hold_time", "peer.keepalive", "peer.communities",
	// "peer.max_prefixes", "peer.bfd_min_interval", "peer.bfd",
	// "peer.local_address", "peer.ebgp_multihop",
	// "peer.ttl_security_hops", "peer.med", "peer.local_pref" for a field
	// of a Peer; "vip" for an address of Config.VIPs, "vip.med" and
	// "vip.local_pref" for its Config.VIPAttrs; "vip_attrs" for a key of
	// Config.VIPAttrs that is not in Config.VIPs.
	Field string
	// Index is the position in Config.Peers (a "peer." field) or
	// Config.VIPs ("vip") of the element the problem is about; -1 for a
	// field of Config itself.
	Index int
	// Err says what is wrong.
	Err error
	// who names the peer in Error ("peer 192.0.2.1", "peers[0]"); empty
	// for any other field.
	who string
}

// Error returns the problem, prefixed with the peer it is about.
func (e *FieldError) Error() string {
	if e.who == "" {
		return e.Err.Error()
	}
	return e.who + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// Validate returns every problem found in c, or nil. Each is a *FieldError.
func (c Config) Validate() []error {
	var errs []error
	add := func(field string, index int, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Index: index, Err: fmt.Errorf(format, args...)})
	}
	if c.ASN == 0 {
		add("asn", -1, "asn: must not be 0")
	}
	if !c.RouterID.IsValid() {
		add("router_id", -1, "router_id: missing")
	} else if !c.RouterID.Is4() {
		add("router_id", -1, "router_id %s: must be an IPv4 address", c.RouterID)
	} else if c.RouterID.IsUnspecified() {
		add("router_id", -1, "router_id %s: must not be unspecified", c.RouterID)
	}
	if c.ListenPort < -1 || c.ListenPort > 65535 {
		add("listen_port", -1, "listen_port %d: must be -1 (do not listen) or 1-65535", c.ListenPort)
	}
	for _, a := range c.ListenAddresses {
		if _, err := netip.ParseAddr(a); err != nil {
			add("listen_addresses", -1, "listen_addresses %q: %w", a, err)
		}
	}
	seen := make(map[netip.Addr]bool)
	for i, p := range c.Peers {
		who := fmt.Sprintf("peers[%d]", i)
		peerErr := func(field, format string, args ...any) {
			errs = append(errs, &FieldError{Field: "peer." + field, Index: i, Err: fmt.Errorf(format, args...), who: who})
		}
		if !p.Address.IsValid() {
			peerErr("address", "address missing")
		} else {
			who = fmt.Sprintf("peer %s", p.Address)
			if p.Address.Zone() != "" || p.Address.Is4In6() || p.Address.IsUnspecified() || p.Address.IsMulticast() {
				peerErr("address", "address must be a unicast IPv4 or IPv6 address without zone")
			}
			if seen[p.Address] {
				peerErr("address", "listed twice")
			}
			seen[p.Address] = true
		}
		if p.ASN == 0 {
			peerErr("asn", "asn must not be 0")
		}
		if p.HoldTime != 0 && p.HoldTime < MinHoldTime {
			peerErr("hold_time", "hold_time %s: must be at least %s", p.HoldTime, MinHoldTime)
		}
		if p.HoldTime%time.Second != 0 {
			peerErr("hold_time", "hold_time %s: must be whole seconds", p.HoldTime)
		}
		if p.HoldTime > 65535*time.Second {
			peerErr("hold_time", "hold_time %s: must be at most 65535s", p.HoldTime)
		}
		if p.Keepalive < 0 || p.Keepalive%time.Second != 0 {
			peerErr("keepalive", "keepalive %s: must be whole non-negative seconds", p.Keepalive)
		} else if p.Keepalive != 0 && p.Keepalive >= p.holdTime() {
			peerErr("keepalive", "keepalive %s: must be shorter than hold time %s", p.Keepalive, p.holdTime())
		}
		for _, s := range p.Communities {
			if _, err := ParseCommunity(s); err != nil {
				peerErr("communities", "%w", err)
			}
		}
		if p.MaxPrefixes > MaxPrefixesLimit {
			peerErr("max_prefixes", "max_prefixes %d: must be at most %d", p.MaxPrefixes, MaxPrefixesLimit)
		}
		if p.BFD.MinInterval != 0 && p.BFD.MinInterval < MinBFDInterval {
			peerErr("bfd_min_interval", "bfd_min_interval %s: must be at least %s", p.BFD.MinInterval, MinBFDInterval)
		}
		if p.BFD.MinInterval%time.Millisecond != 0 {
			peerErr("bfd_min_interval", "bfd_min_interval %s: must be whole milliseconds", p.BFD.MinInterval)
		}
		p.validateHops(c.ASN, peerErr)
		p.Attrs.validate(p.ASN == c.ASN, peerErr)
	}
	c.GracefulRestart.validate(func(field, format string, args ...any) { add(field, -1, format, args...) })
	vips := make(map[netip.Addr]bool)
	for i, a := range c.VIPs {
		if _, err := hostPrefix(a); err != nil {
			add("vip", i, "vip: %w", err)
		} else if vips[a.Unmap()] {
			add("vip", i, "vip %s: listed twice", a)
		}
		vips[a.Unmap()] = true
	}
	c.validateVIPAttrs(func(field string, index int, format string, args ...any) { add(field, index, format, args...) })
	return errs
}

// ParseCommunity parses a standard BGP community "asn:value" where both parts
// are decimal numbers 0-65535, and returns it as the 32-bit wire value.
func ParseCommunity(s string) (uint32, error) {
	hi, lo, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("community %q: want asn:value", s)
	}
	a, err := strconv.ParseUint(hi, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("community %q: asn part must be 0-65535", s)
	}
	v, err := strconv.ParseUint(lo, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("community %q: value part must be 0-65535", s)
	}
	return uint32(a)<<16 | uint32(v), nil
}

// FormatCommunity formats a 32-bit community value as "asn:value".
func FormatCommunity(c uint32) string {
	return fmt.Sprintf("%d:%d", c>>16, c&0xFFFF)
}

func (p Peer) holdTime() time.Duration {
	if p.HoldTime == 0 {
		return DefaultHoldTime
	}
	return p.HoldTime
}

func (p Peer) keepalive() time.Duration {
	if p.Keepalive == 0 {
		return (p.holdTime() / 3).Truncate(time.Second)
	}
	return p.Keepalive
}

func (p Peer) maxPrefixes() uint32 {
	if p.MaxPrefixes == 0 {
		return DefaultMaxPrefixes
	}
	return p.MaxPrefixes
}

// bfdSession returns the BFD session configuration of p (Enabled false:
// none).
func (p Peer) bfdSession() (bfd.SessionConfig, bool) {
	if !p.BFD.Enabled {
		return bfd.SessionConfig{}, false
	}
	c := bfd.SessionConfig{Peer: p.Address, Local: p.LocalAddress, MinInterval: p.BFD.MinInterval, Multiplier: p.BFD.Multiplier}
	if c.MinInterval == 0 {
		c.MinInterval = DefaultBFDMinInterval
	}
	if c.Multiplier == 0 {
		c.Multiplier = DefaultBFDMultiplier
	}
	return c, true
}

func (c Config) listenPort() int32 {
	if c.ListenPort == 0 {
		return DefaultListenPort
	}
	return c.ListenPort
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}
