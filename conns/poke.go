package conns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Defaults applied by NewPoker to zero PokeConfig fields.
const (
	// DefaultPokeRate is the default bound on pokes per second: 20,000
	// connections in 2 s. Each poke costs the network three small packets
	// (the poke, the client's answer, the reset).
	DefaultPokeRate = 10000
	// DefaultPokeTimeout is the default bound on one Poke call.
	DefaultPokeTimeout = 5 * time.Second
)

// PokeConfig configures a Poker. The zero value of every field selects the
// default named next to it.
type PokeConfig struct {
	// Rate is the most pokes sent per second, sent in batches of a
	// hundredth of it every 10 ms (at least one). Default DefaultPokeRate
	// (10000). Must not be negative.
	Rate int
	// Timeout bounds one Poke call: pokes not sent by then are left out
	// (PokeResult.Unsent). Default DefaultPokeTimeout (5s). Must not be
	// negative.
	Timeout time.Duration
}

func (c PokeConfig) withDefaults() (PokeConfig, error) {
	if c.Rate < 0 {
		return c, fmt.Errorf("conns: PokeConfig.Rate must not be negative, got %d", c.Rate)
	}
	if c.Timeout < 0 {
		return c, fmt.Errorf("conns: PokeConfig.Timeout must not be negative, got %s", c.Timeout)
	}
	if c.Rate == 0 {
		c.Rate = DefaultPokeRate
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultPokeTimeout
	}
	return c, nil
}

// A Poker makes the clients of connections this host does not have reset
// them at once. For each connection it sends one bare TCP ACK from the
// connection's local end (the VIP and its port) to the client, with
// arbitrary sequence and acknowledgement numbers, from a raw socket. The
// client's stack, whose connection lived on the VIP's previous holder,
// finds the segment out of its window and answers with an ACK carrying
// its own sequence numbers (RFC 793's answer to an unacceptable segment;
// RFC 5961's challenge ACK). This host has no socket for that connection,
// so its kernel answers the ACK with a reset whose sequence number is the
// one the client expects, and the client's connection fails at once
// instead of at its next keepalive or request timeout.
//
// A Poker keeps no socket between calls; it is safe for concurrent use.
type Poker struct {
	cfg   PokeConfig
	clock clock
	open  func(local netip.Addr) (rawSocket, error)
	rand  func() uint32
}

// NewPoker validates cfg and returns a Poker.
func NewPoker(cfg PokeConfig) (*Poker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Poker{cfg: cfg, clock: realClock{}, open: openRaw, rand: rand.Uint32}, nil
}

// PokeResult counts what one Poke did with its connections.
type PokeResult struct {
	// Sent pokes were handed to the kernel.
	Sent int
	// Failed pokes were refused: the kernel refused the packet, or no raw
	// socket could be bound to the connection's local address.
	Failed int
	// Unsent pokes were not tried: the timeout passed or ctx ended first.
	Unsent int
}

// Poke sends one poke to each of cs, paced by PokeConfig.Rate and bounded
// by PokeConfig.Timeout, in the order given. Each local address gets a raw
// socket bound to it for the call, in the calling thread's network
// namespace: the kernel refuses to bind an address that is not on this
// host, so a VIP this host does not hold pokes nobody. The sockets need
// CAP_NET_RAW; they receive nothing (a filter drops every packet).
//
// Poke returns an error when some pokes failed (the first reason of each
// kind, wrapped), or ctx's error when it ended first; the result counts
// what happened in every case.
func (p *Poker) Poke(ctx context.Context, cs []Conn) (PokeResult, error) {
	var res PokeResult
	start := p.clock.Now()
	deadline := start.Add(p.cfg.Timeout)
	pace := pacer{rate: p.cfg.Rate, start: start}
	socks := map[netip.Addr]rawSocket{}
	openErr := map[netip.Addr]error{}
	defer func() {
		for _, s := range socks {
			s.Close()
		}
	}()
	var errs []error
	var sendErr error
	invalid := false
	seg := make([]byte, 0, tcpHeaderLen)
	i := 0
	for i < len(cs) && ctx.Err() == nil {
		now := p.clock.Now()
		if !now.Before(deadline) {
			break
		}
		for allowed := pace.allowed(now); i < allowed && i < len(cs); i++ {
			c := cs[i].unmap()
			if !c.Valid() {
				res.Failed++
				if !invalid {
					invalid = true
					errs = append(errs, fmt.Errorf("poke %s: not a valid connection", c))
				}
				continue
			}
			s, err := p.socket(socks, openErr, c.Local.Addr())
			if err != nil {
				res.Failed++
				if _, seen := openErr[c.Local.Addr()]; !seen {
					openErr[c.Local.Addr()] = err
					errs = append(errs, err)
				}
				continue
			}
			seg = appendACK(seg[:0], c.Local, c.Remote, p.rand(), p.rand())
			if err := s.WriteTo(seg, c.Remote.Addr(), deadline); err != nil {
				res.Failed++
				if sendErr == nil {
					sendErr = fmt.Errorf("poke %s: %w", c, err)
					errs = append(errs, sendErr)
				}
				continue
			}
			res.Sent++
		}
		if i == len(cs) {
			break
		}
		wait := min(pace.next(i).Sub(now), deadline.Sub(now))
		select {
		case <-ctx.Done():
		case <-p.clock.After(wait):
		}
	}
	res.Unsent = len(cs) - i
	if err := ctx.Err(); err != nil && res.Unsent > 0 {
		return res, errors.Join(append(errs, err)...)
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("conns: %d of %d pokes failed: %w", res.Failed, len(cs), errors.Join(errs...))
	}
	return res, nil
}

// socket returns the raw socket for local, opening it on first use; an
// address whose socket could not be opened is not tried again.
func (p *Poker) socket(socks map[netip.Addr]rawSocket, failed map[netip.Addr]error, local netip.Addr) (rawSocket, error) {
	if err, ok := failed[local]; ok {
		return nil, err
	}
	if s, ok := socks[local]; ok {
		return s, nil
	}
	s, err := p.open(local)
	if err != nil {
		return nil, fmt.Errorf("open a raw socket on %s: %w", local, err)
	}
	socks[local] = s
	return s, nil
}

// pacer spreads pokes at rate per second in batches of a hundredth of the
// rate (at least one): by time t after start, batch + floor(t*rate) pokes
// may have gone. A pure function of time, so tests drive it with a fake
// clock.
type pacer struct {
	rate  int
	start time.Time
}

func (p pacer) batch() int { return max(1, p.rate/100) }

// allowed returns how many pokes may have been sent by now.
func (p pacer) allowed(now time.Time) int {
	el := max(0, now.Sub(p.start))
	return p.batch() + int(int64(el)*int64(p.rate)/int64(time.Second))
}

// next returns when a batch more than sent pokes is allowed: the first
// time t with floor(t*rate) >= sent.
func (p pacer) next(sent int) time.Time {
	ns := (int64(sent)*int64(time.Second) + int64(p.rate) - 1) / int64(p.rate)
	return p.start.Add(time.Duration(ns))
}

// clock is the time source of a Poker; tests use a fake.
type clock interface {
	Now() time.Time
	After(time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// tcpHeaderLen is the size of a TCP header without options.
const tcpHeaderLen = 20

// appendACK appends a bare TCP ACK from local to remote with the given
// sequence and acknowledgement numbers, its checksum computed over the
// IPv4 or IPv6 pseudo-header.
func appendACK(b []byte, local, remote netip.AddrPort, seq, ack uint32) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, local.Port())
	b = binary.BigEndian.AppendUint16(b, remote.Port())
	b = binary.BigEndian.AppendUint32(b, seq)
	b = binary.BigEndian.AppendUint32(b, ack)
	b = append(b, 5<<4, 0x10)                   // data offset 5 words; flags: ACK
	b = binary.BigEndian.AppendUint16(b, 65535) // window
	b = append(b, 0, 0, 0, 0)                   // checksum, urgent pointer
	seg := b[start:]
	binary.BigEndian.PutUint16(seg[16:], checksum(local.Addr(), remote.Addr(), seg))
	return b
}

// checksum returns the TCP checksum of seg (its checksum field zero) sent
// from src to dst (RFC 793, RFC 8200 section 8.1).
func checksum(src, dst netip.Addr, seg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	sum += 6 // protocol TCP
	sum += uint32(len(seg))
	add(seg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// rawSocket sends TCP segments from one local address.
type rawSocket interface {
	WriteTo(seg []byte, to netip.Addr, deadline time.Time) error
	Close() error
}

// ipSocket is a raw IPPROTO_TCP socket bound to a local address; the
// kernel adds the IP header.
type ipSocket struct{ c *net.IPConn }

// dropAll is a socket filter that accepts nothing: a raw TCP socket would
// otherwise get a copy of every TCP packet the host receives.
var dropAll = func() []bpf.RawInstruction {
	p, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		panic(err)
	}
	return p
}()

func openRaw(local netip.Addr) (rawSocket, error) {
	network := "ip4:tcp"
	if local.Is6() {
		network = "ip6:tcp"
	}
	c, err := net.ListenIP(network, &net.IPAddr{IP: local.AsSlice()})
	if err != nil {
		return nil, err
	}
	if local.Is4() {
		err = ipv4.NewPacketConn(c).SetBPF(dropAll)
	} else {
		err = ipv6.NewPacketConn(c).SetBPF(dropAll)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("attach a filter: %w", err)
	}
	return ipSocket{c}, nil
}

func (s ipSocket) WriteTo(seg []byte, to netip.Addr, deadline time.Time) error {
	if err := s.c.SetWriteDeadline(deadline); err != nil {
		return err
	}
	_, err := s.c.WriteToIP(seg, &net.IPAddr{IP: to.AsSlice()})
	return err
}

func (s ipSocket) Close() error { return s.c.Close() }
