package bgp

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/vipd/vipd/bfd"
)

// fakeBFD stands in for *bfd.Server: it records what the speaker asks.
type fakeBFD struct {
	mu       sync.Mutex
	sessions map[netip.Addr]bfd.SessionConfig
	status   map[netip.Addr]bfd.Status
	removed  []netip.Addr
	shutdown int
}

func newFakeBFD() *fakeBFD {
	return &fakeBFD{sessions: map[netip.Addr]bfd.SessionConfig{}, status: map[netip.Addr]bfd.Status{}}
}

func (f *fakeBFD) Set(c bfd.SessionConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[c.Peer] = c
	return nil
}

func (f *fakeBFD) Remove(a netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, a)
	f.removed = append(f.removed, a)
}

func (f *fakeBFD) Status(a netip.Addr) (bfd.Status, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.status[a]
	return st, ok
}

func (f *fakeBFD) Shutdown(context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shutdown++
}

func (f *fakeBFD) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// startBFDSpeaker starts a speaker with the fake BFD server and peers.
func startBFDSpeaker(t *testing.T, peers ...Peer) (*Speaker, *fakeBFD) {
	t.Helper()
	s, err := New(Config{ASN: 65001, RouterID: netip.MustParseAddr("192.0.2.1"), Peers: peers, VIPs: testVIPs, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeBFD()
	s.bfd = f
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s, f
}

// adminDown waits until GoBGP reports the peer's admin state as want and
// returns it, or returns the other state after 5s. GoBGP applies
// DisablePeer and EnablePeer in the peer's FSM goroutine, after the call
// returned: this waits for GoBGP, not for the Speaker.
func adminDown(t *testing.T, s *Speaker, a netip.Addr, want bool) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var down, found bool
		err := s.server.ListPeer(context.Background(), &api.ListPeerRequest{Address: a.String()}, func(p *api.Peer) {
			found = true
			down = p.GetState().GetAdminState() == api.PeerState_ADMIN_STATE_DOWN
		})
		if err != nil || !found {
			t.Fatalf("list peer %s: %v (found %v)", a, err, found)
		}
		if down == want || time.Now().After(deadline) {
			return down
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestBFDSessionsFollowPeers(t *testing.T) {
	withBFD := loopbackPeer(2)
	withBFD.BFD = BFD{Enabled: true}
	fast := loopbackPeer(3)
	fast.BFD = BFD{Enabled: true, MinInterval: 100 * time.Millisecond, Multiplier: 5}
	s, f := startBFDSpeaker(t, withBFD, fast, loopbackPeer(4))
	want := map[netip.Addr]bfd.SessionConfig{
		withBFD.Address: {Peer: withBFD.Address, MinInterval: DefaultBFDMinInterval, Multiplier: DefaultBFDMultiplier},
		fast.Address:    {Peer: fast.Address, MinInterval: 100 * time.Millisecond, Multiplier: 5},
	}
	if len(f.sessions) != 2 || f.sessions[withBFD.Address] != want[withBFD.Address] || f.sessions[fast.Address] != want[fast.Address] {
		t.Fatalf("bfd sessions %+v, want %+v", f.sessions, want)
	}

	// Reload: BFD off for .2, a new interval for .3, on for .4.
	cfg := s.cfg
	cfg.Peers = []Peer{loopbackPeer(2), fast, loopbackPeer(4)}
	cfg.Peers[1].BFD.MinInterval = 50 * time.Millisecond
	cfg.Peers[2].BFD.Enabled = true
	if err := s.Reconfigure(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.sessions[withBFD.Address]; ok || !slices.Contains(f.removed, withBFD.Address) {
		t.Errorf("bfd session of %s not removed: %+v", withBFD.Address, f.sessions)
	}
	if got := f.sessions[fast.Address].MinInterval; got != 50*time.Millisecond {
		t.Errorf("interval of %s = %v, want 50ms", fast.Address, got)
	}
	if _, ok := f.sessions[cfg.Peers[2].Address]; !ok {
		t.Errorf("no bfd session for %s after turning it on", cfg.Peers[2].Address)
	}

	// Status shows the BFD state and diagnostic, the limit and what was
	// accepted.
	f.mu.Lock()
	f.status[fast.Address] = bfd.Status{State: bfd.Down, LocalDiag: bfd.DiagControlDetectionExpired}
	f.mu.Unlock()
	ps, err := s.Peers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		switch p.Address {
		case fast.Address:
			if p.BFD != "down" || p.BFDDiag != "control_detection_time_expired" || p.MaxPrefixes != DefaultMaxPrefixes || p.Accepted != 0 {
				t.Errorf("peer %+v, want bfd down with its diagnostic, limit %d, 0 accepted", p, DefaultMaxPrefixes)
			}
		case withBFD.Address:
			if p.BFD != "" {
				t.Errorf("peer %+v: bfd %q after turning it off, want \"\"", p, p.BFD)
			}
		}
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if f.shutdown != 1 {
		t.Errorf("bfd Shutdown called %d times by Stop, want 1 (AdminDown before CEASE)", f.shutdown)
	}
}

func TestBFDDownClosesTheBGPSession(t *testing.T) {
	p := loopbackPeer(2)
	p.BFD = BFD{Enabled: true}
	other := loopbackPeer(3) // no BFD
	s, _ := startBFDSpeaker(t, p, other)
	ctx := context.Background()
	held := func() bool {
		ps, err := s.Peers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ps[0].HeldByBFD
	}
	steps := []struct {
		name     string
		change   bfd.Change
		wantDown bool
	}{
		{"init to down: never was up, nothing to close", bfd.Change{Peer: p.Address, From: bfd.Init, To: bfd.Down, RemoteState: bfd.Down}, false},
		{"down to up with nothing held: nothing to open", bfd.Change{Peer: p.Address, From: bfd.Down, To: bfd.Up, RemoteState: bfd.Up}, false},
		{"neighbor admin down keeps the session (RFC 5882 3.2)", bfd.Change{Peer: p.Address, From: bfd.Up, To: bfd.Down, Diag: bfd.DiagNeighborDown, RemoteState: bfd.AdminDown}, false},
		{"detection time expired closes it", bfd.Change{Peer: p.Address, From: bfd.Up, To: bfd.Down, Diag: bfd.DiagControlDetectionExpired, RemoteState: bfd.Up}, true},
		{"still down through init", bfd.Change{Peer: p.Address, From: bfd.Down, To: bfd.Init, RemoteState: bfd.Down}, true},
		{"up again opens it", bfd.Change{Peer: p.Address, From: bfd.Init, To: bfd.Up, RemoteState: bfd.Up}, false},
		{"neighbor signalled down closes it", bfd.Change{Peer: p.Address, From: bfd.Up, To: bfd.Down, Diag: bfd.DiagNeighborDown, RemoteState: bfd.Down}, true},
		{"a peer without bfd is never touched", bfd.Change{Peer: other.Address, From: bfd.Up, To: bfd.Down, RemoteState: bfd.Up}, true},
	}
	// HeldByBFD is the speaker's own record, checked synchronously: a wrong
	// DisablePeer in a step that keeps the session shows there even
	// before GoBGP applies it.
	for _, st := range steps {
		s.applyBFD(ctx, st.change)
		if got := adminDown(t, s, p.Address, st.wantDown); got != st.wantDown {
			t.Fatalf("%s: admin down = %v, want %v", st.name, got, st.wantDown)
		}
		if got := held(); got != st.wantDown {
			t.Fatalf("%s: HeldByBFD = %v, want %v", st.name, got, st.wantDown)
		}
	}
	if adminDown(t, s, other.Address, false) {
		t.Fatal("the peer without bfd was closed")
	}

	// A reload that re-creates the held peer (new hold time) keeps it
	// closed; turning BFD off opens it.
	cfg := s.cfg
	cfg.Peers[0].HoldTime = 30 * time.Second
	if err := s.Reconfigure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if !adminDown(t, s, p.Address, true) {
		t.Fatal("re-created peer is not held down while bfd is down")
	}
	cfg.Peers[0].BFD.Enabled = false
	if err := s.Reconfigure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if adminDown(t, s, p.Address, false) || held() {
		t.Fatal("peer still held after turning bfd off")
	}
}

// TestBFDChangesReachTheSpeaker: OnChange (called under the BFD server's
// lock) hands the change to the speaker's goroutine, which closes the
// session.
func TestBFDChangesReachTheSpeaker(t *testing.T) {
	p := loopbackPeer(2)
	p.BFD = BFD{Enabled: true}
	s, _ := startBFDSpeaker(t, p)
	applied := make(chan struct{}, 1)
	s.mu.Lock()
	s.bfdApplied = func() { applied <- struct{}{} }
	s.mu.Unlock()
	s.onBFDChange(bfd.Change{Peer: p.Address, From: bfd.Up, To: bfd.Down, Diag: bfd.DiagControlDetectionExpired, RemoteState: bfd.Up})
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("bfd change not applied within 10s")
	}
	if !adminDown(t, s, p.Address, true) {
		t.Fatal("session not closed after the bfd change")
	}
}

// TestReassertAdmin: when GoBGP's admin state differs from what BFD
// wants (a request GoBGP dropped), the periodic check asks again.
func TestReassertAdmin(t *testing.T) {
	p := loopbackPeer(2)
	p.BFD = BFD{Enabled: true}
	s, _ := startBFDSpeaker(t, p)
	ctx := context.Background()
	s.mu.Lock()
	s.bfdHeld[p.Address] = s.now() // as if DisablePeer had been lost
	s.mu.Unlock()
	s.reassertAdmin(ctx)
	if !adminDown(t, s, p.Address, true) {
		t.Fatal("held peer not closed by reassertAdmin")
	}
	s.mu.Lock()
	delete(s.bfdHeld, p.Address) // as if EnablePeer had been lost
	s.mu.Unlock()
	s.reassertAdmin(ctx)
	if adminDown(t, s, p.Address, false) {
		t.Fatal("released peer not opened by reassertAdmin")
	}
}

// TestBFDHoldIsBounded: a session closed by a BFD failure is opened again
// after bfdHoldMax even if BFD stays down (a router that runs BFD only
// while BGP is up would never bring it back otherwise).
func TestBFDHoldIsBounded(t *testing.T) {
	p := loopbackPeer(2)
	p.BFD = BFD{Enabled: true}
	s, _ := startBFDSpeaker(t, p)
	ctx := context.Background()
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	s.mu.Lock()
	s.now = func() time.Time { return now } // called with s.mu held
	s.mu.Unlock()
	advance := func(d time.Duration) {
		s.mu.Lock()
		now = now.Add(d)
		s.mu.Unlock()
	}
	s.applyBFD(ctx, bfd.Change{Peer: p.Address, From: bfd.Up, To: bfd.Down, Diag: bfd.DiagControlDetectionExpired, RemoteState: bfd.Up})
	if !adminDown(t, s, p.Address, true) {
		t.Fatal("not closed by the bfd failure")
	}
	advance(bfdHoldMax - time.Nanosecond)
	s.reassertAdmin(ctx)
	if !adminDown(t, s, p.Address, true) {
		t.Fatal("opened before bfdHoldMax")
	}
	advance(time.Nanosecond)
	s.reassertAdmin(ctx)
	if adminDown(t, s, p.Address, false) {
		t.Fatal("still closed after bfdHoldMax")
	}
	ps, err := s.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].HeldByBFD {
		t.Fatal("HeldByBFD after the release")
	}
	// A new failure after BFD was Up again closes it again.
	s.applyBFD(ctx, bfd.Change{Peer: p.Address, From: bfd.Down, To: bfd.Up, RemoteState: bfd.Up})
	s.applyBFD(ctx, bfd.Change{Peer: p.Address, From: bfd.Up, To: bfd.Down, Diag: bfd.DiagControlDetectionExpired, RemoteState: bfd.Up})
	if !adminDown(t, s, p.Address, true) {
		t.Fatal("not closed by the second failure")
	}
}
