package conns

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The inet_diag filter language (include/uapi/linux/inet_diag.h): a
// program of operations, each {code u8, yes u8, no u16} followed by its
// operand. The kernel runs it per socket: a true condition moves on by
// "yes" bytes, a false one by "no"; a socket matches when the run ends
// exactly at the end of the program, and not when it jumps past it.
const (
	bcJmp   = 1 // unconditional: moves on by "no"
	bcSCond = 7 // local address (prefix) and port; operand inet_diag_hostcond
	bcDCond = 8 // remote address (prefix) and port; operand inet_diag_hostcond
)

// maxConds bounds the conditions of one filter program: an operation's
// "no" is 16 bits, and a program is one netlink attribute.
const maxConds = 1000

// hostcond is one condition of the filter: the local address (the remote
// one if remote) is addr and, unless port is -1, its port is port.
type hostcond struct {
	addr   netip.Addr
	port   int32
	remote bool
}

// filterProgram compiles "local address and port are one of conds" into
// inet_diag bytecode, as ss(8) compiles "a or b":
//
//	cond 1   yes: next op (the jump)   no: skip the jump, to cond 2
//	jump     to the end: match
//	cond 2   ...
//	cond n   yes: the end (match)      no: 4 bytes past the end (no match)
//
// An IPv4 condition also matches an IPv4-mapped address on an IPv6 socket
// (the kernel's rule), so one program serves both dumps.
func filterProgram(conds []hostcond) []byte {
	size := func(c hostcond) int { return 4 + 8 + len(c.addr.AsSlice()) }
	total := 0
	for i, c := range conds {
		total += size(c)
		if i < len(conds)-1 {
			total += 4
		}
	}
	b := make([]byte, 0, total)
	left := total
	for i, c := range conds {
		s := size(c)
		code := byte(bcSCond)
		if c.remote {
			code = bcDCond
		}
		b = append(b, code, byte(s))
		b = binary.NativeEndian.AppendUint16(b, uint16(s+4))
		fam := byte(unix.AF_INET)
		if c.addr.Is6() {
			fam = unix.AF_INET6
		}
		b = append(b, fam, byte(c.addr.BitLen()), 0, 0)
		b = binary.NativeEndian.AppendUint32(b, uint32(c.port))
		b = append(b, c.addr.AsSlice()...)
		left -= s
		if i < len(conds)-1 {
			// The jump lands exactly on the end.
			b = append(b, bcJmp, 4)
			b = binary.NativeEndian.AppendUint16(b, uint16(left))
			left -= 4
		}
	}
	return b
}

// conditions returns the filter's conditions: every address with every
// port, or every address with any port when that would be more than
// maxConds (the ports are checked on the answers then), or none when even
// the addresses are too many (everything is checked on the answers). The
// conditions are on the local end, on the remote end for Outbound; a
// Loopback filter's are on the local address, any port (its ports may be
// at either end).
func (f Filter) conditions() []hostcond {
	ports := []int32{-1}
	if len(f.Ports) > 0 && len(f.Addrs)*len(f.Ports) <= maxConds && f.Side != Loopback {
		ports = ports[:0]
		for _, p := range f.Ports {
			ports = append(ports, int32(p))
		}
	}
	if len(f.Addrs)*len(ports) > maxConds {
		return nil
	}
	var out []hostcond
	for _, a := range f.Addrs {
		for _, p := range ports {
			out = append(out, hostcond{addr: a.Unmap(), port: p, remote: f.Side == Outbound})
		}
	}
	return out
}
