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
	"github.com/vishvananda/netlink"
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
	// LingerARPTable is the table (family arp) holding the rule of Linger
	// that keeps the VIP out of the host's ARP requests.
	LingerARPTable = "vipd_linger"

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
	kindForward   ruleKind = iota // table ip vipd_forward
	kindQuiesce                   // table arp vipd_quiesce
	kindLinger                    // table ip vipd_forward
	kindLingerARP                 // table arp vipd_linger
)

func (k ruleKind) String() string {
	switch k {
	case kindQuiesce:
		return "quiesce"
	case kindLinger:
		return "linger"
	case kindLingerARP:
		return "linger-arp"
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

// Forward makes this host pass on to the hosts at to (IPv4 addresses on-link
// on the announcer's interface: the previous holder and the hosts that
// linger on addr) a copy of each packet for addr's TCP ports that belongs
// to no connection this host has: segments without SYN whose conntrack
// state is new. The host that has the connection takes its copy; a
// lingering host that does not drops it (Linger). In nftables terms, in table ip vipd_forward, a filter chain
// on the prerouting hook at priority -150 (after conntrack), one rule per
// port (no ports: one rule for every port, without the dport match):
//
//	ip daddr addr tcp dport port tcp flags & syn == 0 ct state new ip ttl set 1 dup to T1 device <iface> [dup to T2 device <iface> ...] drop
//
// Connections the host accepts itself are untouched. The copy's TTL is 1:
// a host of to delivers it while it has addr (or lingers on it), and routes it nowhere once
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
func (a *Announcer) Forward(ctx context.Context, addr netip.Addr, ports []uint16, to ...netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("forward %s: %w", addr, err)
	}
	if len(to) == 0 {
		return fmt.Errorf("forward %s: no destination", vip)
	}
	to = slices.Clone(to)
	for i := range to {
		to[i] = to[i].Unmap()
		if err := checkForwardArgs(vip, ports, to[i]); err != nil {
			return fmt.Errorf("forward %s to %s: %w", vip, to[i], err)
		}
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
	for _, t := range to {
		if err := checkOnLink(t, ifi.Name, present); err != nil {
			return fmt.Errorf("forward %s to %s: %w", vip, t, err)
		}
	}
	if err := a.filter.set(kindForward, vip, forwardRules(vip, ports, to, ifi.Index)); err != nil {
		return fmt.Errorf("forward %s to %s: %w", vip, to, err)
	}
	a.forwards[vip] = true
	a.log.Info("forwarding segments of connections this host does not know to the previous holders", "vip", vip, "to", to, "ports", ports)
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

// Linger takes addr off the interface but keeps the host's connections to
// it working, for a planned handoff whose successor forwards them here
// (Forward): the old holder keeps serving them until they end by
// themselves, for as long as that takes, while it is not a holder of addr
// in any way the network or a peer can see.
//
//   - The host answers no ARP request for addr (Quiesce's rule) and its
//     advertisement burst stops; its own ARP requests carry its address
//     on the interface, not addr (table arp vipd_linger, chain output:
//     see lingerARPExprs).
//
//   - A route of type local for addr's host prefix on the interface, in
//     table local, protocol LingerProtocol, metric LingerMetric, keeps
//     the packets the successor forwards here delivered to the host's
//     sockets once the address is gone (the kernel's own local route goes
//     with the address; this one is added first, so there is no gap).
//
//   - In table ip vipd_forward, a TCP segment to addr that no established
//     socket of this host takes is dropped, not answered: the successor
//     copies each segment it does not know to every lingering host, and
//     only the one with the connection may answer it (a reset from the
//     others would end the client's connection on the host that has it).
//     The test is the socket lookup, not conntrack: connections the host
//     accepted before any rule needed conntrack are not tracked, and
//     would look new.
//
//     ip daddr addr meta l4proto tcp meta iiftype loopback accept
//     ip daddr addr meta l4proto tcp socket wildcard 0 accept
//     ip daddr addr meta l4proto tcp drop
//
//     The host's own connections to addr (its kubelet's, which the
//     local route delivers to the host itself) are accepted first: they
//     are not copies from the network, and are served here until the
//     lingering ends (the agent closes them then: their ends are both
//     addr, which the host no longer has).
//
// No new connection from the network lands here (a SYN is dropped). Announce of addr ends
// the lingering (the address back first), and so do Withdraw, StopLinger
// and Close. An IPv6 addr returns an error wrapping ErrForwardUnsupported.
// Needs CAP_NET_ADMIN.
func (a *Announcer) Linger(ctx context.Context, addr netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("linger %s: %w", addr, err)
	}
	if !vip.Is4() {
		return fmt.Errorf("linger %s: %w: IPv6 (neighbor discovery is not filtered)", vip, ErrForwardUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("linger %s: %w", vip, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("linger %s: %w", vip, net.ErrClosed)
	}
	if a.filter == nil {
		return fmt.Errorf("linger %s: %w: nftables: %v", vip, ErrForwardUnsupported, a.filterErr)
	}
	ifi, err := a.addrs.link(a.cfg.Interface)
	if err != nil {
		return fmt.Errorf("linger %s: %w", vip, err)
	}
	a.stopBurstLocked(vip)
	if err := a.filter.set(kindQuiesce, vip, [][]expr.Any{quiesceExprs(vip)}); err != nil {
		return fmt.Errorf("linger %s: %w", vip, err)
	}
	a.quiesced[vip] = true
	if err := a.filter.set(kindLinger, vip, lingerRules(vip)); err != nil {
		return fmt.Errorf("linger %s: %w", vip, err)
	}
	a.lingering[vip] = true
	present, err := a.addrs.list(ifi)
	if err != nil {
		return fmt.Errorf("linger %s: list addresses on %s: %w", vip, ifi.Name, err)
	}
	if own, ok := ownAddrFor(vip, present); ok {
		if err := a.filter.set(kindLingerARP, vip, [][]expr.Any{lingerARPExprs(vip, own)}); err != nil {
			return fmt.Errorf("linger %s: %w", vip, err)
		}
	} else {
		a.log.Warn("lingering: no address of this host around the VIP on the interface; its ARP requests may carry the VIP", "vip", vip)
	}
	if err := a.addrs.addLocal(ifi, vip); err != nil {
		return fmt.Errorf("linger %s: add local route: %w", vip, err)
	}
	if _, err := removeHostPrefix(a.addrs, a.cfg.Interface, vip); err != nil {
		return fmt.Errorf("linger %s: %w", vip, err)
	}
	a.log.Info("vip lingering: address removed, its connections kept", "vip", vip)
	return nil
}

// StopLinger ends what Linger set up for addr: the local route, the rules.
// The connections still open stop working (close them first). Nothing to
// end is not an error.
func (a *Announcer) StopLinger(ctx context.Context, addr netip.Addr) error {
	vip, err := vipAddr(addr)
	if err != nil {
		return fmt.Errorf("stop linger %s: %w", addr, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop linger %s: %w", vip, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("stop linger %s: %w", vip, net.ErrClosed)
	}
	if err := a.stopLingerLocked(vip); err != nil {
		return fmt.Errorf("stop linger %s: %w", vip, err)
	}
	if err := a.endQuiesceLocked(vip); err != nil {
		return fmt.Errorf("stop linger %s: %w", vip, err)
	}
	return nil
}

// stopLingerLocked removes vip's linger route and rules, if this
// Announcer installed them.
func (a *Announcer) stopLingerLocked(vip netip.Addr) error {
	if !a.lingering[vip] {
		return nil
	}
	ifi, err := a.addrs.link(a.cfg.Interface)
	if err != nil && !errors.Is(err, errNoLink) {
		return err
	}
	if ifi != nil {
		if err := a.addrs.delLocal(ifi, vip); err != nil {
			return fmt.Errorf("remove local route: %w", err)
		}
	}
	if err := a.filter.del(kindLinger, vip); err != nil {
		return err
	}
	if err := a.filter.del(kindLingerARP, vip); err != nil {
		return err
	}
	delete(a.lingering, vip)
	a.log.Info("vip lingering ended", "vip", vip)
	return nil
}

// LingerProtocol and LingerMetric mark Linger's local routes (rtm_protocol
// and priority), so that CleanupLingerRoutes finds the ones a vipd that
// ended while lingering left, and so that they sit beside the kernel's own
// local route of the address (metric 0) until the address goes.
const (
	LingerProtocol = 245
	LingerMetric   = 245
)

// lingerRoute is Linger's route for vip on the interface with index.
func lingerRoute(index int, vip netip.Addr) *netlink.Route {
	return &netlink.Route{
		LinkIndex: index,
		Dst:       prefixIPNet(hostPrefix(vip)),
		Type:      unix.RTN_LOCAL,
		Table:     unix.RT_TABLE_LOCAL,
		Scope:     netlink.SCOPE_HOST,
		Protocol:  LingerProtocol,
		Priority:  LingerMetric,
	}
}

// CleanupLingerRoutes removes Linger's local routes (protocol
// LingerProtocol in table local) in the calling thread's network
// namespace and returns the prefixes it removed. A route left behind would
// keep the host taking the VIP's packets, and answering ARP for it, after
// a vipd that ended while lingering; `vipd cleanup` and vipd's start call
// it, with CleanupNftables.
func CleanupLingerRoutes() ([]string, error) {
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_LOCAL, Protocol: LingerProtocol},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("list local routes: %w", err)
	}
	var removed []string
	var errs []error
	for _, r := range rs {
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("remove local route %s: %w", r.Dst, err))
			continue
		}
		removed = append(removed, r.Dst.String())
	}
	return removed, errors.Join(errs...)
}

// ownAddrFor returns this host's IPv4 address on the interface whose
// prefix holds vip (the address its ARP requests on that link should
// carry), from the interface's addresses.
func ownAddrFor(vip netip.Addr, present []ifAddr) (netip.Addr, bool) {
	for _, p := range present {
		if a := p.prefix.Addr(); a.Is4() && a != vip && p.prefix.Bits() < 32 && p.prefix.Contains(vip) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// lingerARPExprs is, for nft (table arp vipd_linger, chain output),
//
//	arp hlen 6 arp plen 4 arp operation request arp saddr ip vip arp saddr ip set own
//
// With the default arp_announce = 0 the kernel puts a packet's source in
// the ARP request it sends to resolve the packet's next hop: a lingering
// host answering a client it must resolve again would send the VIP, and
// the client would move its entry for the VIP to this host.
func lingerARPExprs(vip, own netip.Addr) []expr.Any {
	v4, o4 := vip.As4(), own.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: arpOffLens, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{6, 4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: arpOffOp, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(arpOpRequest)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: arpOffSPA, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: v4[:]},
		&expr.Immediate{Register: 1, Data: o4[:]},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: arpOffSPA, Len: 4},
	}
}

// lingerRules returns Linger's rules for vip.
func lingerRules(vip netip.Addr) [][]expr.Any {
	v4 := vip.As4()
	match := []expr.Any{
		// ip daddr vip
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: v4[:]},
		// meta l4proto tcp
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
	return [][]expr.Any{
		slices.Concat(match, []expr.Any{
			// meta iiftype loopback: the host's own connections to
			// vip (its kubelet's), which the local route delivers to
			// the host itself, are not copies from the network.
			&expr.Meta{Key: expr.MetaKeyIIFTYPE, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint16(unix.ARPHRD_LOOPBACK)},
			&expr.Verdict{Kind: expr.VerdictAccept},
		}),
		slices.Concat(match, []expr.Any{
			// socket wildcard 0: an established socket (bound to vip,
			// not a listener on every address) takes the segment.
			&expr.Socket{Key: expr.SocketKeyWildcard, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}},
			&expr.Verdict{Kind: expr.VerdictAccept},
		}),
		slices.Concat(match, []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}),
	}
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
	for vip := range a.lingering {
		if err := a.stopLingerLocked(vip); err != nil {
			errs = append(errs, fmt.Errorf("stop linger %s: %w", vip, err))
		}
	}
	clear(a.forwards)
	clear(a.quiesced)
	clear(a.lingering)
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
func forwardRules(vip netip.Addr, ports []uint16, to []netip.Addr, ifindex int) [][]expr.Any {
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
//	meta iiftype != loopback ip daddr vip tcp dport port tcp flags & syn == 0 ct state new ip ttl set 1 dup to T device <ifindex> [...] drop
//
// without the tcp dport match for port 0 (every port). The host's own
// connections to vip (its kubelet's, vipd's Node watch) come in on
// loopback and are never a previous holder's: accepted before the rule
// made conntrack track anything, they are unknown to it, and their next
// segment (a watch event from the host's own apiserver) would look new,
// be copied away and dropped, again at every retransmission.
func forwardExprs(vip netip.Addr, port uint16, to []netip.Addr, ifindex int) []expr.Any {
	v4 := vip.As4()
	var dport []expr.Any
	if port != 0 {
		dport = []expr.Any{
			// tcp dport port
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		}
	}
	return slices.Concat([]expr.Any{
		// meta iiftype != loopback
		&expr.Meta{Key: expr.MetaKeyIIFTYPE, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint16(unix.ARPHRD_LOOPBACK)},
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
	}, dupExprs(to, ifindex), []expr.Any{
		// drop
		&expr.Verdict{Kind: expr.VerdictDrop},
	})
}

// dupExprs is, for nft, "dup to T device ifindex" for each T of to: each
// host that may have the connection gets a copy; the one that has it
// takes it, the others drop it (Linger's rules).
func dupExprs(to []netip.Addr, ifindex int) []expr.Any {
	var out []expr.Any
	for _, t := range to {
		t4 := t.As4()
		out = append(out,
			&expr.Immediate{Register: 1, Data: t4[:]},
			&expr.Immediate{Register: 2, Data: binaryutil.NativeEndian.PutUint32(uint32(ifindex))},
			&expr.Dup{RegAddr: 1, RegDev: 2, IsRegDevSet: true},
		)
	}
	return out
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
	arpOffSPA    = 14 // sender protocol address, 4 bytes, after the 6-byte sender hardware address
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
