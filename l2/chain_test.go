package l2

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"

	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// fakeFilter is a filter holding the rules in memory.
type fakeFilter struct {
	mu     sync.Mutex
	rules  map[ruleKind]map[netip.Addr][][]expr.Any
	setErr error
	closed bool
}

func newFakeFilter() *fakeFilter {
	return &fakeFilter{rules: map[ruleKind]map[netip.Addr][][]expr.Any{kindForward: {}, kindQuiesce: {}, kindLinger: {}, kindLingerARP: {}}}
}

func (f *fakeFilter) set(k ruleKind, vip netip.Addr, rules [][]expr.Any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setErr != nil {
		return f.setErr
	}
	f.rules[k][vip] = rules
	return nil
}

func (f *fakeFilter) del(k ruleKind, vip netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.rules[k], vip)
	return nil
}

func (f *fakeFilter) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// has reports whether rules of kind k are installed for vip.
func (f *fakeFilter) has(k ruleKind, vip netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.rules[k][vip]
	return ok
}

func (f *fakeFilter) get(k ruleKind, vip netip.Addr) [][]expr.Any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rules[k][vip]
}

// pkt is what the small nftables interpreter below evaluates rules on.
type pkt struct {
	network   []byte // network header (IPv4 or ARP)
	transport []byte // transport header
	l4proto   byte
	ctState   uint32 // expr.CtStateBit*
	iiftype   uint16 // the input interface's type (unix.ARPHRD_*)
}

// verdict is the outcome of a rule on a packet.
type verdict struct {
	matched bool
	drop    bool
	dupTo   netip.Addr
	dupDev  uint32
	// written is the network header after the rule's writes (nil: none).
	written []byte
}

// eval runs the expressions of one rule on p the way nf_tables does: a
// comparison that fails ends the rule without a verdict. It knows only the
// expressions Forward and Quiesce use, and fails the test on others.
func eval(t *testing.T, exprs []expr.Any, p pkt) verdict {
	t.Helper()
	regs := map[uint32][]byte{}
	var v verdict
	for _, e := range exprs {
		switch e := e.(type) {
		case *expr.Payload:
			if e.OperationType == expr.PayloadWrite {
				if e.Base != expr.PayloadBaseNetworkHeader || e.CsumType != expr.CsumTypeInet || e.CsumOffset != ipOffChecksum {
					t.Fatalf("payload write %+v: only the IPv4 header, with its checksum, is interpreted", e)
				}
				r := regs[e.SourceRegister]
				if len(r) != int(e.Len) || int(e.Offset+e.Len) > len(p.network) {
					t.Fatalf("payload write of %d bytes at %d from a register of %d", e.Len, e.Offset, len(r))
				}
				p.network = slices.Clone(p.network)
				copy(p.network[e.Offset:], r)
				v.written = p.network
				continue
			}
			src := p.network
			if e.Base == expr.PayloadBaseTransportHeader {
				src = p.transport
			}
			if int(e.Offset+e.Len) > len(src) {
				return verdict{}
			}
			regs[e.DestRegister] = slices.Clone(src[e.Offset : e.Offset+e.Len])
		case *expr.Meta:
			switch e.Key {
			case expr.MetaKeyL4PROTO:
				regs[e.Register] = []byte{p.l4proto}
			case expr.MetaKeyIIFTYPE:
				regs[e.Register] = binaryutil.NativeEndian.PutUint16(p.iiftype)
			default:
				t.Fatalf("meta key %v not interpreted", e.Key)
			}
		case *expr.Ct:
			if e.Key != expr.CtKeySTATE {
				t.Fatalf("ct key %v not interpreted", e.Key)
			}
			regs[e.Register] = binaryutil.NativeEndian.PutUint32(p.ctState)
		case *expr.Bitwise:
			r := regs[e.SourceRegister]
			if len(r) != int(e.Len) || len(e.Mask) != int(e.Len) || len(e.Xor) != int(e.Len) {
				t.Fatalf("bitwise length %d on register of %d bytes, mask %d, xor %d", e.Len, len(r), len(e.Mask), len(e.Xor))
			}
			out := make([]byte, e.Len)
			for i := range out {
				out[i] = r[i]&e.Mask[i] ^ e.Xor[i]
			}
			regs[e.DestRegister] = out
		case *expr.Cmp:
			r := regs[e.Register]
			if len(r) != len(e.Data) {
				t.Fatalf("cmp of %d bytes on a register of %d", len(e.Data), len(r))
			}
			eq := bytes.Equal(r, e.Data)
			if (e.Op == expr.CmpOpEq) != eq {
				return verdict{}
			}
			if e.Op != expr.CmpOpEq && e.Op != expr.CmpOpNeq {
				t.Fatalf("cmp op %v not interpreted", e.Op)
			}
		case *expr.Immediate:
			regs[e.Register] = e.Data
		case *expr.Dup:
			a, ok := netip.AddrFromSlice(regs[e.RegAddr])
			if !ok || !e.IsRegDevSet {
				t.Fatalf("dup without address or device: %+v", e)
			}
			v.dupTo, v.dupDev = a, binaryutil.NativeEndian.Uint32(regs[e.RegDev])
		case *expr.Verdict:
			v.matched = true
			v.drop = e.Kind == expr.VerdictDrop
			return v
		default:
			t.Fatalf("expression %T not interpreted", e)
		}
	}
	v.matched = true
	return v
}

// ipTCP returns the headers of a TCP segment to dst:port with flags.
func ipTCP(dst netip.Addr, port uint16, flags byte, ct uint32) pkt {
	ip := make([]byte, 20)
	ip[0], ip[9] = 0x45, unix.IPPROTO_TCP
	copy(ip[12:16], netip.MustParseAddr("192.0.2.100").AsSlice())
	copy(ip[16:20], dst.AsSlice())
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:2], 40000)
	binary.BigEndian.PutUint16(tcp[2:4], port)
	tcp[12], tcp[13] = 5<<4, flags
	return pkt{network: ip, transport: tcp, l4proto: unix.IPPROTO_TCP, ctState: ct, iiftype: unix.ARPHRD_ETHER}
}

const (
	fin, syn, rst, psh, ack = 0x01, 0x02, 0x04, 0x08, 0x10
	ctNew, ctEst, ctInv     = expr.CtStateBitNEW, expr.CtStateBitESTABLISHED, expr.CtStateBitINVALID
)

// TestForwardRuleMatches checks what Forward's rules do with packets: only
// segments without SYN, of no connection (conntrack new), to the VIP and
// one of its ports, are duplicated to the old holder on the interface and
// dropped.
func TestForwardRuleMatches(t *testing.T) {
	to := netip.MustParseAddr("192.0.2.11")
	rules := forwardRules(vip4, []uint16{6443, 443, 6443}, []netip.Addr{to}, testIndex)
	if len(rules) != 2 {
		t.Fatalf("%d rules for ports 6443, 443, 6443; want one per distinct port", len(rules))
	}
	other := netip.MustParseAddr("192.0.2.20")
	udp := ipTCP(vip4, 6443, ack, ctNew)
	udp.l4proto = unix.IPPROTO_UDP
	own := ipTCP(vip4, 6443, psh|ack, ctNew)
	own.iiftype = unix.ARPHRD_LOOPBACK
	for _, tc := range []struct {
		name string
		p    pkt
		fwd  bool
	}{
		{"mid-stream ACK of an unknown connection", ipTCP(vip4, 6443, ack, ctNew), true},
		{"PSH ACK of an unknown connection, second port", ipTCP(vip4, 443, psh|ack, ctNew), true},
		{"SYN: a new connection for this host", ipTCP(vip4, 6443, syn, ctNew), false},
		{"SYN ACK", ipTCP(vip4, 6443, syn|ack, ctNew), false},
		{"segment of a connection this host has", ipTCP(vip4, 6443, psh|ack, ctEst), false},
		{"invalid segment", ipTCP(vip4, 6443, fin|ack, ctInv), false},
		{"RST of no connection (invalid)", ipTCP(vip4, 6443, rst, ctInv), false},
		{"other port", ipTCP(vip4, 22, ack, ctNew), false},
		{"other destination", ipTCP(other, 6443, ack, ctNew), false},
		{"UDP", udp, false},
		{"the host's own connection, untracked, on loopback", own, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hit []verdict
			for _, r := range rules {
				if v := eval(t, r, tc.p); v.matched {
					hit = append(hit, v)
				}
			}
			if !tc.fwd {
				if len(hit) != 0 {
					t.Fatalf("rules matched: %+v", hit)
				}
				return
			}
			if len(hit) != 1 {
				t.Fatalf("%d rules matched, want 1", len(hit))
			}
			if v := hit[0]; !v.drop || v.dupTo != to || v.dupDev != testIndex {
				t.Fatalf("verdict %+v, want dup to %s device %d and drop", v, to, testIndex)
			}
			// The copy goes no further than the old holder: TTL 1, the
			// protocol kept.
			if w := hit[0].written; len(w) < 10 || w[8] != 1 || w[9] != unix.IPPROTO_TCP {
				t.Fatalf("the copy's IPv4 header %x, want TTL 1 and protocol TCP", w)
			}
		})
	}
}

// TestForwardEveryPort: without ports ([connections] ports left empty)
// one rule forwards unknown segments to the VIP on any TCP port, and still
// not SYNs, known connections or other addresses.
func TestForwardEveryPort(t *testing.T) {
	to := netip.MustParseAddr("192.0.2.11")
	rules := forwardRules(vip4, nil, []netip.Addr{to}, testIndex)
	if len(rules) != 1 {
		t.Fatalf("%d rules for every port, want 1", len(rules))
	}
	for _, tc := range []struct {
		name string
		p    pkt
		fwd  bool
	}{
		{"mid-stream ACK on 6443", ipTCP(vip4, 6443, ack, ctNew), true},
		{"mid-stream ACK on 22", ipTCP(vip4, 22, ack, ctNew), true},
		{"SYN", ipTCP(vip4, 22, syn, ctNew), false},
		{"known connection", ipTCP(vip4, 22, ack, ctEst), false},
		{"other destination", ipTCP(netip.MustParseAddr("192.0.2.20"), 22, ack, ctNew), false},
	} {
		v := eval(t, rules[0], tc.p)
		if v.matched != tc.fwd || (tc.fwd && (!v.drop || v.dupTo != to)) {
			t.Errorf("%s: %+v, want forwarded %v", tc.name, v, tc.fwd)
		}
	}
}

// arpPkt returns an Ethernet/IPv4 ARP packet with operation op for target.
func arpPkt(op uint16, target netip.Addr) pkt {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:2], 1)      // Ethernet
	binary.BigEndian.PutUint16(b[2:4], 0x0800) // IPv4
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:8], op)
	copy(b[14:18], netip.MustParseAddr("192.0.2.100").AsSlice())
	copy(b[24:28], target.AsSlice())
	return pkt{network: b}
}

// TestQuiesceRuleMatches checks that Quiesce's rule drops ARP requests for
// the VIP and nothing else.
func TestQuiesceRuleMatches(t *testing.T) {
	r := quiesceExprs(vip4)
	long := arpPkt(1, vip4)
	long.network[4] = 20 // an IPoIB-like hardware address length: offsets differ
	for _, tc := range []struct {
		name string
		p    pkt
		drop bool
	}{
		{"request for the VIP", arpPkt(1, vip4), true},
		{"reply to the VIP", arpPkt(2, vip4), false},
		{"request for another address", arpPkt(1, netip.MustParseAddr("192.0.2.11")), false},
		{"other hardware address length", long, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := eval(t, r, tc.p)
			if v.matched != tc.drop || v.drop != tc.drop {
				t.Fatalf("verdict %+v, want drop %v", v, tc.drop)
			}
		})
	}
}

func TestForwardRejects(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Config{}, newFakeAddrs("192.0.2.1/24", "2001:db8::1/64"))
	f := newFakeFilter()
	h.a.filter = f
	old := netip.MustParseAddr("192.0.2.11")
	for _, tc := range []struct {
		name        string
		vip, to     netip.Addr
		ports       []uint16
		unsupported bool
	}{
		{"IPv6 VIP", vip6, netip.MustParseAddr("2001:db8::11"), []uint16{6443}, true},
		{"IPv6 destination", vip4, netip.MustParseAddr("2001:db8::11"), []uint16{6443}, true},
		{"destination off the link", vip4, netip.MustParseAddr("198.51.100.11"), []uint16{6443}, true},
		{"destination is this host", vip4, netip.MustParseAddr("192.0.2.1"), []uint16{6443}, false},
		{"destination is the VIP", vip4, vip4, []uint16{6443}, false},
		{"invalid destination", vip4, netip.Addr{}, []uint16{6443}, false},
		{"port 0", vip4, old, []uint16{6443, 0}, false},
		{"invalid VIP", netip.Addr{}, old, []uint16{6443}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.a.Forward(ctx, tc.vip, tc.ports, tc.to)
			if err == nil {
				t.Fatal("Forward succeeded")
			}
			if got := errors.Is(err, ErrForwardUnsupported); got != tc.unsupported {
				t.Fatalf("Forward: %v; wraps ErrForwardUnsupported = %v, want %v", err, got, tc.unsupported)
			}
		})
	}
	if len(f.rules[kindForward]) != 0 {
		t.Fatalf("rules installed after errors: %v", f.rules[kindForward])
	}
	if err := h.a.Quiesce(ctx, vip6); !errors.Is(err, ErrForwardUnsupported) {
		t.Fatalf("Quiesce(IPv6) = %v, want ErrForwardUnsupported", err)
	}
	// Without nftables (New could not open it), both are unsupported.
	h.a.mu.Lock()
	h.a.filter, h.a.filterErr = nil, errors.New("protocol not supported")
	h.a.mu.Unlock()
	if err := h.a.Forward(ctx, vip4, []uint16{6443}, old); !errors.Is(err, ErrForwardUnsupported) {
		t.Fatalf("Forward without nftables = %v, want ErrForwardUnsupported", err)
	}
	if err := h.a.Quiesce(ctx, vip4); !errors.Is(err, ErrForwardUnsupported) {
		t.Fatalf("Quiesce without nftables = %v, want ErrForwardUnsupported", err)
	}
	if err := h.a.StopForward(ctx, vip4); err != nil {
		t.Fatalf("StopForward without nftables: %v", err)
	}
}

func TestForwardInstallsAndReplaces(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Config{}, newFakeAddrs("192.0.2.1/24"))
	f := newFakeFilter()
	h.a.filter = f
	if err := h.a.StopForward(ctx, vip4); err != nil {
		t.Fatalf("StopForward with nothing installed: %v", err)
	}
	old, other := netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")
	if err := h.a.Forward(ctx, vip4, []uint16{6443}, old); err != nil {
		t.Fatalf("Forward: %v", err)
	}
	if err := h.a.Forward(ctx, vip4, []uint16{6443, 443}, other); err != nil {
		t.Fatalf("second Forward: %v", err)
	}
	rules := f.get(kindForward, vip4)
	if len(rules) != 2 {
		t.Fatalf("%d rules after the second Forward, want its 2", len(rules))
	}
	for _, r := range rules {
		if v := eval(t, r, ipTCP(vip4, 443, ack, ctNew)); v.matched && v.dupTo != other {
			t.Fatalf("a rule still forwards to %s", v.dupTo)
		}
	}
	if err := h.a.StopForward(ctx, vip4); err != nil {
		t.Fatalf("StopForward: %v", err)
	}
	if f.has(kindForward, vip4) {
		t.Fatal("rules left after StopForward")
	}
}

// TestQuiesce checks that Quiesce stops the burst and installs the ARP rule,
// that Announce ends it (and advertises again) and that Withdraw ends it
// after removing the address.
func TestQuiesce(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Config{GARPCount: 5}, nil)
	f := newFakeFilter()
	h.a.filter = f
	if err := h.a.Announce(ctx, vip4); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	w := h.clock.next(t)
	if err := h.a.Quiesce(ctx, vip4); err != nil {
		t.Fatalf("Quiesce: %v", err)
	}
	w.fire <- time.Time{}
	h.clock.idle(t)
	if got := h.advertisements(); got != 1 {
		t.Fatalf("%d advertisements, want only the first one: Quiesce stops the burst", got)
	}
	if !f.has(kindQuiesce, vip4) {
		t.Fatal("no quiesce rule")
	}
	if held, _ := h.a.Held(vip4); !held {
		t.Fatal("Quiesce removed the address")
	}

	// Called off: Announce answers ARP again and advertises.
	if err := h.a.Announce(ctx, vip4); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	if f.has(kindQuiesce, vip4) {
		t.Fatal("quiesce rule left after Announce")
	}
	if got := h.advertisements(); got != 2 {
		t.Fatalf("%d advertisements, want a new one from Announce", got)
	}

	if err := h.a.Quiesce(ctx, vip4); err != nil {
		t.Fatalf("Quiesce: %v", err)
	}
	if err := h.a.Withdraw(ctx, vip4); err != nil {
		t.Fatalf("Withdraw: %v", err)
	}
	if f.has(kindQuiesce, vip4) {
		t.Fatal("quiesce rule left after Withdraw")
	}
	if held, _ := h.a.Held(vip4); held {
		t.Fatal("address left after Withdraw")
	}
}

func TestQuiesceErrorKeepsNothing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Config{}, nil)
	f := newFakeFilter()
	f.setErr = errBoom
	h.a.filter = f
	if err := h.a.Quiesce(ctx, vip4); !errors.Is(err, errBoom) {
		t.Fatalf("Quiesce = %v, want %v", err, errBoom)
	}
	h.a.mu.Lock()
	q := h.a.quiesced[vip4]
	h.a.mu.Unlock()
	if q {
		t.Fatal("a failed Quiesce is remembered as installed")
	}
}

func TestCloseRemovesRules(t *testing.T) {
	ctx := context.Background()
	addrs := newFakeAddrs("192.0.2.1/24")
	h := newHarness(t, Config{}, addrs)
	f := newFakeFilter()
	h.a.filter = f
	vip2 := netip.MustParseAddr("192.0.2.20")
	if err := h.a.Forward(ctx, vip4, []uint16{6443}, netip.MustParseAddr("192.0.2.11")); err != nil {
		t.Fatalf("Forward: %v", err)
	}
	if err := h.a.Quiesce(ctx, vip2); err != nil {
		t.Fatalf("Quiesce: %v", err)
	}
	if err := h.a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if f.has(kindForward, vip4) || f.has(kindQuiesce, vip2) || !f.closed {
		t.Fatalf("after Close: rules %v, closed %v", f.rules, f.closed)
	}
	if err := h.a.Forward(ctx, vip4, []uint16{6443}, netip.MustParseAddr("192.0.2.11")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Forward after Close = %v, want net.ErrClosed", err)
	}
}

// TestChainHooks checks the hooks of vipd's base chains: the arp family
// numbers its hooks apart from the inet ones (NF_ARP_IN is 0, and 1, the
// inet input hook's number, is NF_ARP_OUT there).
func TestChainHooks(t *testing.T) {
	for _, tc := range []struct {
		k          ruleKind
		family     nftables.TableFamily
		hook       uint32
		prio       int32
		table, chn string
	}{
		{kindForward, nftables.TableFamilyIPv4, unix.NF_INET_PRE_ROUTING, -150, ForwardTable, "prerouting"},
		{kindQuiesce, nftables.TableFamilyARP, 0 /* NF_ARP_IN */, 0, QuiesceTable, "input"},
	} {
		tb, c := tableOf(tc.k)
		if tb.Family != tc.family || tb.Name != tc.table || c.Table != tb || c.Name != tc.chn {
			t.Errorf("%s: table %+v chain %s", tc.k, tb, c.Name)
		}
		if c.Hooknum == nil || uint32(*c.Hooknum) != tc.hook || c.Priority == nil || int32(*c.Priority) != tc.prio || c.Type != nftables.ChainTypeFilter {
			t.Errorf("%s: chain hook %v priority %v type %s, want hook %d priority %d filter", tc.k, c.Hooknum, c.Priority, c.Type, tc.hook, tc.prio)
		}
	}
}

// TestLingerLifecycle: Linger takes the address off and leaves the
// quiesce rule, the linger rules and the local route; Announce (the host
// holds the VIP again), Withdraw, StopLinger and Close each end all of
// it, the address back only with Announce.
func TestLingerLifecycle(t *testing.T) {
	ctx := context.Background()
	for _, end := range []string{"announce", "withdraw", "stop", "close"} {
		t.Run(end, func(t *testing.T) {
			fa := newFakeAddrs("192.0.2.1/24")
			h := newHarness(t, Config{}, fa)
			f := newFakeFilter()
			h.a.filter = f
			if err := h.a.Announce(ctx, vip4); err != nil {
				t.Fatal(err)
			}
			if err := h.a.Linger(ctx, vip4); err != nil {
				t.Fatal(err)
			}
			if !f.has(kindLingerARP, vip4) {
				t.Fatal("lingering: no rule keeping the VIP out of the host's ARP requests")
			}
			if held, _ := h.a.Held(vip4); held || !fa.hasLocal(vip4) || !f.has(kindQuiesce, vip4) || len(f.get(kindLinger, vip4)) != 3 {
				t.Fatalf("lingering: address %v, local route %v, quiesce %v, linger rules %d; want no address, the route, both rules",
					held, fa.hasLocal(vip4), f.has(kindQuiesce, vip4), len(f.get(kindLinger, vip4)))
			}
			var err error
			switch end {
			case "announce":
				err = h.a.Announce(ctx, vip4)
			case "withdraw":
				err = h.a.Withdraw(ctx, vip4)
			case "stop":
				err = h.a.StopLinger(ctx, vip4)
			case "close":
				err = h.a.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			if fa.hasLocal(vip4) || f.has(kindQuiesce, vip4) || f.has(kindLinger, vip4) || f.has(kindLingerARP, vip4) {
				t.Fatalf("after %s: local route %v, quiesce %v, linger %v; want none", end, fa.hasLocal(vip4), f.has(kindQuiesce, vip4), f.has(kindLinger, vip4))
			}
			if end != "close" {
				if held, _ := h.a.Held(vip4); held != (end == "announce") {
					t.Fatalf("after %s: address %v", end, held)
				}
			}
		})
	}
	h := newHarness(t, Config{}, newFakeAddrs("192.0.2.1/24", "2001:db8::1/64"))
	h.a.filter = newFakeFilter()
	if err := h.a.Linger(ctx, vip6); !errors.Is(err, ErrForwardUnsupported) {
		t.Fatalf("Linger of an IPv6 VIP: %v, want ErrForwardUnsupported", err)
	}
}
