package l2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// errOtherPrefix reports that an IPv6 VIP is already configured on the
// interface with another prefix length, so its host prefix cannot be added.
var errOtherPrefix = errors.New("address configured with another prefix length")

// ifAddr is an address configured on an interface, with the attributes
// vipd sets on a VIP.
type ifAddr struct {
	prefix netip.Prefix
	attrs  addrAttrs
}

// addrAttrs are the attributes of an address, besides its prefix, that
// decide whether the kernel takes it as the source of the host's own
// connections.
type addrAttrs struct {
	// scope is the address scope, a unix.RT_SCOPE_* value.
	scope uint8
	// nodad: IFA_F_NODAD, the address skipped duplicate address detection.
	nodad bool
	// deprecated: IFA_F_DEPRECATED, an IPv6 address whose preferred
	// lifetime is over.
	deprecated bool
	// permanent: IFA_F_PERMANENT, the valid lifetime is forever.
	permanent bool
}

// vipAttrs returns the attributes vipd gives vip's host prefix, so that
// the kernel never chooses the VIP as the source address of the host's own
// connections while it still accepts traffic to it, answers ARP and
// neighbor solicitations for it, and replies from it:
//
//   - IPv4: scope host. The kernel picks an IPv4 source address among the
//     primary addresses of the outgoing interface whose scope is at most
//     the route's (link for on-link routes, global for routes via a
//     gateway), preferring one in the gateway's subnet and otherwise taking
//     the first in the list; a /32 VIP is a primary address of its own,
//     first in the list once the node's address is removed and added back
//     (a DHCP renewal, a network manager restart), and then the source for
//     every route without a preferred source. A host-scoped address is
//     never a candidate.
//   - IPv6: IFA_F_NODAD (usable at once) and deprecated: preferred
//     lifetime 0 with a valid lifetime of forever, so it never expires.
//     Source address selection (RFC 6724 rule 3) avoids a deprecated
//     address; without it a /128 VIP wins rule 8 (longest matching prefix,
//     which Linux caps at the address's prefix length) over the node's
//     /64 for every on-link and routed destination.
func vipAttrs(vip netip.Addr) addrAttrs {
	if vip.Is4() {
		return addrAttrs{scope: unix.RT_SCOPE_HOST, permanent: true}
	}
	return addrAttrs{scope: unix.RT_SCOPE_UNIVERSE, nodad: true, deprecated: true, permanent: true}
}

// asVIPAdds reports whether a, found on vip's host prefix, is what
// vipAttrs(vip) asks for in every attribute that matters once the address
// is up: the scope of an IPv4 VIP; for IPv6, deprecated and never expiring
// (IFA_F_NODAD only matters while the address is being added).
func (a addrAttrs) asVIPAdds(vip netip.Addr) bool {
	want := vipAttrs(vip)
	if vip.Is4() {
		return a.scope == want.scope
	}
	return a.scope == want.scope && a.deprecated && a.permanent
}

// findHostPrefix returns vip's host prefix as configured on the interface
// named iface, and whether it is there. A missing interface holds nothing.
func findHostPrefix(m addrManager, iface string, vip netip.Addr) (ifAddr, bool, error) {
	ifi, err := m.link(iface)
	if errors.Is(err, errNoLink) {
		return ifAddr{}, false, nil
	}
	if err != nil {
		return ifAddr{}, false, err
	}
	present, err := m.list(ifi)
	if err != nil {
		return ifAddr{}, false, fmt.Errorf("list addresses on %s: %w", ifi.Name, err)
	}
	host := hostPrefix(vip)
	for _, a := range present {
		if a.prefix == host {
			return a, true, nil
		}
	}
	return ifAddr{}, false, nil
}

// hasHostPrefix reports whether vip's host prefix is configured on the
// interface named iface, whatever its attributes. A missing interface
// holds nothing.
func hasHostPrefix(m addrManager, iface string, vip netip.Addr) (bool, error) {
	_, ok, err := findHostPrefix(m, iface, vip)
	return ok, err
}

// removeHostPrefix removes vip's host prefix from the interface named iface,
// and nothing else, and reports whether it was there. A missing interface
// or an absent address is not an error.
func removeHostPrefix(m addrManager, iface string, vip netip.Addr) (bool, error) {
	ifi, err := m.link(iface)
	if errors.Is(err, errNoLink) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	present, err := m.list(ifi)
	if err != nil {
		return false, fmt.Errorf("list addresses on %s: %w", ifi.Name, err)
	}
	host := hostPrefix(vip)
	for _, a := range present {
		if a.prefix != host {
			continue
		}
		if err := m.del(ifi, host); err != nil {
			return false, fmt.Errorf("delete %s from %s: %w", host, ifi.Name, err)
		}
		return true, nil
	}
	return false, nil
}

// RemoveAddress removes addr's host prefix (/32 or /128) from the interface
// named iface, in the calling thread's network namespace, and nothing else:
// the same IP with another prefix length, such as the host's own address,
// stays. It is idempotent, like Announcer.Withdraw, and meant for cleanup
// outside a running Announcer.
func RemoveAddress(iface string, addr netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("remove %s: %w", addr, err)
	}
	m, err := openNetlinkAddrs(iface)
	if err != nil {
		return fmt.Errorf("remove %s: %w", vip, err)
	}
	defer m.close()
	if _, err := removeHostPrefix(m, iface, vip); err != nil {
		return fmt.Errorf("remove %s: %w", vip, err)
	}
	return nil
}

// HasAddress reports whether addr's host prefix (/32 or /128) is configured
// on the interface named iface, in the calling thread's network namespace:
// what Announcer.Held reports, without an Announcer. The same IP with another
// prefix length does not count. A missing interface holds nothing and is not
// an error. Each call opens and closes a netlink socket.
func HasAddress(iface string, addr netip.Addr) (bool, error) {
	vip, err := vipAddr(addr)
	if err != nil {
		return false, fmt.Errorf("has address %s: %w", addr, err)
	}
	m, err := openNetlinkAddrs(iface)
	if err != nil {
		return false, fmt.Errorf("has address %s: %w", vip, err)
	}
	defer m.close()
	held, err := hasHostPrefix(m, iface, vip)
	if err != nil {
		return false, fmt.Errorf("has address %s: %w", vip, err)
	}
	return held, nil
}

// openNetlinkAddrs validates iface and opens an addrManager on a netlink
// socket in the calling thread's network namespace.
func openNetlinkAddrs(iface string) (*netlinkAddrs, error) {
	if iface == "" {
		return nil, errors.New("empty interface name")
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return &netlinkAddrs{h: h}, nil
}

// AddrChange is one address added to or removed from an interface, as the
// kernel reported it to WatchAddrs.
type AddrChange struct {
	// Index is the interface index.
	Index int
	// Interface is the interface name, looked up when the change arrived;
	// empty if the interface no longer existed by then.
	Interface string
	// Prefix is the address with its prefix length, e.g. 192.0.2.10/32.
	Prefix netip.Prefix
	// Added is true for an address added, false for one removed. The kernel
	// reports a change of an address's flags or lifetimes (such as an IPv6
	// address leaving the tentative state) as another addition.
	Added bool
}

// WatchAddrs calls changed, from the calling goroutine, for each address
// added to or removed from any interface in the calling thread's network
// namespace, including the removals behind vipd's back (`ip addr del`, `ip
// addr flush`, NetworkManager). Treat it as a wake-up: the kernel does not
// report the state before the subscription started, so read the addresses
// themselves (Announcer.Held, HasAddress) to decide what to do.
//
// WatchAddrs blocks until ctx is done, then returns nil, or until the
// subscription fails (the kernel dropped it, say after a receive buffer
// overrun), then returns the error; a caller that still needs events calls
// it again. changed should return quickly.
func WatchAddrs(ctx context.Context, changed func(AddrChange)) error {
	if changed == nil {
		return errors.New("watch addresses: nil callback")
	}
	// The handle names interfaces; open it beside the subscription so both
	// are in the calling thread's namespace.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("watch addresses: open netlink: %w", err)
	}
	defer h.Close()
	s := newSubscription[netlink.AddrUpdate]()
	if err := netlink.AddrSubscribeWithOptions(s.ch, s.done, netlink.AddrSubscribeOptions{ErrorCallback: s.onError}); err != nil {
		s.stop()
		return fmt.Errorf("subscribe to address changes: %w", err)
	}
	name := func(index int) string {
		l, err := h.LinkByIndex(index)
		if err != nil {
			return ""
		}
		return l.Attrs().Name
	}
	return s.run(ctx, "address change", func(u netlink.AddrUpdate) error {
		if c, ok := addrChange(u, name); ok {
			changed(c)
		}
		return nil
	})
}

// addrChange converts a netlink address update, naming its interface with
// name. It reports false for an update without a valid address.
func addrChange(u netlink.AddrUpdate, name func(index int) string) (AddrChange, bool) {
	ip, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok {
		return AddrChange{}, false
	}
	ones, bits := u.LinkAddress.Mask.Size()
	if bits == 128 && ip.Is4In6() {
		ones -= 96
	}
	ip = ip.Unmap()
	if bits == 0 || ones < 0 || ones > ip.BitLen() {
		return AddrChange{}, false
	}
	return AddrChange{
		Index:     u.LinkIndex,
		Interface: name(u.LinkIndex),
		Prefix:    netip.PrefixFrom(ip, ones),
		Added:     u.NewAddr,
	}, true
}
