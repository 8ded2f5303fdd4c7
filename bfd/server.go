package bfd

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPort is the UDP port of single-hop BFD Control packets (RFC 5881
// section 4).
const DefaultPort = 3784

// Source ports of Control packets (RFC 5881 section 4).
const (
	minSourcePort = 49152
	maxSourcePort = 65535
)

// gtsmTTL is the TTL (hop limit) every single-hop packet is sent with and
// must arrive with (RFC 5881 section 5, RFC 5082).
const gtsmTTL = 255

// MinInterval is the smallest MinInterval a SessionConfig may have.
const MinInterval = 10 * time.Millisecond

// Config configures a Server.
type Config struct {
	// Port is the UDP port to listen on and to send to. [DefaultPort]
	Port int
	// Logger receives session state changes (info) and packet problems
	// (debug). [slog.Default()]
	Logger *slog.Logger
	// OnChange, if set, is called on every session state change. It is
	// called with the server's lock held: it must not block and must not
	// call the Server.
	OnChange func(Change)
	// Rand gives the transmit jitter, discriminators and source ports.
	// [seeded from crypto/rand]
	Rand *rand.Rand
}

// SessionConfig is one BFD session.
type SessionConfig struct {
	// Peer is the remote system's address; one session per address. It
	// must not have a zone.
	Peer netip.Addr
	// Local is the source address of the packets; the zero value lets the
	// kernel choose by route.
	Local netip.Addr
	// MinInterval is both the desired minimum TX and the required minimum
	// RX interval, at least MinInterval.
	MinInterval time.Duration
	// Multiplier is the detect multiplier, at least 1.
	Multiplier uint8
}

// Validate reports what is wrong with c, or nil.
func (c SessionConfig) Validate() error {
	switch {
	case !c.Peer.IsValid() || c.Peer.Zone() != "" || c.Peer.IsUnspecified() || c.Peer.IsMulticast():
		return fmt.Errorf("bfd peer %s: want a unicast address without zone", c.Peer)
	case c.Local.IsValid() && c.Local.Unmap().Is4() != c.Peer.Unmap().Is4():
		return fmt.Errorf("bfd peer %s: local address %s is of another family", c.Peer, c.Local)
	case c.MinInterval < MinInterval:
		return fmt.Errorf("bfd peer %s: interval %s below %s", c.Peer, c.MinInterval, MinInterval)
	case c.Multiplier == 0:
		return fmt.Errorf("bfd peer %s: multiplier must be at least 1", c.Peer)
	}
	return nil
}

func (c SessionConfig) timers() Timers {
	return Timers{DesiredMinTx: c.MinInterval, RequiredMinRx: c.MinInterval, DetectMult: c.Multiplier}
}

// Change is one session state change.
type Change struct {
	// Peer is the session's remote address.
	Peer netip.Addr
	// From and To are the old and new states.
	From, To State
	// Diag is the local diagnostic after the change: why the session went
	// down (DiagControlDetectionExpired, DiagNeighborDown, ...).
	Diag Diag
	// RemoteState is the state the remote last reported; AdminDown means
	// the remote took the session down on purpose (RFC 5882 section 3.2:
	// not a failure).
	RemoteState State
}

// Status is a snapshot of one session.
type Status struct {
	Peer                  netip.Addr
	State, RemoteState    State
	LocalDiag, RemoteDiag Diag
	// TxInterval is the interval between packets before jitter;
	// DetectionTime is zero until a packet was received.
	TxInterval, DetectionTime time.Duration
	// Sent and Received count Control packets; Discarded counts packets
	// for this session that the state machine rejected.
	Sent, Received, Discarded uint64
}

// conn is the transmit side of a session: a connected UDP socket, or a
// fake in tests.
type conn interface {
	Write(b []byte) (int, error)
	Close() error
}

// rxConn is a family's receive socket, or a fake in tests.
type rxConn interface {
	ReadMsgUDPAddrPort(b, oob []byte) (n, oobn, flags int, addr netip.AddrPort, err error)
	Close() error
}

// session is a Session with its socket and counters.
type session struct {
	cfg       SessionConfig
	sm        *Session
	tx        conn
	pkt       Packet
	buf       [HeaderLen]byte
	sent      uint64
	received  uint64
	discarded uint64
	txFailing bool
}

// Server runs BFD sessions: one UDP listener per address family on Port,
// one transmit socket per session, and one goroutine (Run) that sends
// periodic packets and runs detection timers. Its methods are safe for
// concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	// dial opens a session's transmit socket; listen opens the receive
	// socket of a family. Tests replace them.
	dial   func(SessionConfig, int) (conn, error)
	listen func(v6 bool, port int) (rxConn, error)
	now    func() time.Time

	mu        sync.Mutex
	rnd       *rand.Rand
	sessions  map[netip.Addr]*session
	byDisc    map[uint32]*session
	listeners map[bool]rxConn // by "is IPv6"
	closed    bool
	badPkts   uint64 // failed Unmarshal, wrong TTL, or no session
	wg        sync.WaitGroup
	wake      chan struct{}
}

// NewServer returns a Server with no sessions. Call Run to start it.
func NewServer(cfg Config) *Server {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rnd := cfg.Rand
	if rnd == nil {
		var seed [32]byte
		_, _ = crand.Read(seed[:])
		rnd = rand.New(rand.NewChaCha8(seed))
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		rnd:       rnd,
		sessions:  make(map[netip.Addr]*session),
		byDisc:    make(map[uint32]*session),
		listeners: make(map[bool]rxConn),
		wake:      make(chan struct{}, 1),
	}
	s.dial = func(c SessionConfig, port int) (conn, error) { return dialTx(c, port, s.sourcePort) }
	s.listen = listenRx
	s.now = time.Now
	return s
}

// sourcePort picks a source port in the RFC 5881 range. s.mu is held.
func (s *Server) sourcePort() int {
	return minSourcePort + s.rnd.IntN(maxSourcePort-minSourcePort+1)
}

// Set adds a session or changes an existing one's timers (with a Poll
// Sequence when it is Up). A changed Local address recreates the session.
// The listener of the session's address family is opened on first use.
func (s *Server) Set(c SessionConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	c.Peer = c.Peer.Unmap()
	c.Local = c.Local.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("bfd: server stopped")
	}
	now := s.now()
	if old := s.sessions[c.Peer]; old != nil {
		if old.cfg.Local == c.Local {
			old.cfg = c
			old.sm.SetTimers(now, c.timers())
			s.poke()
			return nil
		}
		s.removeLocked(now, old)
	}
	if err := s.ensureListenerLocked(c.Peer.Is6()); err != nil {
		return err
	}
	tx, err := s.dial(c, s.cfg.Port)
	if err != nil {
		return fmt.Errorf("bfd peer %s: %w", c.Peer, err)
	}
	var disc uint32
	for disc == 0 || s.byDisc[disc] != nil {
		disc = s.rnd.Uint32()
	}
	ss := &session{cfg: c, sm: NewSession(disc, c.timers(), s.rnd.Float64, now), tx: tx}
	s.sessions[c.Peer] = ss
	s.byDisc[disc] = ss
	s.log.Info("bfd session added", "peer", c.Peer, "interval", c.MinInterval, "multiplier", c.Multiplier)
	s.poke()
	return nil
}

// Remove ends the session with peer: one AdminDown packet tells the remote
// it is not a failure, then the socket is closed. Removing an unknown peer
// is a no-op.
func (s *Server) Remove(peer netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[peer.Unmap()]; ss != nil {
		s.removeLocked(s.now(), ss)
	}
}

func (s *Server) removeLocked(now time.Time, ss *session) {
	if !s.closed {
		s.adminDownLocked(now, ss)
	}
	ss.tx.Close()
	delete(s.sessions, ss.cfg.Peer)
	delete(s.byDisc, ss.sm.LocalDiscriminator())
	s.log.Info("bfd session removed", "peer", ss.cfg.Peer)
}

// adminDownLocked takes ss AdminDown and sends the packet saying so.
func (s *Server) adminDownLocked(now time.Time, ss *session) {
	before := ss.sm.State()
	ss.sm.SetAdminDown(now, DiagAdminDown)
	s.sendLocked(now, ss)
	s.notifyLocked(ss, before)
}

// Status returns the state of the session with peer.
func (s *Server) Status(peer netip.Addr) (Status, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[peer.Unmap()]
	if ss == nil {
		return Status{}, false
	}
	return Status{
		Peer:          ss.cfg.Peer,
		State:         ss.sm.State(),
		RemoteState:   ss.sm.RemoteState(),
		LocalDiag:     ss.sm.LocalDiag(),
		RemoteDiag:    ss.sm.RemoteDiag(),
		TxInterval:    ss.sm.TxInterval(),
		DetectionTime: ss.sm.DetectionTime(),
		Sent:          ss.sent,
		Received:      ss.received,
		Discarded:     ss.discarded,
	}, true
}

// Shutdown takes every session AdminDown (RFC 5880 section 6.8.16) so
// the remotes do not count the end as a failure: one AdminDown packet at
// once and a second one after the session's TX interval (at most 1s, and
// not after ctx ends). Sessions stay AdminDown until Run ends.
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	now := s.now()
	var wait time.Duration
	for _, ss := range s.sessions {
		if ss.sm.State() == AdminDown {
			continue
		}
		s.adminDownLocked(now, ss)
		wait = max(wait, ss.sm.TxInterval())
	}
	s.mu.Unlock()
	if wait == 0 {
		return
	}
	t := time.NewTimer(min(wait, time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now = s.now()
	for _, ss := range s.sessions {
		if ss.sm.State() == AdminDown {
			s.sendLocked(now, ss)
		}
	}
}

// Run sends packets and runs the detection timers until ctx ends, then
// closes every socket (without AdminDown: call Shutdown first for a planned
// stop) and returns after the listener goroutines have ended.
func (s *Server) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.serve(s.now())
		d := time.Hour
		if !next.IsZero() {
			d = next.Sub(s.now())
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			s.close()
			s.wg.Wait()
			return nil
		case <-timer.C:
		case <-s.wake:
		}
	}
}

// poke makes Run recompute its timer.
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// serve runs every session's detection timer and due transmissions and
// returns when it must run again (zero: nothing scheduled).
func (s *Server) serve(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, ss := range s.sessions {
		before := ss.sm.State()
		ss.sm.Timeout(now)
		if ss.sm.TxDue(now) {
			s.sendLocked(now, ss)
		}
		s.notifyLocked(ss, before)
		if n := ss.sm.Next(); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return next
}

func (s *Server) sendLocked(now time.Time, ss *session) {
	ss.sm.Transmit(now, &ss.pkt)
	b := ss.pkt.Append(ss.buf[:0])
	if _, err := ss.tx.Write(b); err != nil {
		if !ss.txFailing {
			s.log.Debug("bfd send failed", "peer", ss.cfg.Peer, "err", err)
		}
		ss.txFailing = true
		return
	}
	ss.txFailing = false
	ss.sent++
}

func (s *Server) notifyLocked(ss *session, before State) {
	to := ss.sm.State()
	if to == before {
		return
	}
	c := Change{Peer: ss.cfg.Peer, From: before, To: to, Diag: ss.sm.LocalDiag(), RemoteState: ss.sm.RemoteState()}
	s.log.Info("bfd session state", "peer", c.Peer, "from", c.From, "to", c.To, "diag", c.Diag, "remote_state", c.RemoteState)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(c)
	}
}

// receive handles one datagram from the address from that arrived with
// TTL (hop limit) ttl. p is scratch space.
func (s *Server) receive(from netip.Addr, ttl int, b []byte, p *Packet) {
	err := p.Unmarshal(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || ttl != gtsmTTL {
		s.badPkts++
		return
	}
	var ss *session
	if p.YourDiscriminator != 0 {
		ss = s.byDisc[p.YourDiscriminator]
	} else {
		ss = s.sessions[from]
	}
	if ss == nil || ss.cfg.Peer != from {
		s.badPkts++
		return
	}
	now := s.now()
	before := ss.sm.State()
	if err := ss.sm.Receive(now, p); err != nil && !errors.Is(err, ErrLocalAdminDown) {
		ss.discarded++
		return
	}
	ss.received++
	if p.Poll && ss.sm.TxDue(now) {
		s.sendLocked(now, ss) // the Final, without waiting for the schedule
	}
	s.notifyLocked(ss, before)
	s.poke()
}

// ensureListenerLocked opens the family's listener and starts its reader.
func (s *Server) ensureListenerLocked(v6 bool) error {
	if s.listeners[v6] != nil {
		return nil
	}
	c, err := s.listen(v6, s.cfg.Port)
	if err != nil {
		return fmt.Errorf("bfd: listen on udp port %d: %w", s.cfg.Port, err)
	}
	s.listeners[v6] = c
	s.wg.Add(1)
	go s.read(c, v6)
	return nil
}

// read receives packets until c is closed. It allocates nothing per
// packet.
func (s *Server) read(c rxConn, v6 bool) {
	defer s.wg.Done()
	var buf [128]byte
	var oob [64]byte
	var p Packet
	for {
		n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf[:], oob[:])
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Debug("bfd receive", "err", err)
			continue
		}
		s.receive(from.Addr().Unmap(), receivedTTL(oob[:oobn], v6), buf[:n], &p)
	}
}

// close closes every socket; Set fails afterwards.
func (s *Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, ss := range s.sessions {
		ss.tx.Close()
	}
	for _, c := range s.listeners {
		c.Close()
	}
}

// Peers returns the addresses of the sessions, sorted.
func (s *Server) Peers() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.Addr, 0, len(s.sessions))
	for a := range s.sessions {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// listenRx opens the family's receive socket on port, asking the kernel
// for each packet's TTL (hop limit) and, where supported, to drop packets
// below 255 itself.
func listenRx(v6 bool, port int) (rxConn, error) {
	network, ip := "udp4", net.IPv4zero
	if v6 {
		network, ip = "udp6", net.IPv6unspecified
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if v6 {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1)
				// Best effort: the reader checks the hop limit anyway.
				_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MINHOPCOUNT, gtsmTTL)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
				_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MINTTL, gtsmTTL)
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, (&net.UDPAddr{IP: ip, Port: port}).String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// dialTx opens a session's transmit socket: connected to peer:port from a
// source port in 49152-65535, TTL (hop limit) 255, and the
// internetwork-control precedence routers queue control traffic with.
func dialTx(c SessionConfig, port int, sourcePort func() int) (conn, error) {
	network := "udp4"
	if c.Peer.Is6() {
		network = "udp6"
	}
	control := func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if c.Peer.Is6() {
				serr = errors.Join(unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, gtsmTTL),
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 0xc0))
			} else {
				serr = errors.Join(unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, gtsmTTL),
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, 0xc0))
			}
		})
		return errors.Join(err, serr)
	}
	var local net.IP
	if c.Local.IsValid() {
		local = c.Local.AsSlice()
	}
	remote := netip.AddrPortFrom(c.Peer, uint16(port)).String()
	var lastErr error
	for range 32 {
		d := net.Dialer{LocalAddr: &net.UDPAddr{IP: local, Port: sourcePort()}, Control: control}
		uc, err := d.Dial(network, remote)
		if err == nil {
			return uc.(*net.UDPConn), nil
		}
		lastErr = err
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("open transmit socket: %w", lastErr)
}

// cmsgLenSize is the size of a control message header's length field
// (size_t); the level and type (two int32) follow it.
const cmsgLenSize = unix.SizeofCmsghdr - 8

// cmsgAlign rounds n up to the alignment of control messages (size_t).
func cmsgAlign(n int) int {
	return (n + cmsgLenSize - 1) &^ (cmsgLenSize - 1)
}

// receivedTTL returns the TTL (IPv4) or hop limit (IPv6) carried in the
// control messages oob, or -1 if there is none. It parses in place.
func receivedTTL(oob []byte, v6 bool) int {
	level, typ := uint32(unix.IPPROTO_IP), uint32(unix.IP_TTL)
	if v6 {
		level, typ = unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT
	}
	for len(oob) >= unix.SizeofCmsghdr {
		var l int
		if cmsgLenSize == 8 {
			l = int(binary.NativeEndian.Uint64(oob))
		} else {
			l = int(binary.NativeEndian.Uint32(oob))
		}
		lv := binary.NativeEndian.Uint32(oob[cmsgLenSize:])
		ty := binary.NativeEndian.Uint32(oob[cmsgLenSize+4:])
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return -1
		}
		if lv == level && ty == typ && l >= unix.SizeofCmsghdr+4 {
			return int(int32(binary.NativeEndian.Uint32(oob[unix.SizeofCmsghdr:])))
		}
		next := cmsgAlign(l)
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return -1
}
