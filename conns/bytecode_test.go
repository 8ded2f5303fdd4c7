package conns

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// The kernel's checks and interpreter of inet_diag filter programs
// (net/ipv4/inet_diag.c: inet_diag_bc_audit, inet_diag_bc_run), for the
// operations filterProgram uses, so the program is tested without root.
// The netns tests run it in the real kernel.

// kernelAudit is inet_diag_bc_audit: every jump lands on an operation (or
// the end, or 4 bytes past it) and every operand fits.
func kernelAudit(bc []byte) error {
	validCC := func(cc int) bool {
		for p, l := 0, len(bc); l >= 0; {
			if cc > l {
				return false
			}
			if cc == l {
				return true
			}
			yes := int(bc[p+1])
			if yes < 4 || yes&3 != 0 {
				return false
			}
			l -= yes
			p += yes
		}
		return false
	}
	if len(bc) < 4 {
		return fmt.Errorf("program of %d bytes", len(bc))
	}
	for p, l := 0, len(bc); l > 0; {
		if l < 4 {
			return fmt.Errorf("op at %d truncated", p)
		}
		code, yes, no := bc[p], int(bc[p+1]), int(binary.NativeEndian.Uint16(bc[p+2:]))
		minLen := 4
		switch code {
		case bcSCond, bcDCond:
			minLen += 8
			if l < minLen {
				return fmt.Errorf("hostcond at %d truncated", p)
			}
			switch bc[p+4] {
			case unix.AF_INET:
				minLen += 4
			case unix.AF_INET6:
				minLen += 16
			default:
				return fmt.Errorf("hostcond at %d: family %d", p, bc[p+4])
			}
			if l < minLen || int(bc[p+5]) > 8*(minLen-12) {
				return fmt.Errorf("hostcond at %d: bad address", p)
			}
		case bcJmp:
		default:
			return fmt.Errorf("op %d at %d", code, p)
		}
		if no < minLen || no > l+4 || no&3 != 0 {
			return fmt.Errorf("op at %d: no %d (len %d)", p, no, l)
		}
		if no < l && !validCC(l-no) {
			return fmt.Errorf("op at %d: no %d lands inside an op", p, no)
		}
		if yes < minLen || yes > l+4 || yes&3 != 0 {
			return fmt.Errorf("op at %d: yes %d (len %d)", p, yes, l)
		}
		p += yes
		l -= yes
	}
	return nil
}

// kernelRun is inet_diag_bc_run for a socket of family fam with local
// address saddr (16 bytes for IPv6) and port sport, and remote address
// daddr and port dport.
func kernelRun(bc []byte, fam byte, saddr netip.Addr, sport uint16, daddr netip.Addr, dport uint16) bool {
	p, l := 0, len(bc)
	for l > 0 {
		yes := true
		switch bc[p] {
		case bcJmp:
			yes = false
		case bcSCond, bcDCond:
			a, sp := saddr, sport
			if bc[p] == bcDCond {
				a, sp = daddr, dport
			}
			cfam, plen := bc[p+4], int(bc[p+5])
			port := int32(binary.NativeEndian.Uint32(bc[p+8:]))
			n := 4
			if cfam == unix.AF_INET6 {
				n = 16
			}
			caddr := bc[p+12 : p+12+n]
			addr := a.AsSlice()
			switch {
			case port != -1 && port != int32(sp):
				yes = false
			case cfam != fam:
				mapped := fam == unix.AF_INET6 && cfam == unix.AF_INET && a.Is4In6()
				yes = mapped && prefixMatch(addr[12:], caddr, plen)
			case plen == 0:
			default:
				yes = prefixMatch(addr, caddr, plen)
			}
		}
		step := int(binary.NativeEndian.Uint16(bc[p+2:]))
		if yes {
			step = int(bc[p+1])
		}
		p += step
		l -= step
	}
	return l == 0
}

func prefixMatch(a, b []byte, bits int) bool {
	for i := 0; i < bits; i++ {
		if (a[i/8]>>(7-i%8))&1 != (b[i/8]>>(7-i%8))&1 {
			return false
		}
	}
	return true
}

func TestFilterProgram(t *testing.T) {
	v4a, v4b := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20")
	v6a := netip.MustParseAddr("2001:db8::10")
	filters := map[string]Filter{
		"one IPv4 VIP":              {Addrs: []netip.Addr{v4a}},
		"one IPv6 VIP":              {Addrs: []netip.Addr{v6a}},
		"one VIP, one port":         {Addrs: []netip.Addr{v4a}, Ports: []uint16{6443}},
		"three VIPs, two ports":     {Addrs: []netip.Addr{v4a, v6a, v4b}, Ports: []uint16{6443, 443}},
		"IPv4-mapped VIP in config": {Addrs: []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.10")}, Ports: []uint16{6443}},
	}
	type sock struct {
		fam  byte
		addr string
		port uint16
	}
	socks := []sock{
		{unix.AF_INET, "192.0.2.10", 6443}, {unix.AF_INET, "192.0.2.10", 443}, {unix.AF_INET, "192.0.2.10", 8080},
		{unix.AF_INET, "192.0.2.20", 6443}, {unix.AF_INET, "192.0.2.11", 6443}, {unix.AF_INET, "192.0.2.138", 6443},
		{unix.AF_INET6, "::ffff:192.0.2.10", 6443}, {unix.AF_INET6, "::ffff:192.0.2.11", 6443},
		{unix.AF_INET6, "::ffff:192.0.2.20", 443}, {unix.AF_INET6, "2001:db8::10", 6443},
		{unix.AF_INET6, "2001:db8::10", 443}, {unix.AF_INET6, "2001:db8::11", 6443},
		{unix.AF_INET6, "::c000:20a", 6443}, // IPv4-compatible, not mapped
	}
	for name, f := range filters {
		t.Run(name, func(t *testing.T) {
			bc := filterProgram(f.conditions())
			if err := kernelAudit(bc); err != nil {
				t.Fatalf("the kernel would refuse the program: %v\n%x", err, bc)
			}
			uf := f.unmapped()
			for _, s := range socks {
				a := netip.MustParseAddr(s.addr)
				// An IPv4 VIP matches its IPv4-mapped form on an IPv6
				// socket, nothing else.
				want := slices.Contains(uf.Addrs, a.Unmap()) && (len(f.Ports) == 0 || slices.Contains(f.Ports, s.port))
				peer := netip.MustParseAddr("198.51.100.7")
				if s.fam == unix.AF_INET6 {
					peer = netip.MustParseAddr("2001:db8:ff::7")
				}
				if got := kernelRun(bc, s.fam, a, s.port, peer, 40000); got != want {
					t.Errorf("socket %s port %d: match %v, want %v", a, s.port, got, want)
				}
			}
		})
	}
}

// TestFilterConditionsBounded: a filter too large for one program is
// narrowed to its addresses (ports checked on the answers), or dropped.
func TestFilterConditionsBounded(t *testing.T) {
	addrs := func(n int) []netip.Addr {
		var out []netip.Addr
		for i := range n {
			out = append(out, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}))
		}
		return out
	}
	ports := make([]uint16, 20)
	for i := range ports {
		ports[i] = uint16(6000 + i)
	}
	if got := len((Filter{Addrs: addrs(100), Ports: ports[:10]}).conditions()); got != 1000 {
		t.Errorf("100 VIPs x 10 ports: %d conditions, want 1000", got)
	}
	c := Filter{Addrs: addrs(100), Ports: ports}.conditions()
	if len(c) != 100 || c[0].port != -1 {
		t.Errorf("100 VIPs x 20 ports: %d conditions (port %d), want 100 with any port", len(c), c[0].port)
	}
	if err := kernelAudit(filterProgram(c)); err != nil {
		t.Errorf("100 VIPs: %v", err)
	}
	big := make([]netip.Addr, 0, 1001)
	for i := range 1001 {
		big = append(big, netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}))
	}
	if got := (Filter{Addrs: big}).conditions(); got != nil {
		t.Errorf("1001 addresses: %d conditions, want none (filtered on the answers)", len(got))
	}
	if err := kernelAudit(filterProgram((Filter{Addrs: addrs(50), Ports: ports}).conditions())); err != nil {
		t.Errorf("50 VIPs x 20 ports: %v", err)
	}
}

// TestFilterProgramOutbound: an Outbound filter's program selects by the
// remote end: the host's own connections to the VIP served elsewhere (the
// local end is checked on the answers).
func TestFilterProgramOutbound(t *testing.T) {
	vip, vip6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	f := Filter{Addrs: []netip.Addr{vip, vip6}, Ports: []uint16{6443}, Side: Outbound}
	bc := filterProgram(f.conditions())
	if err := kernelAudit(bc); err != nil {
		t.Fatalf("the kernel would refuse the program: %v\n%x", err, bc)
	}
	node, node6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	cases := []struct {
		fam    byte
		local  netip.Addr
		lport  uint16
		remote netip.Addr
		rport  uint16
		want   bool
	}{
		{unix.AF_INET, node, 40000, vip, 6443, true},
		{unix.AF_INET, node, 40000, vip, 443, false},
		{unix.AF_INET, vip, 6443, node, 40000, false}, // a client's connection to the VIP
		{unix.AF_INET6, netip.MustParseAddr("::ffff:192.0.2.1"), 40000, netip.MustParseAddr("::ffff:192.0.2.10"), 6443, true},
		{unix.AF_INET6, node6, 40000, vip6, 6443, true},
		{unix.AF_INET6, node6, 40000, node6, 6443, false},
	}
	for _, c := range cases {
		if got := kernelRun(bc, c.fam, c.local, c.lport, c.remote, c.rport); got != c.want {
			t.Errorf("socket %s:%d -> %s:%d: match %v, want %v", c.local, c.lport, c.remote, c.rport, got, c.want)
		}
	}
	if lb := (Filter{Addrs: f.Addrs, Ports: f.Ports, Side: Loopback}).conditions(); len(lb) != 2 || lb[0].port != -1 || lb[0].remote {
		t.Errorf("Loopback conditions %+v, want the two local addresses on any port", lb)
	}
}

func TestFilterMatch(t *testing.T) {
	f := Filter{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}, Ports: []uint16{6443}}
	cases := []struct {
		c    Conn
		want bool
	}{
		{conn("192.0.2.10:6443", "198.51.100.7:40000"), true},
		{conn("192.0.2.10:443", "198.51.100.7:40000"), false},
		{conn("192.0.2.11:6443", "198.51.100.7:40000"), false},
		{conn("192.0.2.10:6443", "192.0.2.10:40000"), false}, // the host's own connection to its VIP
	}
	for _, c := range cases {
		if got := f.Match(c.c); got != c.want {
			t.Errorf("match(%v) = %v, want %v", c.c, got, c.want)
		}
	}
	// The host's own connections to the VIP served elsewhere, and to
	// itself through it.
	sides := []struct {
		side Side
		c    Conn
		want bool
	}{
		{Outbound, conn("192.0.2.1:40000", "192.0.2.10:6443"), true},
		{Outbound, conn("192.0.2.1:40000", "192.0.2.10:443"), false},
		{Outbound, conn("192.0.2.10:40000", "192.0.2.10:6443"), false},
		{Outbound, conn("192.0.2.10:6443", "198.51.100.7:40000"), false},
		{Loopback, conn("192.0.2.10:40000", "192.0.2.10:6443"), true}, // the client's end
		{Loopback, conn("192.0.2.10:6443", "192.0.2.10:40000"), true}, // the server's
		{Loopback, conn("192.0.2.10:40000", "192.0.2.10:443"), false},
		{Loopback, conn("192.0.2.10:6443", "198.51.100.7:40000"), false},
		{Loopback, conn("192.0.2.1:40000", "192.0.2.10:6443"), false},
	}
	for _, c := range sides {
		g := f
		g.Side = c.side
		if got := g.Match(c.c); got != c.want {
			t.Errorf("side %d: match(%v) = %v, want %v", c.side, c.c, got, c.want)
		}
	}
}

func TestParseDiagMsg(t *testing.T) {
	msg := func(fam byte, src, dst string, sport, dport uint16) []byte {
		m := make([]byte, diagMsgLen)
		m[0], m[1] = fam, tcpEstablished
		binary.BigEndian.PutUint16(m[4:], sport)
		binary.BigEndian.PutUint16(m[6:], dport)
		copy(m[8:], netip.MustParseAddr(src).AsSlice())
		copy(m[24:], netip.MustParseAddr(dst).AsSlice())
		return m
	}
	cases := []struct {
		m    []byte
		want Conn
	}{
		{msg(unix.AF_INET, "192.0.2.10", "198.51.100.7", 6443, 40000), conn("192.0.2.10:6443", "198.51.100.7:40000")},
		{msg(unix.AF_INET6, "::ffff:192.0.2.10", "::ffff:198.51.100.7", 6443, 40000), conn("192.0.2.10:6443", "198.51.100.7:40000")},
		{msg(unix.AF_INET6, "2001:db8::10", "2001:db8::7", 443, 1025), conn("[2001:db8::10]:443", "[2001:db8::7]:1025")},
	}
	for _, c := range cases {
		got, err := parseDiagMsg(c.m)
		if err != nil || got != c.want {
			t.Errorf("parseDiagMsg = %v, %v; want %v", got, err, c.want)
		}
	}
	if _, err := parseDiagMsg(make([]byte, diagMsgLen-1)); err == nil {
		t.Error("a short message parsed")
	}
	if _, err := parseDiagMsg(msg(unix.AF_INET, "192.0.2.10", "198.51.100.7", 1, 1)[:0]); err == nil {
		t.Error("an empty message parsed")
	}
	bad := msg(unix.AF_INET, "192.0.2.10", "198.51.100.7", 1, 1)
	bad[0] = unix.AF_UNIX
	if _, err := parseDiagMsg(bad); err == nil {
		t.Error("a message of family AF_UNIX parsed")
	}
}
