package conns

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAppendACK compares the poke with the bytes a hand-run experiment
// (a script building the same IPv4/TCP header and checksum for these
// inputs) sent when the poke was first measured.
func TestAppendACK(t *testing.T) {
	cases := []struct {
		c        Conn
		seq, ack uint32
		want     string
	}{
		{conn("192.0.2.10:6443", "198.51.100.7:40000"), 0x01020304, 0xa0b0c0d0, "192b9c4001020304a0b0c0d05010ffffa89c0000"},
		{conn("[2001:db8::10]:6443", "[2001:db8::7]:40000"), 0xfffffff0, 0x0000000f, "192b9c40fffffff00000000f5010ffff9ee00000"},
	}
	for _, c := range cases {
		got := appendACK([]byte{0xee}, c.c.Local, c.c.Remote, c.seq, c.ack)
		if h := hex.EncodeToString(got); h != "ee"+c.want {
			t.Errorf("appendACK(%v) = %s, want ee%s", c.c, h, c.want)
		}
	}
}

// fakeClock advances only when the code under test waits: After(d) moves
// the time d ahead and fires at once.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(max(d, 0))
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// fakeNet records every poke with the fake time it was sent at.
type fakeNet struct {
	clock   *fakeClock
	mu      sync.Mutex
	sent    []sentPoke
	open    map[netip.Addr]int // sockets open per local address
	opened  int
	refuse  map[netip.Addr]error // open fails for these
	failDst map[netip.Addr]error // sends to these fail
}

type sentPoke struct {
	at       time.Time
	from, to netip.Addr
	seg      []byte
}

type fakeSock struct {
	n     *fakeNet
	local netip.Addr
}

func (n *fakeNet) openRaw(local netip.Addr) (rawSocket, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.refuse[local]; err != nil {
		return nil, err
	}
	n.open[local]++
	n.opened++
	return fakeSock{n, local}, nil
}

func (s fakeSock) WriteTo(seg []byte, to netip.Addr, _ time.Time) error {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	if err := s.n.failDst[to]; err != nil {
		return err
	}
	s.n.sent = append(s.n.sent, sentPoke{at: s.n.clock.Now(), from: s.local, to: to, seg: append([]byte(nil), seg...)})
	return nil
}

func (s fakeSock) Close() error {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	s.n.open[s.local]--
	return nil
}

func newFakePoker(t *testing.T, cfg PokeConfig) (*Poker, *fakeNet) {
	t.Helper()
	p, err := NewPoker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	n := &fakeNet{clock: clk, open: map[netip.Addr]int{}, refuse: map[netip.Addr]error{}, failDst: map[netip.Addr]error{}}
	p.clock, p.open = clk, n.openRaw
	seq := uint32(0)
	p.rand = func() uint32 { seq++; return seq }
	return p, n
}

func clients(vip string, n int) []Conn {
	out := make([]Conn, 0, n)
	for i := range n {
		out = append(out, Conn{
			Local:  netip.AddrPortFrom(netip.MustParseAddr(vip), 6443),
			Remote: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i % 250)}), uint16(1024+i)),
		})
	}
	return out
}

func TestPokePaced(t *testing.T) {
	for _, tc := range []struct {
		rate, n   int
		timeout   time.Duration
		wantSent  int
		wantTotal time.Duration // the fake time of the last poke
	}{
		// 20,000 clients at the default rate: 2 s, in 10 ms batches of 100.
		{rate: 0, n: 20000, wantSent: 20000, wantTotal: 1990 * time.Millisecond},
		// A rate under 100/s: batches of one.
		{rate: 10, n: 25, wantSent: 25, wantTotal: 2400 * time.Millisecond},
		// The timeout cuts it short: 1000/s for 3 s, 10 at once at the start.
		{rate: 1000, n: 5000, timeout: 3 * time.Second, wantSent: 3000, wantTotal: 2990 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("rate %d n %d", tc.rate, tc.n), func(t *testing.T) {
			p, n := newFakePoker(t, PokeConfig{Rate: tc.rate, Timeout: tc.timeout})
			start := n.clock.Now()
			res, err := p.Poke(context.Background(), clients("192.0.2.10", tc.n))
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent != tc.wantSent || res.Unsent != tc.n-tc.wantSent || res.Failed != 0 {
				t.Fatalf("result %+v, want %d sent, %d unsent", res, tc.wantSent, tc.n-tc.wantSent)
			}
			if len(n.sent) != tc.wantSent {
				t.Fatalf("%d pokes on the wire, want %d", len(n.sent), tc.wantSent)
			}
			rate := p.cfg.Rate
			batch := max(1, rate/100)
			for i, s := range n.sent {
				el := s.at.Sub(start)
				if limit := batch + int(int64(el)*int64(rate)/int64(time.Second)); i+1 > limit {
					t.Fatalf("poke %d sent %v after the start: more than %d by then", i+1, el, limit)
				}
			}
			if last := n.sent[len(n.sent)-1].at.Sub(start); last != tc.wantTotal {
				t.Errorf("last poke at %v, want %v", last, tc.wantTotal)
			}
			if got := n.clock.Now().Sub(start); tc.timeout > 0 && got > tc.timeout {
				t.Errorf("Poke returned %v after the start, past its timeout %v", got, tc.timeout)
			}
			for a, k := range n.open {
				if k != 0 {
					t.Errorf("%d sockets on %s left open", k, a)
				}
			}
		})
	}
}

func TestPokeOneSocketPerVIPAndSource(t *testing.T) {
	p, n := newFakePoker(t, PokeConfig{})
	cs := append(clients("192.0.2.10", 30), clients("192.0.2.20", 30)...)
	cs = append(cs, conn("[2001:db8::10]:6443", "[2001:db8::7]:40000"))
	if _, err := p.Poke(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	if n.opened != 3 {
		t.Errorf("%d sockets opened for 3 local addresses", n.opened)
	}
	for i, s := range n.sent {
		c := cs[i]
		if s.from != c.Local.Addr() || s.to != c.Remote.Addr() {
			t.Fatalf("poke %d from %s to %s, want %v", i, s.from, s.to, c)
		}
		want := appendACK(nil, c.Local, c.Remote, uint32(2*i+1), uint32(2*i+2))
		if string(s.seg) != string(want) {
			t.Fatalf("poke %d: segment %x, want %x", i, s.seg, want)
		}
	}
}

func TestPokeFailures(t *testing.T) {
	p, n := newFakePoker(t, PokeConfig{})
	notHere := errors.New("cannot assign requested address")
	n.refuse[netip.MustParseAddr("192.0.2.20")] = notHere
	n.failDst[netip.MustParseAddr("198.51.100.3")] = errors.New("network is unreachable")
	cs := append(clients("192.0.2.10", 10), clients("192.0.2.20", 5)...)
	cs = append(cs, Conn{})
	res, err := p.Poke(context.Background(), cs)
	if res.Sent != 9 || res.Failed != 7 || res.Unsent != 0 {
		t.Fatalf("result %+v, want 9 sent (one client unreachable), 7 failed (5 on a VIP not here, 1 unreachable, 1 invalid)", res)
	}
	if !errors.Is(err, notHere) {
		t.Fatalf("error %v does not wrap the open failure", err)
	}
	for _, w := range []string{"192.0.2.20", "unreachable", "not a valid connection"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	if n.opened != 1 {
		t.Errorf("%d sockets opened, want 1 (the refused address is not retried)", n.opened)
	}
}

func TestPokeStopsWithContext(t *testing.T) {
	p, n := newFakePoker(t, PokeConfig{Rate: 100})
	ctx, cancel := context.WithCancel(context.Background())
	cs := clients("192.0.2.10", 50)
	// Cancel once the tenth poke went out.
	p.rand = func() uint32 {
		if len(n.sent) == 9 {
			cancel()
		}
		return 1
	}
	res, err := p.Poke(ctx, cs)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if res.Sent != 10 || res.Unsent != 40 {
		t.Fatalf("result %+v, want 10 sent and 40 unsent", res)
	}
}

func TestNewPokerRefusesNegative(t *testing.T) {
	if _, err := NewPoker(PokeConfig{Rate: -1}); err == nil {
		t.Error("a negative rate was accepted")
	}
	if _, err := NewPoker(PokeConfig{Timeout: -time.Second}); err == nil {
		t.Error("a negative timeout was accepted")
	}
}
