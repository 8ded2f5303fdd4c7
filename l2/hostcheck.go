package l2

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A HostWarning is a setting of the host that keeps an L2 VIP from working,
// found by CheckHost.
type HostWarning struct {
	// Sysctl names the kernel setting to change, as sysctl(8) and
	// sysctl.d(5) take it ("net.ipv4.conf.eth0.arp_ignore"; an interface
	// name with a dot is written with slashes:
	// "net/ipv4/conf/bond0.100/arp_ignore"). Empty when the fix is not a
	// sysctl.
	Sysctl string
	// Value is the value to set Sysctl to.
	Value string
	// Problem says what is wrong and what it breaks.
	Problem string
}

// String returns the warning as one line: the problem and, for a sysctl,
// the command that fixes it.
func (w HostWarning) String() string {
	if w.Sysctl == "" {
		return w.Problem
	}
	return fmt.Sprintf("%s: set %s = %s (sysctl -w %s=%s, and in /etc/sysctl.d/ to keep it)", w.Problem, w.Sysctl, w.Value, w.Sysctl, w.Value)
}

// hostReader is what CheckHost reads from the host; tests use a fake.
type hostReader interface {
	// sysctl returns the value of the setting at path under /proc/sys
	// ("net/ipv4/conf/eth0/arp_ignore"); the error wraps fs.ErrNotExist
	// when there is no such setting.
	sysctl(path string) (string, error)
	// prefixes returns the addresses configured on the interface named
	// iface; the error wraps errNoLink when it does not exist.
	prefixes(iface string) ([]netip.Prefix, error)
	// defaultRoutes returns the names of the interfaces the IPv4 default
	// routes of the main table leave by (one per next hop).
	defaultRoutes() ([]string, error)
}

// CheckHost reads the settings of this host, in the calling thread's network
// namespace, that decide whether the L2 VIP addr works on the interface named
// iface, and returns a warning for each one that keeps it from working. Each
// finding comes from a test in network namespaces (the l2 tests and
// docs/install.md, "What vipd does to the host's addresses"):
//
//   - arp_ignore (the larger of net.ipv4.conf.all and the interface's): 8
//     answers no ARP request; 3 none for a scope host address, which is how
//     Announce adds an IPv4 VIP; 2 none from a host outside the subnets of
//     the interface, which is every host when the VIP is outside them. Set 1
//     (or 0).
//   - rp_filter (the larger of all and the interface's): 1, strict, drops a
//     packet to the VIP whose route back leaves by another interface: any
//     client beyond the interface's own subnets when the IPv4 default route
//     leaves by another interface. Set the interface's to 2 (loose).
//   - disable_ipv6 on the interface, or IPv6 off in the kernel: an IPv6 VIP
//     cannot be added.
//   - a VIP outside every prefix on its interface: hosts on that link do
//     not ARP or solicit for it, so only a router with a route to it
//     reaches it.
//
// arp_announce (0, 1, 2) and accept_dad (0, 1, 2; the VIP is added without
// duplicate address detection) were tested and change nothing for the VIP.
// A missing interface is an error wrapping the lookup's; the caller says so
// on its own terms.
func CheckHost(iface string, addr netip.Addr) ([]HostWarning, error) {
	vip, err := vipAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("check host for %s: %w", addr, err)
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("check host for %s: open netlink: %w", vip, err)
	}
	defer h.Close()
	ws, err := checkHost(kernelHost{h}, iface, vip)
	if err != nil {
		return nil, fmt.Errorf("check host for %s on %s: %w", vip, iface, err)
	}
	return ws, nil
}

// checkHost is CheckHost on r.
func checkHost(r hostReader, iface string, vip netip.Addr) ([]HostWarning, error) {
	prefixes, err := r.prefixes(iface)
	if err != nil {
		return nil, err
	}
	var ws []HostWarning
	outside := outsidePrefixes(prefixes, vip)
	if outside {
		var own []string
		for _, p := range prefixes {
			if p.Addr().Is4() == vip.Is4() && !p.Addr().IsLinkLocalUnicast() && p != hostPrefix(vip) {
				own = append(own, p.String())
			}
		}
		ws = append(ws, HostWarning{Problem: fmt.Sprintf("%s is outside every prefix on %s (%s): hosts on that link will not ARP or solicit for it, so only a router with a route to it reaches it",
			vip, iface, joinOrNone(own))})
	}
	if vip.Is4() {
		w, err := checkARPIgnore(r, iface, vip, outside)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w...)
		w, err = checkRPFilter(r, iface, vip)
		if err != nil {
			return nil, err
		}
		return append(ws, w...), nil
	}
	v, err := r.sysctl(confPath("ipv6", iface, "disable_ipv6"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ws = append(ws, HostWarning{Problem: fmt.Sprintf("IPv6 is off in this kernel (ipv6.disable=1 on its command line?): the IPv6 VIP %s cannot be added", vip)})
	case err != nil:
		return nil, err
	case v == "1":
		ws = append(ws, HostWarning{
			Sysctl:  sysctlName("ipv6", iface, "disable_ipv6"),
			Value:   "0",
			Problem: fmt.Sprintf("IPv6 is disabled on %s: the IPv6 VIP %s cannot be added", iface, vip),
		})
	}
	return ws, nil
}

// outsidePrefixes reports whether no prefix of vip's family among
// prefixes, other than host prefixes (such as the VIP's own), contains it.
func outsidePrefixes(prefixes []netip.Prefix, vip netip.Addr) bool {
	for _, p := range prefixes {
		if p.Bits() < p.Addr().BitLen() && p.Masked().Contains(vip) {
			return false
		}
	}
	return true
}

// checkARPIgnore warns about each of net.ipv4.conf.all.arp_ignore and the
// interface's that keeps the owner from answering ARP for vip (the kernel
// applies the larger of the two).
func checkARPIgnore(r hostReader, iface string, vip netip.Addr, outside bool) ([]HostWarning, error) {
	var ws []HostWarning
	for _, dev := range []string{"all", iface} {
		n, err := sysctlInt(r, confPath("ipv4", dev, "arp_ignore"))
		if err != nil {
			return nil, err
		}
		var why string
		switch {
		case n == 8:
			why = "the owner answers no ARP request"
		case n == 3:
			why = fmt.Sprintf("the owner answers no ARP request for a scope host address, and vipd adds %s with scope host (so that the host never takes it as its source address)", vip)
		case n == 2 && outside:
			why = fmt.Sprintf("the owner answers ARP for %s only to hosts in a subnet of %s that holds it, and it is outside them all", vip, iface)
		default:
			continue
		}
		ws = append(ws, HostWarning{
			Sysctl:  sysctlName("ipv4", dev, "arp_ignore"),
			Value:   "1",
			Problem: fmt.Sprintf("arp_ignore is %d (%s): %s, so no host on the link reaches the VIP", n, sysctlName("ipv4", dev, "arp_ignore"), why),
		})
	}
	return ws, nil
}

// checkRPFilter warns when strict reverse path filtering on iface drops
// clients whose route back leaves by another interface: the IPv4 default
// route does not leave by iface.
func checkRPFilter(r hostReader, iface string, vip netip.Addr) ([]HostWarning, error) {
	strict := false
	for _, dev := range []string{"all", iface} {
		n, err := sysctlInt(r, confPath("ipv4", dev, "rp_filter"))
		if err != nil {
			return nil, err
		}
		if n == 2 {
			return nil, nil // the larger of the two applies: loose
		}
		strict = strict || n == 1
	}
	if !strict {
		return nil, nil
	}
	defaults, err := r.defaultRoutes()
	if err != nil {
		return nil, err
	}
	if len(defaults) == 0 {
		return nil, nil
	}
	for _, d := range defaults {
		if d == iface {
			return nil, nil
		}
	}
	return []HostWarning{{
		Sysctl: sysctlName("ipv4", iface, "rp_filter"),
		Value:  "2",
		Problem: fmt.Sprintf("rp_filter is 1 (strict) on %s and the default route leaves by %s: a packet to %s from a client beyond the subnets of %s is dropped, since its route back leaves by another interface",
			iface, strings.Join(defaults, ", "), vip, iface),
	}}, nil
}

func sysctlInt(r hostReader, path string) (int, error) {
	v, err := r.sysctl(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("read %s: %q is not a number", path, v)
	}
	return n, nil
}

// confPath is the path under /proc/sys of a per-interface setting
// ("all" for the default of all).
func confPath(family, dev, key string) string {
	return "net/" + family + "/conf/" + dev + "/" + key
}

// sysctlName names a per-interface setting as sysctl(8) and sysctl.d(5)
// take it: with dots, or with slashes when the interface name has a dot.
func sysctlName(family, dev, key string) string {
	if strings.Contains(dev, ".") {
		return confPath(family, dev, key)
	}
	return "net." + family + ".conf." + dev + "." + key
}

// joinOrNone lists ss, or says "none".
func joinOrNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

// kernelHost reads the kernel of the calling thread's network namespace:
// /proc/sys/net is that namespace's for the reading thread, netlink through
// a handle opened there.
type kernelHost struct {
	h *netlink.Handle
}

func (k kernelHost) sysctl(path string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", path))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (k kernelHost) prefixes(iface string) ([]netip.Prefix, error) {
	m := &netlinkAddrs{h: k.h}
	ifi, err := m.link(iface)
	if err != nil {
		return nil, err
	}
	as, err := m.list(ifi)
	if err != nil {
		return nil, fmt.Errorf("list addresses on %s: %w", iface, err)
	}
	out := make([]netip.Prefix, 0, len(as))
	for _, a := range as {
		out = append(out, a.prefix)
	}
	return out, nil
}

func (k kernelHost) defaultRoutes() ([]string, error) {
	rs, err := k.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var names []string
	name := func(index int) {
		if l, err := k.h.LinkByIndex(index); err == nil {
			names = append(names, l.Attrs().Name)
		}
	}
	for _, r := range rs {
		if r.Dst != nil && !isDefault(r.Dst) {
			continue
		}
		if r.LinkIndex > 0 {
			name(r.LinkIndex)
		}
		for _, nh := range r.MultiPath {
			name(nh.LinkIndex)
		}
	}
	return names, nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}
