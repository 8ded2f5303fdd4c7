package bgp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"golang.org/x/sys/unix"
)

// FlushStale makes every router of cfg drop, now, the routes it keeps
// stale for a speaker of this host that ended without a NOTIFICATION (it
// crashed, or it Detached and no speaker Resumed), instead of when the
// restart time runs out. It is for the clean-up after a failure: while the
// routers keep a stale route they send its traffic here, where nothing
// serves the VIP any more.
//
// For each peer it opens a BGP session whose OPEN carries the Graceful
// Restart capability with the Forwarding State bit clear: RFC 4724 section
// 4.2 has the router delete the stale routes of that family as soon as the
// session is up. It answers the router's OPEN with a KEEPALIVE and an
// End-of-RIB (no routes: a router that waits for it drops the stale ones
// then), waits (at most flushWaitUpdate) for the router's first UPDATE
// (its End-of-RIB: the session is up on its side), and ends the session
// with a CEASE (administrative shutdown), so the router is left with no
// route from this host and drops what it still kept. Peers are flushed in
// parallel, each bounded by ctx; no speaker of this host may run
// meanwhile (the router would take this session for a replacement of its
// session). Nothing is done when graceful restart is off: routers then
// kept nothing.
func FlushStale(ctx context.Context, cfg Config) error {
	if errs := cfg.Validate(); len(errs) > 0 {
		return fmt.Errorf("bgp config: %w", errors.Join(errs...))
	}
	if !cfg.GracefulRestart.Enabled() {
		return nil
	}
	errs := make([]error, len(cfg.Peers))
	var wg sync.WaitGroup
	for i, p := range cfg.Peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := flushPeer(ctx, cfg, p, netip.AddrPortFrom(p.Address, bgpPort)); err != nil {
				errs[i] = fmt.Errorf("flush stale routes at %s: %w", p.Address, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// flushWaitUpdate bounds the wait for the router's first UPDATE after the
// session came up. BIRD 2 sends its End-of-RIB at once and drops the stale
// routes on the session coming up; FRR 8.4 sends it after its update
// coalescing (about a second) and drops them only when the session ends,
// so the CEASE should not wait for it.
const flushWaitUpdate = 250 * time.Millisecond

// bgpPort is where routers listen.
const bgpPort = 179

// asTrans stands for a 4-octet AS number in the OPEN's 2-octet field
// (RFC 6793).
const asTrans = 23456

// flushPeer flushes p, reached at addr (its address, port 179).
func flushPeer(ctx context.Context, cfg Config, p Peer, addr netip.AddrPort) error {
	d := peerDialer(cfg, p)
	conn, err := d.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	openMsg, err := flushOpen(cfg, p)
	if err != nil {
		return fmt.Errorf("encode open: %w", err)
	}
	open, err := openMsg.Serialize()
	if err != nil {
		return fmt.Errorf("encode open: %w", err)
	}
	if _, err := conn.Write(open); err != nil {
		return fmt.Errorf("send open: %w", err)
	}
	if err := readUntil(conn, bgp.BGP_MSG_OPEN); err != nil {
		return err
	}
	// KEEPALIVE brings the session up on the router's side; our
	// End-of-RIB then says this speaker has no routes, for a router that
	// keeps stale routes until the restarted speaker's End-of-RIB whatever
	// the forwarding bit said.
	ka, _ := bgp.NewBGPKeepAliveMessage().Serialize()
	eor, err := bgp.NewEndOfRib(flushFamily(p)).Serialize()
	if err != nil {
		return fmt.Errorf("encode end-of-rib: %w", err)
	}
	if _, err := conn.Write(append(ka, eor...)); err != nil {
		return fmt.Errorf("send keepalive: %w", err)
	}
	// The router's first UPDATE (the End-of-RIB it owes a graceful restart
	// peer) says it is up. Without one the CEASE goes anyway: the router
	// reads what came before it first.
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > flushWaitUpdate {
		conn.SetReadDeadline(time.Now().Add(flushWaitUpdate))
	}
	err = readUntil(conn, bgp.BGP_MSG_UPDATE)
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil) {
		return err
	}
	conn.SetDeadline(time.Time{})
	cease, err := bgp.NewBGPNotificationMessage(bgp.BGP_ERROR_CEASE, bgp.BGP_ERROR_SUB_ADMINISTRATIVE_SHUTDOWN,
		append([]byte{byte(len(flushCommunication))}, flushCommunication...)).Serialize()
	if err != nil {
		return fmt.Errorf("encode cease: %w", err)
	}
	if _, err := conn.Write(cease); err != nil {
		return fmt.Errorf("send cease: %w", err)
	}
	return nil
}

// flushCommunication is the shutdown communication (RFC 9003) of the CEASE
// that ends a flush session.
const flushCommunication = "vipd cleanup: no forwarding state kept"

// flushOpen returns the OPEN of a flush session with p: the peer's family,
// 4-octet AS numbers, and Graceful Restart with neither the Restart State
// nor the Forwarding State bit.
func flushOpen(cfg Config, p Peer) (*bgp.BGPMessage, error) {
	family := flushFamily(p)
	as := uint16(asTrans)
	if cfg.ASN <= 0xffff {
		as = uint16(cfg.ASN)
	}
	caps := []bgp.ParameterCapabilityInterface{
		bgp.NewCapMultiProtocol(family),
		bgp.NewCapFourOctetASNumber(cfg.ASN),
		bgp.NewCapGracefulRestart(false, false, uint16(cfg.GracefulRestart.RestartTime/time.Second),
			[]*bgp.CapGracefulRestartTuple{bgp.NewCapGracefulRestartTuple(family, false)}),
	}
	return bgp.NewBGPOpenMessage(as, uint16(p.holdTime()/time.Second), cfg.RouterID,
		[]bgp.OptionParameterInterface{bgp.NewOptionParameterCapability(caps)})
}

// flushFamily is the family of p's session: the family of its address.
func flushFamily(p Peer) bgp.Family {
	if p.Address.Is6() {
		return bgp.RF_IPv6_UC
	}
	return bgp.RF_IPv4_UC
}

// readUntil reads BGP messages from r until one of type want. A
// NOTIFICATION is an error; other messages are skipped.
func readUntil(r io.Reader, want uint8) error {
	hdr := make([]byte, bgp.BGP_HEADER_LENGTH)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		n := int(binary.BigEndian.Uint16(hdr[16:18]))
		if n < bgp.BGP_HEADER_LENGTH {
			return fmt.Errorf("message length %d", n)
		}
		msg := make([]byte, n)
		copy(msg, hdr)
		if _, err := io.ReadFull(r, msg[bgp.BGP_HEADER_LENGTH:]); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		switch t := hdr[18]; t {
		case want:
			return nil
		case bgp.BGP_MSG_NOTIFICATION:
			m, err := bgp.ParseBGPMessage(msg)
			if err != nil {
				return fmt.Errorf("notification: %w", err)
			}
			body := m.Body.(*bgp.BGPNotification)
			return fmt.Errorf("router sent a notification: code %d subcode %d", body.ErrorCode, body.ErrorSubcode)
		}
	}
}

// setMD5 sets the TCP MD5 signature key (RFC 2385) for peer on the socket
// before it connects.
func setMD5(c syscall.RawConn, peer netip.Addr, key string) error {
	var sig unix.TCPMD5Sig
	if peer.Is4() {
		sig.Addr.Family = unix.AF_INET
		a := peer.As4()
		copy(sig.Addr.Data[2:], a[:])
	} else {
		sig.Addr.Family = unix.AF_INET6
		a := peer.As16()
		copy(sig.Addr.Data[6:], a[:])
	}
	sig.Keylen = uint16(copy(sig.Key[:], key))
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptTCPMD5Sig(int(fd), unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("tcp md5 signature: %w", serr)
	}
	return nil
}

// peerDialer returns the dialer of a flush session to p: from p's local
// address, with its MD5 password, and with the TTL and minimum TTL the
// speaker's session to p has (a router that checks them, GTSM or a
// multihop limit, would otherwise refuse the flush).
func peerDialer(cfg Config, p Peer) net.Dialer {
	var d net.Dialer
	if p.LocalAddress.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(p.LocalAddress, 0))
	}
	ttl, minTTL := p.sendTTL(cfg.ASN), p.minTTL()
	d.Control = func(_, _ string, c syscall.RawConn) error {
		if p.Password != "" {
			if err := setMD5(c, p.Address, p.Password); err != nil {
				return err
			}
		}
		return setTTL(c, p.Address.Is4(), int(ttl), int(minTTL))
	}
	return d
}

// setTTL sets the TTL (hop limit) of the packets sent, when ttl is not 0,
// and the minimum TTL accepted, when minTTL is not 0.
func setTTL(c syscall.RawConn, v4 bool, ttl, minTTL int) error {
	level, ttlOpt, minOpt := unix.IPPROTO_IP, unix.IP_TTL, unix.IP_MINTTL
	if !v4 {
		level, ttlOpt, minOpt = unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, unix.IPV6_MINHOPCOUNT
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		if ttl != 0 {
			if serr = unix.SetsockoptInt(int(fd), level, ttlOpt, ttl); serr != nil {
				serr = fmt.Errorf("set ttl %d: %w", ttl, serr)
				return
			}
		}
		if minTTL != 0 {
			if serr = unix.SetsockoptInt(int(fd), level, minOpt, minTTL); serr != nil {
				serr = fmt.Errorf("set minimum ttl %d: %w", minTTL, serr)
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
