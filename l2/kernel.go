package l2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// addrManager reads and changes the addresses of an interface. netlinkAddrs
// implements it on the kernel; tests use an in-memory fake.
type addrManager interface {
	// link looks up an interface by name; the error wraps errNoLink if it
	// does not exist.
	link(name string) (*net.Interface, error)
	// list returns the addresses configured on ifi, of both families,
	// with their attributes.
	list(ifi *net.Interface) ([]ifAddr, error)
	// add configures p on ifi with the attributes at. An existing equal
	// address is not an error: an IPv6 one gets at (its flags and
	// lifetimes replaced), an IPv4 one keeps its scope (the kernel does
	// not change the scope of an existing IPv4 address; delete it first).
	add(ifi *net.Interface, p netip.Prefix, at addrAttrs) error
	// del removes p from ifi. An absent address is not an error.
	del(ifi *net.Interface, p netip.Prefix) error
	// setLifetime gives p, configured on ifi with the attributes at, a
	// valid lifetime of life (whole seconds; 0: forever), keeping at: when
	// it runs out the kernel removes the address itself.
	setLifetime(ifi *net.Interface, p netip.Prefix, at addrAttrs, life time.Duration) error
	// addLocal adds the linger route of vip on ifi (lingerRoute): the
	// host keeps taking vip's packets as its own without the address.
	// An existing equal route is not an error.
	addLocal(ifi *net.Interface, vip netip.Addr) error
	// delLocal removes it. An absent route is not an error.
	delLocal(ifi *net.Interface, vip netip.Addr) error
	close() error
}

// dialer opens the sockets of an Announcer, in the calling thread's network
// namespace. With listen false an advertisement socket only sends and drops
// everything it would receive.
type dialer interface {
	dialARP(ifi *net.Interface, listen bool) (arpConn, error)
	dialNDP(ifi *net.Interface, listen bool) (ndpConn, error)
	// watchRemoval subscribes to the removal of the interface with index.
	// wait blocks until the interface is removed (an error wrapping
	// errLinkRemoved), the subscription fails (that error) or ctx ends
	// (nil), and ends the subscription; call it exactly once.
	watchRemoval(index int) (wait func(ctx context.Context) error, err error)
}

// arpConn sends and receives ARP packets on one interface.
type arpConn interface {
	// writeTo sends p in an Ethernet frame to dst.
	writeTo(p *arp.Packet, dst net.HardwareAddr) error
	// read returns the next ARP packet, skipping malformed frames.
	read() (*arp.Packet, error)
	Close() error
}

// ndpConn is the part of *ndp.Conn an Announcer uses.
type ndpConn interface {
	WriteTo(m ndp.Message, cm *ipv6.ControlMessage, dst netip.Addr) error
	ReadFrom() (ndp.Message, *ipv6.ControlMessage, netip.Addr, error)
	Close() error
}

var _ ndpConn = (*ndp.Conn)(nil)

// netlinkAddrs implements addrManager with a netlink handle, which is bound to
// the network namespace it was opened in.
type netlinkAddrs struct {
	h *netlink.Handle
}

func (n *netlinkAddrs) link(name string) (*net.Interface, error) {
	l, err := n.h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("%w: %s", errNoLink, name)
		}
		return nil, fmt.Errorf("look up interface %s: %w", name, err)
	}
	at := l.Attrs()
	return &net.Interface{
		Index:        at.Index,
		MTU:          at.MTU,
		Name:         at.Name,
		HardwareAddr: at.HardwareAddr,
		Flags:        at.Flags,
	}, nil
}

// nlLink returns the minimal netlink.Link naming ifi for address calls.
func nlLink(ifi *net.Interface) netlink.Link {
	return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: ifi.Index, Name: ifi.Name}}
}

func (n *netlinkAddrs) list(ifi *net.Interface) ([]ifAddr, error) {
	var (
		as  []netlink.Addr
		err error
	)
	// A dump interrupted by a concurrent change may be inconsistent: retry.
	for range 3 {
		as, err = n.h.AddrList(nlLink(ifi), netlink.FAMILY_ALL)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	out := make([]ifAddr, 0, len(as))
	for _, a := range as {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, ifAddr{
			prefix: netip.PrefixFrom(ip.Unmap(), ones),
			attrs:  attrsOf(a.Scope, a.Flags),
		})
	}
	return out, nil
}

// attrsOf reads the attributes vipd sets from an address's scope and
// IFA_F_* flags as the kernel reports them.
func attrsOf(scope, flags int) addrAttrs {
	return addrAttrs{
		scope:      uint8(scope),
		nodad:      flags&unix.IFA_F_NODAD != 0,
		deprecated: flags&unix.IFA_F_DEPRECATED != 0,
		permanent:  flags&unix.IFA_F_PERMANENT != 0,
	}
}

func (n *netlinkAddrs) add(ifi *net.Interface, p netip.Prefix, at addrAttrs) error {
	a := &netlink.Addr{IPNet: prefixIPNet(p), Scope: int(at.scope)}
	if at.nodad {
		a.Flags |= unix.IFA_F_NODAD
	}
	if at.deprecated {
		// Preferred lifetime 0 (the kernel sets IFA_F_DEPRECATED), valid
		// lifetime forever (IFA_F_PERMANENT: it never expires).
		a.PreferedLft, a.ValidLft = 0, int(lifetimeForever)
	}
	// Replace: creates the address, or sets the flags and lifetimes of an
	// IPv6 address already there (someone re-added it with others).
	return n.h.AddrReplace(nlLink(ifi), a)
}

// lifetimeForever is the infinite address lifetime (INFINITY_LIFE_TIME). A
// variable, not a constant: netlink.Addr holds lifetimes in an int, which
// carries it on the 64-bit platforms vipd is built for.
var lifetimeForever uint32 = 0xFFFFFFFF

// setLifetime: see addrManager. at is what Announce gave p (vipAttrs):
// an IPv6 VIP stays deprecated (preferred lifetime 0) and only its valid
// lifetime changes.
func (n *netlinkAddrs) setLifetime(ifi *net.Interface, p netip.Prefix, at addrAttrs, life time.Duration) error {
	valid := int(lifetimeForever)
	if life > 0 {
		valid = int(life / time.Second)
	}
	a := &netlink.Addr{IPNet: prefixIPNet(p), Scope: int(at.scope), ValidLft: valid, PreferedLft: valid}
	if at.nodad {
		a.Flags |= unix.IFA_F_NODAD
	}
	if at.deprecated {
		a.PreferedLft = 0
	}
	return n.h.AddrReplace(nlLink(ifi), a)
}

func (n *netlinkAddrs) del(ifi *net.Interface, p netip.Prefix) error {
	err := n.h.AddrDel(nlLink(ifi), &netlink.Addr{IPNet: prefixIPNet(p)})
	if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

func (n *netlinkAddrs) addLocal(ifi *net.Interface, vip netip.Addr) error {
	return n.h.RouteReplace(lingerRoute(ifi.Index, vip))
}

func (n *netlinkAddrs) delLocal(ifi *net.Interface, vip netip.Addr) error {
	err := n.h.RouteDel(lingerRoute(ifi.Index, vip))
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

func (n *netlinkAddrs) close() error {
	n.h.Close()
	return nil
}

func prefixIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{
		IP:   p.Addr().AsSlice(),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}
}

// kernelDialer implements dialer with packet(7) and raw ICMPv6 sockets,
// created in the calling thread's network namespace.
type kernelDialer struct{}

// etherTypeARP is the ARP EtherType, for packet.Listen.
const etherTypeARP = int(ethernet.EtherTypeARP)

// dropAll is a socket filter that accepts no packet, for send-only sockets.
var dropAll = mustAssemble(bpf.RetConstant{Val: 0})

func mustAssemble(insns ...bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(insns)
	if err != nil {
		panic(fmt.Sprintf("l2: assemble BPF: %v", err))
	}
	return raw
}

func (kernelDialer) dialARP(ifi *net.Interface, listen bool) (arpConn, error) {
	cfg := &packet.Config{}
	if !listen {
		cfg.Filter = dropAll
	}
	c, err := packet.Listen(ifi, packet.Raw, etherTypeARP, cfg)
	if err != nil {
		return nil, err
	}
	mtu := ifi.MTU
	if mtu < 1500 {
		mtu = 1500
	}
	return &packetARP{c: c, buf: make([]byte, mtu+14)}, nil
}

func (kernelDialer) dialNDP(ifi *net.Interface, listen bool) (ndpConn, error) {
	// Bind to the unspecified address: the VIP is used as the source of each
	// advertisement through the control message instead, so no link-local
	// address (possibly still tentative) is needed.
	c, _, err := ndp.Listen(ifi, ndp.Unspecified)
	if err != nil {
		return nil, err
	}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	if listen {
		f.Accept(ipv6.ICMPTypeNeighborAdvertisement)
		// The unspecified bind receives from every interface; the
		// interface index lets WatchConflicts keep only its own.
		if err := c.SetControlMessage(ipv6.FlagInterface, true); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("enable interface control messages: %w", err)
		}
	}
	if err := c.SetICMPFilter(&f); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("set ICMPv6 filter: %w", err)
	}
	return c, nil
}

func (kernelDialer) watchRemoval(index int) (func(context.Context) error, error) {
	s, err := subscribeLinks()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return s.run(ctx, "link change", func(u netlink.LinkUpdate) error {
			if linkRemoved(u, index) {
				return fmt.Errorf("%w: index %d", errLinkRemoved, index)
			}
			return nil
		})
	}, nil
}

// packetARP is an arpConn on a packet(7) socket. Unlike arp.Client it does
// not need an IPv4 address on the interface.
type packetARP struct {
	c   *packet.Conn
	buf []byte
}

func (p *packetARP) writeTo(pkt *arp.Packet, dst net.HardwareAddr) error {
	pb, err := pkt.MarshalBinary()
	if err != nil {
		return err
	}
	f := &ethernet.Frame{
		Destination: dst,
		Source:      pkt.SenderHardwareAddr,
		EtherType:   ethernet.EtherTypeARP,
		Payload:     pb,
	}
	fb, err := f.MarshalBinary()
	if err != nil {
		return err
	}
	_, err = p.c.WriteTo(fb, &packet.Addr{HardwareAddr: dst})
	return err
}

func (p *packetARP) read() (*arp.Packet, error) {
	for {
		n, _, err := p.c.ReadFrom(p.buf)
		if err != nil {
			return nil, err
		}
		var f ethernet.Frame
		if err := f.UnmarshalBinary(p.buf[:n]); err != nil || f.EtherType != ethernet.EtherTypeARP {
			continue
		}
		pkt := new(arp.Packet)
		if err := pkt.UnmarshalBinary(f.Payload); err != nil {
			continue
		}
		return pkt, nil
	}
}

func (p *packetARP) Close() error { return p.c.Close() }
