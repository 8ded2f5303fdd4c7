package bfd

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeTx records the packets a session sends.
type fakeTx struct {
	mu     sync.Mutex
	pkts   []Packet
	closed bool
}

func (f *fakeTx) Write(b []byte) (int, error) {
	var p Packet
	if err := p.Unmarshal(b); err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pkts = append(f.pkts, p)
	return len(b), nil
}

func (f *fakeTx) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeTx) sent() []Packet {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pkts)
}

func (f *fakeTx) last(t *testing.T) Packet {
	t.Helper()
	ps := f.sent()
	if len(ps) == 0 {
		t.Fatal("nothing sent")
	}
	return ps[len(ps)-1]
}

// fakeRx is a listener that never receives: the tests call
// Server.receive directly.
type fakeRx struct{ done chan struct{} }

func (f *fakeRx) ReadMsgUDPAddrPort(b, oob []byte) (int, int, int, netip.AddrPort, error) {
	<-f.done
	return 0, 0, 0, netip.AddrPort{}, net.ErrClosed
}

func (f *fakeRx) Close() error { close(f.done); return nil }

// testServer is a Server with fake sockets and a clock the test moves.
type testServer struct {
	*Server
	now     time.Time
	tx      map[netip.Addr]*fakeTx
	changes []Change
}

var (
	peer4 = netip.MustParseAddr("192.0.2.1")
	peer6 = netip.MustParseAddr("2001:db8::1")
)

func newTestServer(t *testing.T) *testServer {
	ts := &testServer{now: t0, tx: map[netip.Addr]*fakeTx{}}
	ts.Server = NewServer(Config{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Rand:     rand.New(rand.NewPCG(1, 2)),
		OnChange: func(c Change) { ts.changes = append(ts.changes, c) },
	})
	ts.Server.now = func() time.Time { return ts.now }
	ts.Server.dial = func(c SessionConfig, port int) (conn, error) {
		f := &fakeTx{}
		ts.tx[c.Peer] = f
		return f, nil
	}
	ts.Server.listen = func(bool, int) (rxConn, error) { return &fakeRx{done: make(chan struct{})}, nil }
	t.Cleanup(func() { ts.close(); ts.wg.Wait() })
	return ts
}

func (ts *testServer) add(t *testing.T, peer netip.Addr) {
	t.Helper()
	if err := ts.Set(SessionConfig{Peer: peer, MinInterval: 100 * ms, Multiplier: 3}); err != nil {
		t.Fatal(err)
	}
}

// from delivers p from address src with TTL ttl.
func (ts *testServer) from(src netip.Addr, ttl int, p *Packet) {
	var scratch Packet
	ts.receive(src, ttl, p.Append(nil), &scratch)
}

// bringUp runs the handshake with peer, whose discriminator is
// remoteDisc, and returns our discriminator.
func (ts *testServer) bringUp(t *testing.T, peer netip.Addr) uint32 {
	t.Helper()
	ts.serve(ts.now)
	first := ts.tx[peer].last(t)
	if first.State != Down || first.YourDiscriminator != 0 || first.MyDiscriminator == 0 {
		t.Fatalf("first packet %+v, want down with our discriminator", first)
	}
	ts.from(peer, 255, remote(Down, 0))
	ts.from(peer, 255, remote(Up, first.MyDiscriminator))
	if st, _ := ts.Status(peer); st.State != Up {
		t.Fatalf("state %v, want up", st.State)
	}
	return first.MyDiscriminator
}

func TestServerHandshakeAndDetection(t *testing.T) {
	ts := newTestServer(t)
	ts.add(t, peer4)
	ts.add(t, peer6)
	ours := ts.bringUp(t, peer4)
	want := []Change{{Peer: peer4, From: Down, To: Init, RemoteState: Down}, {Peer: peer4, From: Init, To: Up, RemoteState: Up}}
	if !slices.Equal(ts.changes, want) {
		t.Fatalf("changes %+v, want %+v", ts.changes, want)
	}
	// The IPv6 session is independent and still down.
	if st, _ := ts.Status(peer6); st.State != Down {
		t.Fatalf("ipv6 session %v, want down", st.State)
	}
	ts.changes = nil

	// Silence for the detection time: down, diagnostic 1, and the packet
	// saying so goes out.
	det := 300 * ms
	ts.now = ts.now.Add(det - ms)
	ts.from(peer4, 255, remote(Up, ours)) // last packet
	ts.now = ts.now.Add(det - time.Nanosecond)
	ts.serve(ts.now)
	if st, _ := ts.Status(peer4); st.State != Up {
		t.Fatal("down before the detection time")
	}
	ts.now = ts.now.Add(time.Nanosecond)
	ts.serve(ts.now)
	want = []Change{{Peer: peer4, From: Up, To: Down, Diag: DiagControlDetectionExpired, RemoteState: Up}}
	if !slices.Equal(ts.changes, want) {
		t.Fatalf("changes %+v, want %+v", ts.changes, want)
	}
	// The remote hears of it no sooner than its RequiredMinRx (100ms)
	// after our last packet, which went out just before.
	ts.now = ts.now.Add(100 * ms)
	ts.serve(ts.now)
	if p := ts.tx[peer4].last(t); p.State != Down || p.Diag != DiagControlDetectionExpired {
		t.Fatalf("last packet %+v, want down with diag 1", p)
	}
}

func TestServerDropsPackets(t *testing.T) {
	ts := newTestServer(t)
	ts.add(t, peer4)
	ours := ts.bringUp(t, peer4)
	other := netip.MustParseAddr("192.0.2.99")
	for _, c := range []struct {
		name string
		src  netip.Addr
		ttl  int
		p    *Packet
	}{
		{"ttl 254 (not one hop away)", peer4, 254, remote(Down, ours)},
		{"no ttl reported", peer4, -1, remote(Down, ours)},
		{"our discriminator from another address", other, 255, remote(Down, ours)},
		{"unknown discriminator", peer4, 255, remote(Down, ours+1)},
		{"no discriminator from an unknown address", other, 255, remote(Down, 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := ts.badPkts
			ts.from(c.src, c.ttl, c.p)
			if st, _ := ts.Status(peer4); st.State != Up {
				t.Fatalf("state %v: the packet was applied", st.State)
			}
			if ts.badPkts != before+1 {
				t.Errorf("bad packet count %d, want %d", ts.badPkts, before+1)
			}
		})
	}
	// The same Down packet with TTL 255 from the peer is applied.
	ts.from(peer4, 255, remote(Down, ours))
	if st, _ := ts.Status(peer4); st.State != Down || st.LocalDiag != DiagNeighborDown {
		t.Fatalf("state %v diag %v, want down, neighbor_signaled_session_down", st.State, st.LocalDiag)
	}
}

func TestServerAnswersPollAtOnce(t *testing.T) {
	ts := newTestServer(t)
	ts.add(t, peer4)
	ours := ts.bringUp(t, peer4)
	n := len(ts.tx[peer4].sent())
	p := remote(Up, ours)
	p.Poll = true
	ts.from(peer4, 255, p)
	ps := ts.tx[peer4].sent()
	if len(ps) != n+1 || !ps[n].Final || ps[n].Poll {
		t.Fatalf("packets after the poll %+v, want one Final", ps[n:])
	}
}

func TestServerRemoveAndShutdownSendAdminDown(t *testing.T) {
	ts := newTestServer(t)
	ts.add(t, peer4)
	ts.add(t, peer6)
	ts.bringUp(t, peer4)
	ts.bringUp(t, peer6)
	tx4, tx6 := ts.tx[peer4], ts.tx[peer6]

	ts.Remove(peer6)
	if p := tx6.last(t); p.State != AdminDown || p.Diag != DiagAdminDown || !tx6.closed {
		t.Fatalf("removed session: last packet %+v closed %v, want admin_down, closed", p, tx6.closed)
	}
	if _, ok := ts.Status(peer6); ok {
		t.Fatal("removed session still has a status")
	}

	n := len(tx4.sent())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts.Shutdown(ctx) // waits one TX interval (100ms) for the second packet
	ps := tx4.sent()[n:]
	if len(ps) != 2 || ps[0].State != AdminDown || ps[1].State != AdminDown || ps[0].Diag != DiagAdminDown {
		t.Fatalf("packets at shutdown %+v, want two admin_down with diag 7", ps)
	}
	if ts.changes[len(ts.changes)-1] != (Change{Peer: peer4, From: Up, To: AdminDown, Diag: DiagAdminDown, RemoteState: Up}) {
		t.Errorf("last change %+v", ts.changes[len(ts.changes)-1])
	}
}

func TestServerTimerChangeUsesPoll(t *testing.T) {
	ts := newTestServer(t)
	ts.add(t, peer4)
	ours := ts.bringUp(t, peer4)
	f := remote(Up, ours)
	f.Final = true
	ts.from(peer4, 255, f) // ends the poll that followed Up
	if err := ts.Set(SessionConfig{Peer: peer4, MinInterval: 300 * ms, Multiplier: 3}); err != nil {
		t.Fatal(err)
	}
	ts.now = ts.now.Add(100 * ms)
	ts.serve(ts.now)
	if p := ts.tx[peer4].last(t); !p.Poll || p.DesiredMinTxInterval != 300000 || p.RequiredMinRxInterval != 300000 {
		t.Fatalf("packet %+v, want a poll advertising 300ms", p)
	}
	if st, _ := ts.Status(peer4); st.State != Up || st.TxInterval != 100*ms {
		t.Fatalf("status %+v, want still up at 100ms until the Final", st)
	}
}

// TestServerSteadyStateAllocatesNothing: receiving and sending periodic
// packets of an Up session allocates nothing (GOMAXPROCS=1 next to
// memberlist: no garbage per packet).
func TestServerSteadyStateAllocatesNothing(t *testing.T) {
	ts := newTestServer(t)
	ts.add(t, peer4)
	ours := ts.bringUp(t, peer4)
	ts.tx[peer4] = nil
	sink := &countingTx{}
	ts.sessions[peer4].tx = sink
	in := remote(Up, ours).Append(nil)
	var scratch Packet
	allocs := testing.AllocsPerRun(1000, func() {
		ts.now = ts.now.Add(50 * ms)
		ts.receive(peer4, 255, in, &scratch)
		ts.serve(ts.now)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per receive+serve, want 0", allocs)
	}
	if sink.n < 500 {
		t.Fatalf("only %d packets sent in 1000 rounds of 50ms at a 100ms interval", sink.n)
	}
}

type countingTx struct{ n int }

func (c *countingTx) Write(b []byte) (int, error) { c.n++; return len(b), nil }
func (c *countingTx) Close() error                { return nil }

func TestReceivedTTL(t *testing.T) {
	// One IP_TTL control message as the kernel writes it (64-bit layout).
	if cmsgLenSize != 8 {
		t.Skip("layout below is for 64-bit size_t")
	}
	msg := func(level, typ uint32, val int32) []byte {
		b := make([]byte, 24)
		b[0] = 20 // len = header 16 + 4
		b[8], b[12], b[16] = byte(level), byte(typ), byte(val)
		return b
	}
	if got := receivedTTL(msg(0, 2, 255), false); got != 255 {
		t.Errorf("ipv4 ttl %d, want 255", got)
	}
	two := append(msg(41, 99, 1), msg(41, 52, 254)...)
	if got := receivedTTL(two, true); got != 254 {
		t.Errorf("ipv6 hop limit after another message %d, want 254", got)
	}
	if got := receivedTTL(msg(0, 2, 255)[:10], false); got != -1 {
		t.Errorf("truncated: %d, want -1", got)
	}
	if got := receivedTTL(nil, false); got != -1 {
		t.Errorf("none: %d, want -1", got)
	}
}
