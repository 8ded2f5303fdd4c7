package membership

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// transport is memberlist's network transport (UDP packets and TCP streams
// on bind_address:bind_port), written for vipd with two things in the read
// path, each done inline so a packet costs one goroutine wake-up:
//
//   - admission: packets and connections from outside the admitted networks
//     are dropped before memberlist reads them (memberlist's own
//     CIDRsAllowed refuses only alive messages and joins, so a stranger's
//     pings, suspicions and death notices would still be read);
//   - the lease's heartbeats (agent/lease) are taken off the port here and
//     never enter memberlist, whose packet path hands every message through
//     two more goroutines. They are sealed with AES-GCM under the cluster
//     key when key_file is set, like memberlist's own packets;
//   - the lists of client connections (clients.go) come on TCP streams of
//     their own, sealed the same way, and are handed over with the
//     stream's source address: memberlist's user messages carry no sender,
//     so a member could publish a list in another member's name. The
//     sender dials from its bind address; the receiver takes a list only
//     from the address of the member it names.
type transport struct {
	bind    netip.AddrPort
	udp     *net.UDPConn
	tcp     *net.TCPListener
	logger  *log.Logger
	allowed *atomic.Pointer[[]netip.Prefix] // nil or empty: any address
	dropped func()
	keyring *memberlist.Keyring // nil: heartbeats in the clear
	// heartbeat takes a heartbeat's payload (opened) and where it came
	// from (the sender's membership address).
	heartbeat atomic.Pointer[func(payload []byte, from netip.AddrPort)]
	// list takes a client connections message (opened) and the source
	// address of the stream it came on.
	list atomic.Pointer[func(payload []byte, from netip.AddrPort)]

	packets  chan *memberlist.Packet
	streams  chan net.Conn
	shutdown atomic.Bool
	wg       sync.WaitGroup

	// peeking are the streams whose first bytes are awaited (classify),
	// closed by Shutdown.
	peekMu  sync.Mutex
	peeking map[net.Conn]bool
}

// leaseMagic starts a heartbeat packet; memberlist's packets start with a
// message type (below 32), a label marker (244) or an encryption version
// (0 or 1), never with it.
var leaseMagic = [2]byte{'V', 'L'}

// listMagic starts a stream carrying a client connections list: the
// stream is one sealed frame (as a heartbeat packet, with this magic),
// then the sender closes it. memberlist's streams start with a message
// type (below 32), a label marker (244) or an encryption version.
var listMagic = [2]byte{'V', 'C'}

const (
	// maxListStream bounds a list stream: a full set of conns.MaxConns
	// IPv6 connections, the largest a peer sends, takes about 5.2 MB.
	maxListStream = 8 << 20
	// streamPeekTimeout bounds the wait for a stream's first bytes.
	streamPeekTimeout = 10 * time.Second
	// listSendTimeout bounds sending one list.
	listSendTimeout = 10 * time.Second
)

const (
	leaseClear  = 0 // the payload follows in the clear
	leaseSealed = 1 // 12-byte nonce, then the payload sealed with AES-GCM
)

// newTransport listens on bind (TCP and UDP).
func newTransport(bind netip.AddrPort, logger *log.Logger, allowed *atomic.Pointer[[]netip.Prefix], dropped func(), keyring *memberlist.Keyring) (*transport, error) {
	tcp, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(bind))
	if err != nil {
		return nil, fmt.Errorf("membership TCP listener on %s: %w", bind, err)
	}
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(bind))
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("membership UDP listener on %s: %w", bind, err)
	}
	for size := 2 << 20; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &transport{
		bind: bind, udp: udp, tcp: tcp, logger: logger, allowed: allowed, dropped: dropped, keyring: keyring,
		packets: make(chan *memberlist.Packet), streams: make(chan net.Conn),
	}
	t.wg.Add(2)
	go t.readPackets()
	go t.acceptStreams()
	return t, nil
}

// admits reports whether a sender's address is in the admitted networks.
func (t *transport) admits(a netip.Addr) bool {
	nets := t.allowed.Load()
	if nets == nil || len(*nets) == 0 {
		return true
	}
	a = a.Unmap()
	return slices.ContainsFunc(*nets, func(p netip.Prefix) bool { return p.Contains(a) })
}

func (t *transport) readPackets() {
	defer t.wg.Done()
	for {
		buf := make([]byte, 65536)
		n, from, err := t.udp.ReadFromUDPAddrPort(buf)
		ts := time.Now()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			t.logger.Printf("[ERR] memberlist: Error reading UDP packet: %v", err)
			continue
		}
		if n < 1 {
			continue
		}
		if !t.admits(from.Addr()) {
			t.dropped()
			continue
		}
		if n >= 3 && buf[0] == leaseMagic[0] && buf[1] == leaseMagic[1] {
			if p, err := t.open(buf[:n]); err == nil {
				if f := t.heartbeat.Load(); f != nil {
					(*f)(p, from)
				}
			}
			continue
		}
		t.packets <- &memberlist.Packet{Buf: buf[:n], From: net.UDPAddrFromAddrPort(from), Timestamp: ts}
	}
}

func (t *transport) acceptStreams() {
	defer t.wg.Done()
	delay := time.Duration(0)
	for {
		c, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.logger.Printf("[ERR] memberlist: Error accepting TCP connection: %v", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
		if err != nil || !t.admits(ap.Addr()) {
			t.dropped()
			c.Close()
			continue
		}
		t.wg.Add(1)
		go t.classify(c, ap)
	}
}

// classify reads a stream's first bytes: a client connections list is
// read here, anything else goes to memberlist with those bytes still to
// be read.
func (t *transport) classify(c net.Conn, from netip.AddrPort) {
	defer t.wg.Done()
	t.peekMu.Lock()
	if t.shutdown.Load() {
		t.peekMu.Unlock()
		c.Close()
		return
	}
	if t.peeking == nil {
		t.peeking = map[net.Conn]bool{}
	}
	t.peeking[c] = true
	t.peekMu.Unlock()
	defer func() {
		t.peekMu.Lock()
		delete(t.peeking, c)
		t.peekMu.Unlock()
	}()
	_ = c.SetReadDeadline(time.Now().Add(streamPeekTimeout))
	br := bufio.NewReader(c)
	head, err := br.Peek(2)
	if err != nil {
		c.Close()
		return
	}
	if head[0] != listMagic[0] || head[1] != listMagic[1] {
		_ = c.SetReadDeadline(time.Time{})
		t.streams <- &peekedConn{Conn: c, r: br}
		return
	}
	defer c.Close()
	b, err := io.ReadAll(io.LimitReader(br, maxListStream+1))
	if err != nil || len(b) > maxListStream || len(b) < 3 {
		return
	}
	p, err := t.open(b)
	if err != nil {
		return
	}
	if f := t.list.Load(); f != nil {
		(*f)(p, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
	}
}

// peekedConn is a stream whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// sendList sends a client connections message to a member's membership
// address, on a stream of its own from this node's bind address (the
// receiver checks it against the member the message names).
func (t *transport) sendList(payload []byte, to netip.AddrPort) error {
	b, err := t.seal(listMagic, payload)
	if err != nil {
		return err
	}
	d := net.Dialer{Timeout: listSendTimeout}
	if a := t.bind.Addr(); !a.IsUnspecified() {
		d.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
	}
	c, err := d.Dial("tcp", to.String())
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(listSendTimeout))
	if _, err := c.Write(b); err != nil {
		return err
	}
	return c.Close()
}

// seal makes a heartbeat packet (leaseMagic) or a list stream
// (listMagic) of payload.
func (t *transport) seal(magic [2]byte, payload []byte) ([]byte, error) {
	if t.keyring == nil {
		return append([]byte{magic[0], magic[1], leaseClear}, payload...), nil
	}
	aead, err := gcm(t.keyring.GetPrimaryKey())
	if err != nil {
		return nil, err
	}
	out := make([]byte, 3+aead.NonceSize(), 3+aead.NonceSize()+len(payload)+aead.Overhead())
	out[0], out[1], out[2] = magic[0], magic[1], leaseSealed
	if _, err := rand.Read(out[3:]); err != nil {
		return nil, err
	}
	return aead.Seal(out, out[3:], payload, out[:3]), nil
}

// open returns a heartbeat packet's payload: sealed under one of the
// cluster's keys when key_file is set (a packet in the clear is refused
// then), in the clear otherwise.
func (t *transport) open(b []byte) ([]byte, error) {
	switch {
	case t.keyring == nil && b[2] == leaseClear:
		return b[3:], nil
	case t.keyring == nil || b[2] != leaseSealed:
		return nil, errors.New("heartbeat: not sealed as this cluster's are")
	}
	for _, k := range t.keyring.GetKeys() {
		aead, err := gcm(k)
		if err != nil || len(b) < 3+aead.NonceSize()+aead.Overhead() {
			continue
		}
		nonce := b[3 : 3+aead.NonceSize()]
		if p, err := aead.Open(nil, nonce, b[3+aead.NonceSize():], b[:3]); err == nil {
			return p, nil
		}
	}
	return nil, errors.New("heartbeat: no cluster key opens it")
}

func gcm(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sendHeartbeat seals payload and sends it to addr (host:port).
func (t *transport) sendHeartbeat(payload []byte, addr netip.AddrPort) error {
	b, err := t.seal(leaseMagic, payload)
	if err != nil {
		return err
	}
	_, err = t.udp.WriteToUDPAddrPort(b, addr)
	return err
}

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip == "" {
		return t.bind.Addr().AsSlice(), int(t.bind.Port()), nil
	}
	a := net.ParseIP(ip)
	if a == nil {
		return nil, 0, fmt.Errorf("failed to parse advertise address %q", ip)
	}
	if a4 := a.To4(); a4 != nil {
		a = a4
	}
	return a, port, nil
}

// WriteTo implements memberlist.Transport.
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// PacketCh implements memberlist.Transport.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", addr)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// StreamCh implements memberlist.Transport.
func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown implements memberlist.Transport. memberlist stops reading the
// channels first, so the readers are released by closing the sockets and
// draining what they still hand over.
func (t *transport) Shutdown() error {
	if t.shutdown.Swap(true) {
		return nil
	}
	err := errors.Join(t.tcp.Close(), t.udp.Close())
	t.peekMu.Lock()
	for c := range t.peeking {
		c.Close()
	}
	t.peekMu.Unlock()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return err
		case <-t.packets:
		case c := <-t.streams:
			c.Close()
		}
	}
}
