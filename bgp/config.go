package bgp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"
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
	// Logger receives the speaker's logs; GoBGP's own logs go to it at debug
	// level (warnings and errors keep their level). Nil means slog.Default().
	Logger *slog.Logger
}

// Validate returns every problem found in c, or nil.
func (c Config) Validate() []error {
	var errs []error
	if c.ASN == 0 {
		errs = append(errs, errors.New("asn: must not be 0"))
	}
	if !c.RouterID.IsValid() {
		errs = append(errs, errors.New("router_id: missing"))
	} else if !c.RouterID.Is4() {
		errs = append(errs, fmt.Errorf("router_id %s: must be an IPv4 address", c.RouterID))
	} else if c.RouterID.IsUnspecified() {
		errs = append(errs, fmt.Errorf("router_id %s: must not be unspecified", c.RouterID))
	}
	if c.ListenPort < -1 || c.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("listen_port %d: must be -1 (do not listen) or 1-65535", c.ListenPort))
	}
	for _, a := range c.ListenAddresses {
		if _, err := netip.ParseAddr(a); err != nil {
			errs = append(errs, fmt.Errorf("listen_addresses %q: %w", a, err))
		}
	}
	seen := make(map[netip.Addr]bool)
	for i, p := range c.Peers {
		name := fmt.Sprintf("peers[%d]", i)
		if !p.Address.IsValid() {
			errs = append(errs, fmt.Errorf("%s: address missing", name))
		} else {
			name = fmt.Sprintf("peer %s", p.Address)
			if p.Address.Zone() != "" || p.Address.Is4In6() || p.Address.IsUnspecified() || p.Address.IsMulticast() {
				errs = append(errs, fmt.Errorf("%s: address must be a unicast IPv4 or IPv6 address without zone", name))
			}
			if seen[p.Address] {
				errs = append(errs, fmt.Errorf("%s: listed twice", name))
			}
			seen[p.Address] = true
		}
		if p.ASN == 0 {
			errs = append(errs, fmt.Errorf("%s: asn must not be 0", name))
		}
		if p.HoldTime != 0 && p.HoldTime < MinHoldTime {
			errs = append(errs, fmt.Errorf("%s: hold_time %s: must be at least %s", name, p.HoldTime, MinHoldTime))
		}
		if p.HoldTime%time.Second != 0 {
			errs = append(errs, fmt.Errorf("%s: hold_time %s: must be whole seconds", name, p.HoldTime))
		}
		if p.HoldTime > 65535*time.Second {
			errs = append(errs, fmt.Errorf("%s: hold_time %s: must be at most 65535s", name, p.HoldTime))
		}
		if p.Keepalive < 0 || p.Keepalive%time.Second != 0 {
			errs = append(errs, fmt.Errorf("%s: keepalive %s: must be whole non-negative seconds", name, p.Keepalive))
		} else if p.Keepalive != 0 && p.Keepalive >= p.holdTime() {
			errs = append(errs, fmt.Errorf("%s: keepalive %s: must be shorter than hold time %s", name, p.Keepalive, p.holdTime()))
		}
		for _, s := range p.Communities {
			if _, err := ParseCommunity(s); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
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
