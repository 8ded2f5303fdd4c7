package conns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// A Filter selects established TCP connections by their local end.
type Filter struct {
	// Addrs are the addresses (the VIPs). A Filter without any matches
	// nothing. An IPv4 address also matches IPv4 clients of a dual-stack
	// (IPv6) socket, as a server listening on ":6443" has them.
	Addrs []netip.Addr
	// Ports, when not empty, are the ports to match (the VIP's service
	// ports, such as 6443) at the end Side says; empty matches every port.
	Ports []uint16
	// Side says which end of a connection Addrs and Ports are: Served
	// (the zero value), Outbound or Loopback.
	Side Side
}

// Side is the end of a connection a Filter selects by.
type Side uint8

const (
	// Served selects clients' connections to the host's Addrs: the local
	// end is one of Addrs (its port one of Ports), the remote end is not
	// one of them (a connection of the host to its own VIP is not a
	// client's).
	Served Side = iota
	// Outbound selects the host's own connections to Addrs that another
	// host serves: the remote end is one of Addrs (its port one of Ports),
	// the local end is not one of them. Once the host has the address
	// itself such a connection is dead: its segments stay on the host,
	// and the server's answers, from an address the host now has, are
	// dropped as martians.
	Outbound
	// Loopback selects the host's connections to itself through Addrs:
	// both ends are one of Addrs, and either port one of Ports. Once the
	// host no longer has the address they are dead: the host cannot send
	// from it.
	Loopback
)

// Match reports whether c (unmapped) is selected by f.
func (f Filter) Match(c Conn) bool {
	local, remote := slices.Contains(f.Addrs, c.Local.Addr()), slices.Contains(f.Addrs, c.Remote.Addr())
	port := func(ps ...uint16) bool {
		return len(f.Ports) == 0 || slices.ContainsFunc(ps, func(p uint16) bool { return slices.Contains(f.Ports, p) })
	}
	switch f.Side {
	case Outbound:
		return remote && !local && port(c.Remote.Port())
	case Loopback:
		return local && remote && port(c.Local.Port(), c.Remote.Port())
	default:
		return local && !remote && port(c.Local.Port())
	}
}

// unmapped returns f with its addresses unmapped.
func (f Filter) unmapped() Filter {
	out := Filter{Ports: f.Ports, Side: f.Side}
	for _, a := range f.Addrs {
		out.Addrs = append(out.Addrs, a.Unmap())
	}
	return out
}

// A Table reads and closes the host's TCP connections through the kernel's
// sock_diag netlink interface (what ss(8) uses). It works in the network
// namespace it was opened in. A Table is safe for concurrent use; Close
// releases it.
type Table struct {
	sock    *nl.NetlinkSocket
	sockets map[int]*nl.SocketHandle
}

// Open opens a sock_diag netlink socket in the calling thread's network
// namespace.
func Open() (*Table, error) {
	s, err := nl.Subscribe(unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("conns: open sock_diag netlink socket: %w", err)
	}
	// A dump always ends; the timeout only guards against a kernel that
	// never answers.
	tv := unix.NsecToTimeval(int64(diagTimeout))
	if err := s.SetReceiveTimeout(&tv); err != nil {
		s.Close()
		return nil, fmt.Errorf("conns: sock_diag socket: %w", err)
	}
	return &Table{sock: s, sockets: map[int]*nl.SocketHandle{unix.NETLINK_SOCK_DIAG: {Socket: s}}}, nil
}

// Close closes the netlink socket.
func (t *Table) Close() error {
	t.sock.Close()
	return nil
}

// List returns the established TCP connections that f selects (see
// Filter), IPv4 and IPv6, with IPv4-mapped addresses reported as IPv4.
// The kernel filters the sockets (a filter program per dump), so listing a
// few VIPs' connections costs about the same on a host with many other
// sockets. A listing is a snapshot taken while connections come and go: a
// connection opened or closed during it may be missing or present.
func (t *Table) List(f Filter) (Set, error) {
	var ks []key
	err := t.dump(f, 0, func(c Conn, _ []byte) {
		if c.Valid() {
			ks = append(ks, toKey(c))
		}
	})
	if err != nil {
		return Set{}, err
	}
	sortKeys(ks)
	return Set{k: slices.Compact(ks)}, nil
}

// Destroy closes the established TCP connections that f selects, as
// `ss -K` does (SOCK_DESTROY): the kernel sends each client a reset with
// the right sequence number, and the local application's next call on the
// socket fails (ECONNABORTED). It returns how many were closed; a
// connection that ended by itself meanwhile is not an error. It needs
// CAP_NET_ADMIN and a kernel built with CONFIG_INET_DIAG_DESTROY; without
// them the first close fails, and Destroy returns that error.
//
// A client whose request is unanswered at that moment sees it fail (an
// HTTP client does not send a write again by itself); DestroyIdle waits
// for each connection's quiet moment.
func (t *Table) Destroy(f Filter) (int, error) {
	var vs []victim
	err := t.dump(f, 0, func(_ Conn, msg []byte) { vs = append(vs, victimOf(msg)) })
	if err != nil {
		return 0, err
	}
	return t.destroy(vs)
}

// DestroyResult counts the connections DestroyIdle closed.
type DestroyResult struct {
	// Idle were closed between requests.
	Idle int
	// Busy were closed at IdleConfig.Until, an answer still owed (or data
	// still unread).
	Busy int
	// Left were still busy when ctx ended, and are left open.
	Left int
}

// IdleConfig says how DestroyIdle waits for idle moments.
type IdleConfig struct {
	// Poll is how often the connections not yet idle are looked at
	// again.
	Poll time.Duration
	// Quiet is how long a connection must have carried no data either
	// way to be idle (Activity.Idle). On a connection that carries one
	// request at a time (HTTP/1.1) the answer having gone out is enough;
	// on one that multiplexes (HTTP/2: a kubelet's watches, lease renewals
	// and status updates share one), data the host sent may be another
	// stream's (a watch event) while a request is still being worked on,
	// and only silence longer than the server takes to answer tells it
	// apart. Zero: the answer having gone out is enough. The silence
	// asked for shrinks as Until nears (quietAt), down to none at Until:
	// the longest silence a connection has is a better moment than
	// Until's, which may fall anywhere.
	Quiet time.Duration
	// Until is when the connections still busy are closed anyway.
	Until time.Time
}

// DestroyIdle closes the established TCP connections that f selects, as
// Destroy does, each at a moment it is idle (Activity.Idle with
// c.Quiet): nothing the client sent is left unread, everything the host
// wrote has reached the client, the host's last data went out after the
// client's last data came in, and nothing has gone either way for
// c.Quiet. A connection that is not idle is looked at again every c.Poll
// until c.Until; those still busy then are closed anyway (Busy).
// Connections that appear meanwhile are closed too. It returns when none
// is left, or when ctx ends: the closing is called off, and what is still
// busy is left open (Left).
//
// It is meant for a host whose connections keep working while it waits
// (the successor forwards their packets to it: a planned handoff with
// daisy-chaining), so that a client's request in flight is answered
// before its connection closes, and its next request goes out on a new
// connection to the new holder. No test on a connection's bytes can tell
// that an HTTP/2 connection has no request in flight (TLS hides the
// frames); c.Quiet makes a cut need a request that the server leaves
// unanswered for longer than c.Quiet after it last sent anything. A
// connection whose client spoke last without asking anything (an HTTP/2
// WINDOW_UPDATE, say) looks busy until the host sends again or c.Until.
func (t *Table) DestroyIdle(ctx context.Context, f Filter, c IdleConfig) (DestroyResult, error) {
	var res DestroyResult
	start := time.Now()
	for {
		var idle, busy []victim
		quiet := c.quietAt(start, time.Now())
		err := t.dump(f, 1<<(inetDiagInfo-1), func(_ Conn, msg []byte) {
			if a, ok := activityOf(msg); !ok || a.Idle(quiet) {
				idle = append(idle, victimOf(msg))
			} else {
				busy = append(busy, victimOf(msg))
			}
		})
		if err != nil {
			return res, err
		}
		if ctx.Err() != nil {
			res.Left = len(idle) + len(busy)
			return res, nil
		}
		n, err := t.destroy(idle)
		res.Idle += n
		if err != nil || len(busy) == 0 {
			return res, err
		}
		wait := time.Until(c.Until)
		if wait <= 0 {
			n, err := t.destroy(busy)
			res.Busy += n
			return res, err
		}
		timer := time.NewTimer(min(wait, c.Poll))
		select {
		case <-ctx.Done():
			timer.Stop()
			res.Left = len(busy)
			return res, nil
		case <-timer.C:
		}
	}
}

// quietAt is the silence asked for at now of a closing that began at
// start: c.Quiet, shrinking in proportion to the time left until c.Until.
func (c IdleConfig) quietAt(start, now time.Time) time.Duration {
	total, left := c.Until.Sub(start), c.Until.Sub(now)
	if total <= 0 || left <= 0 {
		return 0
	}
	return time.Duration(float64(c.Quiet) * min(float64(left)/float64(total), 1))
}

// A victim is a socket to destroy: its family and its sockid as the
// kernel gave it.
type victim struct {
	family byte
	id     [sockIDLen]byte
}

func victimOf(msg []byte) victim {
	v := victim{family: msg[0]}
	copy(v.id[:], msg[4:4+sockIDLen])
	return v
}

// destroy closes vs and counts them; one that ended by itself since the
// dump is not an error.
func (t *Table) destroy(vs []victim) (int, error) {
	n := 0
	for _, v := range vs {
		req := t.request(unix.SOCK_DESTROY, unix.NLM_F_ACK)
		req.AddData(&diagReq{family: v.family, id: v.id})
		err := req.ExecuteIter(unix.NETLINK_SOCK_DIAG, 0, func([]byte) bool { return true })
		switch {
		case err == nil:
			n++
		case errors.Is(err, unix.ENOENT):
			// Gone by itself since the dump.
		default:
			return n, fmt.Errorf("conns: destroy a connection: %w", err)
		}
	}
	return n, nil
}

// Activity is what the kernel tells of a connection's last exchange.
type Activity struct {
	// Unread is how many bytes the client sent that the application has
	// not read yet (inet_diag_msg's idiag_rqueue).
	Unread uint32
	// Unsent is how many bytes the application wrote that the client has
	// not acknowledged yet: still in the send queue, or sent and not
	// acknowledged (idiag_wqueue: write_seq - snd_una). Closing the
	// connection discards them.
	Unsent uint32
	// SentAgo and RecvAgo are how long ago the host last sent and last
	// received data on it, in milliseconds (tcp_info's
	// tcpi_last_data_sent and tcpi_last_data_recv), counted in the
	// kernel's ticks (4 ms at HZ=250).
	SentAgo, RecvAgo uint32
}

// SameTickIdle: data sent and received in the same kernel tick, this long
// ago or longer, count as a request and its answer. A request that came in
// the very tick another answer went out and is unanswered this long after
// is rare; waiting for ctx is the other way, and it holds up the handoff.
const SameTickIdle = 250

// Idle reports whether the connection is between requests: nothing
// unread, nothing unacknowledged, the host's last data sent after the
// client's last data received (or in the same tick, SameTickIdle ago or
// longer), and no data either way for quiet.
func (a Activity) Idle(quiet time.Duration) bool {
	q := uint32(min(max(quiet.Milliseconds(), 0), math.MaxUint32))
	switch {
	case a.Unread > 0 || a.Unsent > 0:
		return false
	case a.SentAgo < a.RecvAgo:
		return a.SentAgo >= q
	default:
		return a.SentAgo == a.RecvAgo && a.RecvAgo >= max(SameTickIdle, q)
	}
}

// activityOf reads a connection's Activity from an inet_diag_msg followed
// by its INET_DIAG_INFO attribute; ok is false without the attribute.
func activityOf(msg []byte) (a Activity, ok bool) {
	if len(msg) < diagMsgLen {
		return Activity{}, false
	}
	a.Unread = binary.NativeEndian.Uint32(msg[diagRqueue:])
	a.Unsent = binary.NativeEndian.Uint32(msg[diagWqueue:])
	for b := msg[diagMsgLen:]; len(b) >= 4; {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			return Activity{}, false
		}
		if binary.NativeEndian.Uint16(b[2:]) == inetDiagInfo {
			info := b[4:l]
			if len(info) < tcpInfoLastDataRecv+4 {
				return Activity{}, false
			}
			a.SentAgo = binary.NativeEndian.Uint32(info[tcpInfoLastDataSent:])
			a.RecvAgo = binary.NativeEndian.Uint32(info[tcpInfoLastDataRecv:])
			return a, true
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return Activity{}, false
}

// dump runs one sock_diag dump per address family that f needs and calls
// found with each selected connection and its inet_diag_msg (followed by
// the attributes ext asks for: idiag_ext's bits).
func (t *Table) dump(f Filter, ext byte, found func(Conn, []byte)) error {
	f = f.unmapped()
	if len(f.Addrs) == 0 {
		return nil
	}
	var bc *nl.RtAttr
	if conds := f.conditions(); len(conds) > 0 {
		bc = nl.NewRtAttr(inetDiagReqBytecode, filterProgram(conds))
	}
	// IPv4 clients of a dual-stack socket are in the IPv6 dump.
	families := []byte{unix.AF_INET6}
	if slices.ContainsFunc(f.Addrs, netip.Addr.Is4) {
		families = append(families, unix.AF_INET)
	}
	for _, fam := range families {
		req := t.request(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_DUMP)
		req.AddData(&diagReq{family: fam, ext: ext, states: 1 << tcpEstablished})
		if bc != nil {
			req.AddData(bc)
		}
		var bad error
		err := req.ExecuteIter(unix.NETLINK_SOCK_DIAG, unix.SOCK_DIAG_BY_FAMILY, func(msg []byte) bool {
			c, err := parseDiagMsg(msg)
			if err != nil {
				bad = err
				return false
			}
			if f.Match(c) {
				found(c, msg)
			}
			return true
		})
		// An interrupted dump is as good as any snapshot here.
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return fmt.Errorf("conns: list TCP connections: %w", err)
		}
		if bad != nil {
			return fmt.Errorf("conns: list TCP connections: %w", bad)
		}
	}
	return nil
}

func (t *Table) request(typ, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(typ, flags)
	req.Sockets = t.sockets
	return req
}

// sock_diag constants and layouts (include/uapi/linux/inet_diag.h).
// diagTimeout bounds the wait for the kernel's answer.
const diagTimeout = 10 * time.Second

const (
	inetDiagReqBytecode = 1  // INET_DIAG_REQ_BYTECODE
	inetDiagInfo        = 2  // INET_DIAG_INFO: struct tcp_info
	diagRqueue          = 56 // offsetof(struct inet_diag_msg, idiag_rqueue)
	diagWqueue          = 60 // offsetof(struct inet_diag_msg, idiag_wqueue)
	tcpInfoLastDataSent = 44 // offsetof(struct tcp_info, tcpi_last_data_sent)
	tcpInfoLastDataRecv = 52 // offsetof(struct tcp_info, tcpi_last_data_recv)
	tcpEstablished      = 1  // TCP_ESTABLISHED
	sockIDLen           = 48
	diagMsgLen          = 72 // struct inet_diag_msg
)

// diagReq is struct inet_diag_req_v2 for TCP.
type diagReq struct {
	family byte
	ext    byte // idiag_ext: the attributes wanted
	states uint32
	id     [sockIDLen]byte // struct inet_diag_sockid: zero in a dump, as the kernel gave it for a destroy
}

func (r *diagReq) Len() int { return 8 + sockIDLen }

func (r *diagReq) Serialize() []byte {
	b := make([]byte, 8, r.Len())
	b[0], b[1], b[2] = r.family, unix.IPPROTO_TCP, r.ext
	binary.NativeEndian.PutUint32(b[4:], r.states)
	return append(b, r.id[:]...)
}

// parseDiagMsg reads the connection of one struct inet_diag_msg: family,
// state, timer, retrans, then the sockid (ports big endian, addresses in 16
// bytes each, IPv4 in the first 4).
func parseDiagMsg(m []byte) (Conn, error) {
	if len(m) < diagMsgLen {
		return Conn{}, fmt.Errorf("inet_diag_msg of %d bytes", len(m))
	}
	n := 16
	switch m[0] {
	case unix.AF_INET:
		n = 4
	case unix.AF_INET6:
	default:
		return Conn{}, fmt.Errorf("inet_diag_msg of family %d", m[0])
	}
	src, _ := netip.AddrFromSlice(m[8 : 8+n])
	dst, _ := netip.AddrFromSlice(m[24 : 24+n])
	c := Conn{
		Local:  netip.AddrPortFrom(src, binary.BigEndian.Uint16(m[4:])),
		Remote: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(m[6:])),
	}
	return c.unmap(), nil
}
