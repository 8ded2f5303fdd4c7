package l2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Daisy-chaining: a planned handoff of an IPv4 VIP from an old holder O to a
// successor S on the same link that costs clients no failed request.
//
//   - O calls Quiesce: it keeps the VIP but stops answering ARP for it and
//     stops its gratuitous ARP burst and refresh.
//   - S calls Forward (VIP, its TCP ports, O's address on the link) and then
//     Announce: clients move to S's MAC; S passes on to O the TCP segments it
//     has no connection for (no SYN, conntrack state new) and drops them
//     itself, so the connections O accepted keep working through S, while
//     new connections (a SYN) land on S.
//   - When O has closed its connections, O calls Withdraw and S StopForward.
//
// The rules live in two nftables tables that belong to vipd, one rule (or,
// for Forward, one rule per port) per VIP, tagged with a comment naming it,
// so several VIPs and several Announcers of one network namespace share the
// tables; a table is removed with its last rule. CleanupNftables removes both.

// ErrForwardUnsupported is wrapped by the errors of Forward and Quiesce when
// daisy-chaining cannot be used for the VIP on this host: an IPv6 VIP or
// destination, a destination that is not on the interface's link, or no
// nftables in this kernel. The caller then hands off without it.
var ErrForwardUnsupported = errors.New("daisy-chain forwarding unsupported")

// Names of the nftables objects vipd owns.
const (
	// ForwardTable is the table (family ip) holding Forward's rules.
	ForwardTable = "vipd_forward"
	// QuiesceTable is the table (family arp) holding Quiesce's rules.
	QuiesceTable = "vipd_quiesce"

	forwardChain = "prerouting"
	quiesceChain = "input"
	// forwardPriority runs the forward chain after conntrack (-200), so
	// that "ct state new" sees mid-stream segments of connections this
	// host never saw, and before the mangle chains (-150 is mangle's
	// priority; nft lists it as "mangle").
	forwardPriority = -150
)

// ruleKind tells the two kinds of rules apart.
type ruleKind int

const (
	kindForward ruleKind = iota // table ip vipd_forward
	kindQuiesce                 // table arp vipd_quiesce
)

func (k ruleKind) String() string {
	if k == kindQuiesce {
		return "quiesce"
	}
	return "forward"
}

// tag is the comment (nftables rule user data) naming the VIP a rule is for.
func (k ruleKind) tag(vip netip.Addr) string {
	return "vipd " + k.String() + " " + vip.String()
}

// filter installs and removes the rules of one VIP. nftFilter implements it
// on the kernel; unit tests use a fake.
type filter interface {
	// set replaces the rules of kind k for vip by rules (each a list of
	// expressions), in one transaction.
	set(k ruleKind, vip netip.Addr, rules [][]expr.Any) error
	// del removes the rules of kind k for vip, and the table once it holds
	// no rule. Nothing to remove is not an error.
	del(k ruleKind, vip netip.Addr) error
	close() error
}

// Forward makes this host pass on to the host at to (an IPv4 address on-link
// on the announcer's interface) the packets for addr's TCP ports that belong
// to no connection this host has: segments without SYN whose conntrack
// state is new. In nftables terms, in table ip vipd_forward, a filter chain
// on the prerouting hook at priority -150 (after conntrack), one rule per
// port (no ports: one rule for every port, without the dport match):
//
//	ip daddr addr tcp dport port tcp flags & syn == 0 ct state new ip ttl set 1 dup to to device <iface> drop
//
// Connections the host accepts itself are untouched. The copy's TTL is 1:
// the host at to delivers it while it has addr, and routes it nowhere once
// it removed addr (a routing host would send it back to addr, here, and
// the copies would loop until their TTL ran out). Calling Forward again
// for addr replaces its rules atomically. An IPv6 addr or to, or a to that is
// not inside the prefix of an IPv4 address on the interface, returns an
// error wrapping ErrForwardUnsupported (the caller then hands off as
// before), and so does a kernel without nftables. Needs CAP_NET_ADMIN.
//
// The device is the interface's index when Forward is called: an interface
// created again under the same name needs Forward called again. Conntrack
// must pick up connections in the middle (net.netfilter.nf_conntrack_tcp_loose
// = 1, the default): otherwise such segments are invalid, not new, and this
// host resets them as before.
func (a *Announcer) Forward(ctx context.Context, addr netip.Addr, ports []uint16, to netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("forward %s: %w", addr, err)
	}
	to = to.Unmap()
	if err := checkForwardArgs(vip, ports, to); err != nil {
		return fmt.Errorf("forward %s to %s: %w", vip, to, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("forward %s to %s: %w", vip, to, err)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("forward %s to %s: %w", vip, to, net.ErrClosed)
	}
	if a.filter == nil {
		return fmt.Errorf("forward %s to %s: %w: nftables: %v", vip, to, ErrForwardUnsupported, a.filterErr)
	}
	ifi, err := a.addrs.link(a.cfg.Interface)
	if err != nil {
		return fmt.Errorf("forward %s to %s: %w", vip, to, err)
	}
	present, err := a.addrs.list(ifi)
	if err != nil {
		return fmt.Errorf("forward %s to %s: list addresses on %s: %w", vip, to, ifi.Name, err)
	}
	if err := checkOnLink(to, ifi.Name, present); err != nil {
		return fmt.Errorf("forward %s to %s: %w", vip, to, err)
	}
	if err := a.filter.set(kindForward, vip, forwardRules(vip, ports, to, ifi.Index)); err != nil {
		return fmt.Errorf("forward %s to %s: %w", vip, to, err)
	}
	a.forwards[vip] = true
	a.log.Info("forwarding segments of connections this host does not know to the previous holder", "vip", vip, "to", to, "ports", ports)
	return nil
}

// StopForward removes what Forward installed for addr. Nothing installed is
// not an error.
func (a *Announcer) StopForward(ctx context.Context, addr netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("stop forward %s: %w", addr, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop forward %s: %w", vip, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("stop forward %s: %w", vip, net.ErrClosed)
	}
	if a.filter == nil || !vip.Is4() {
		return nil
	}
	if err := a.filter.del(kindForward, vip); err != nil {
		return fmt.Errorf("stop forward %s: %w", vip, err)
	}
	if a.forwards[vip] {
		delete(a.forwards, vip)
		a.log.Info("forwarding stopped", "vip", vip)
	}
	return nil
}

// Quiesce keeps addr on the host but stops it attracting traffic: the host
// answers no ARP request for addr on any interface of this network namespace
// (table arp vipd_quiesce, a filter chain on the input hook:
// arp operation request, target protocol address addr: drop), and this
// Announcer's advertisements of addr (a running burst, the refresh) stop.
// The host keeps serving the connections to addr whose packets reach it
// (forwarded by the successor). An IPv6 addr returns an error wrapping ErrForwardUnsupported.
// Withdraw of addr ends the quiesce (removes the rule) after it removes the
// address; Announce of addr ends it before it advertises (a handoff called
// off: the host answers ARP for addr again). Needs CAP_NET_ADMIN.
func (a *Announcer) Quiesce(ctx context.Context, addr netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("quiesce %s: %w", addr, err)
	}
	if !vip.Is4() {
		return fmt.Errorf("quiesce %s: %w: IPv6 (neighbor discovery is not filtered)", vip, ErrForwardUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("quiesce %s: %w", vip, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("quiesce %s: %w", vip, net.ErrClosed)
	}
	if a.filter == nil {
		return fmt.Errorf("quiesce %s: %w: nftables: %v", vip, ErrForwardUnsupported, a.filterErr)
	}
	a.stopBurstLocked(vip)
	if err := a.filter.set(kindQuiesce, vip, [][]expr.Any{quiesceExprs(vip)}); err != nil {
		return fmt.Errorf("quiesce %s: %w", vip, err)
	}
	a.quiesced[vip] = true
	a.log.Info("vip quiesced: kept on the host, ARP requests for it dropped", "vip", vip)
	return nil
}

// endQuiesceLocked removes the quiesce rule of vip, if this Announcer
// installed one.
func (a *Announcer) endQuiesceLocked(vip netip.Addr) error {
	if !a.quiesced[vip] {
		return nil
	}
	if err := a.filter.del(kindQuiesce, vip); err != nil {
		return fmt.Errorf("end quiesce: %w", err)
	}
	delete(a.quiesced, vip)
	a.log.Info("vip quiesce ended: ARP requests for it answered again", "vip", vip)
	return nil
}

// closeFilterLocked removes every rule this Announcer installed and closes
// the nftables connection.
func (a *Announcer) closeFilterLocked() error {
	if a.filter == nil {
		return nil
	}
	var errs []error
	for vip := range a.forwards {
		if err := a.filter.del(kindForward, vip); err != nil {
			errs = append(errs, fmt.Errorf("stop forward %s: %w", vip, err))
		}
	}
	for vip := range a.quiesced {
		if err := a.filter.del(kindQuiesce, vip); err != nil {
			errs = append(errs, fmt.Errorf("end quiesce %s: %w", vip, err))
		}
	}
	clear(a.forwards)
	clear(a.quiesced)
	errs = append(errs, a.filter.close())
	a.filter = nil
	return errors.Join(errs...)
}

// checkForwardArgs validates Forward's arguments that need no kernel.
func checkForwardArgs(vip netip.Addr, ports []uint16, to netip.Addr) error {
	if !vip.Is4() {
		return fmt.Errorf("%w: IPv6 VIP", ErrForwardUnsupported)
	}
	if !to.IsValid() {
		return errors.New("invalid destination address")
	}
	if !to.Is4() {
		return fmt.Errorf("%w: IPv6 destination", ErrForwardUnsupported)
	}
	if to == vip || to.IsUnspecified() || to.IsMulticast() || to.IsLoopback() || to == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("destination %s is not a host's address", to)
	}
	if slices.Contains(ports, 0) {
		return errors.New("port 0")
	}
	return nil
}

// checkOnLink returns nil if to (IPv4) is inside the prefix of an address
// on the interface (and is not one of them), given the interface's
// addresses: outsidePrefixes, the rule --check applies to a VIP.
func checkOnLink(to netip.Addr, ifname string, present []ifAddr) error {
	prefixes := make([]netip.Prefix, 0, len(present))
	for _, p := range present {
		if p.prefix.Addr() == to {
			return fmt.Errorf("destination %s is an address of this host (%s on %s)", to, p.prefix, ifname)
		}
		prefixes = append(prefixes, p.prefix)
	}
	if outsidePrefixes(prefixes, to) {
		return fmt.Errorf("%w: %s is not inside the prefix of an IPv4 address on %s", ErrForwardUnsupported, to, ifname)
	}
	return nil
}

// forwardRules returns Forward's rules for vip: one per port.
func forwardRules(vip netip.Addr, ports []uint16, to netip.Addr, ifindex int) [][]expr.Any {
	if len(ports) == 0 {
		// Every port ([connections] ports left empty).
		return [][]expr.Any{forwardExprs(vip, 0, to, ifindex)}
	}
	var rules [][]expr.Any
	seen := map[uint16]bool{}
	for _, p := range ports {
		if seen[p] {
			continue
		}
		seen[p] = true
		rules = append(rules, forwardExprs(vip, p, to, ifindex))
	}
	return rules
}

// forwardExprs is, for nft,
//
//	ip daddr vip tcp dport port tcp flags & syn == 0 ct state new ip ttl set 1 dup to to device <ifindex> drop
//
// without the tcp dport match for port 0 (every port).
func forwardExprs(vip netip.Addr, port uint16, to netip.Addr, ifindex int) []expr.Any {
	v4, t4 := vip.As4(), to.As4()
	var dport []expr.Any
	if port != 0 {
		dport = []expr.Any{
			// tcp dport port
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		}
	}
	return slices.Concat([]expr.Any{
		// ip daddr vip
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: v4[:]},
		// meta l4proto tcp
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}, dport, []expr.Any{
		// tcp flags & syn == 0
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{tcpFlagSYN}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}},
		// ct state new
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		// ip ttl set 1: the copy is for the previous holder itself, which
		// delivers it whatever its TTL while it holds the VIP; once it
		// released the VIP (the successor forwards for forwardGrace more),
		// a routing host (ip_forward=1) would send it back to the VIP,
		// that is here, to be copied again until the TTL ran out. With TTL
		// 1 it goes no further. The IP checksum is updated.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ipOffTTL, Len: 2},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 2, Mask: []byte{0x00, 0xff}, Xor: []byte{0x01, 0x00}},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: ipOffTTL, Len: 2,
			CsumType: expr.CsumTypeInet, CsumOffset: ipOffChecksum},
		// dup to to device ifindex
		&expr.Immediate{Register: 1, Data: t4[:]},
		&expr.Immediate{Register: 2, Data: binaryutil.NativeEndian.PutUint32(uint32(ifindex))},
		&expr.Dup{RegAddr: 1, RegDev: 2, IsRegDevSet: true},
		// drop
		&expr.Verdict{Kind: expr.VerdictDrop},
	})
}

const tcpFlagSYN = 0x02

// IPv4 header fields (RFC 791): the TTL (with the protocol after it: a
// payload write covers 2 bytes for the checksum update) and the header
// checksum.
const (
	ipOffTTL      = 8
	ipOffChecksum = 10
)

// ARP header fields (RFC 826) for Ethernet and IPv4, as offsets in the
// network header of the arp family.
const (
	arpOffLens   = 4  // hardware address length (1 byte), protocol address length (1 byte)
	arpOffOp     = 6  // operation, 2 bytes
	arpOffTPA    = 24 // target protocol address, 4 bytes, after 6+4+6 address bytes
	arpOpRequest = 1
)

// quiesceExprs is, for nft,
//
//	arp hlen 6 arp plen 4 arp operation request arp daddr ip vip drop
//
// (the length check keeps the fixed offset of the target address right).
func quiesceExprs(vip netip.Addr) []expr.Any {
	v4 := vip.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: arpOffLens, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{6, 4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: arpOffOp, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(arpOpRequest)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: arpOffTPA, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: v4[:]},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}
