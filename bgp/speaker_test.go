package bgp

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// testVIPs are the addresses the test speakers may announce.
var testVIPs = []netip.Addr{
	netip.MustParseAddr("203.0.113.10"),
	netip.MustParseAddr("203.0.113.11"),
	netip.MustParseAddr("2001:db8:100::10"),
}

// startSpeaker starts a speaker that does not listen; peers, if any, must be
// addresses whose dials fail locally (loopback).
func startSpeaker(t *testing.T, peers ...Peer) *Speaker {
	t.Helper()
	s, err := New(Config{
		ASN:      65001,
		RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers:    peers,
		VIPs:     testVIPs,
		Logger:   testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// globalRoutes returns the decoded best paths of the global RIB for family.
func globalRoutes(t *testing.T, s *Speaker, family bgp.Family) map[string]decoded {
	t.Helper()
	got := make(map[string]decoded)
	err := s.server.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: family}, func(_ bgp.NLRI, paths []*apiutil.Path) {
		for _, p := range paths {
			if p.Best {
				dp := decodePath(t, p)
				got[dp.prefix] = dp
			}
		}
	})
	if err != nil {
		t.Fatalf("list path: %v", err)
	}
	return got
}

func TestAnnounceDrainWithdraw(t *testing.T) {
	s := startSpeaker(t)
	ctx := context.Background()
	v4 := netip.MustParseAddr("203.0.113.10")
	v6 := netip.MustParseAddr("2001:db8:100::10")

	for i := 0; i < 2; i++ { // announcing twice is a no-op
		if err := s.Announce(ctx, v4); err != nil {
			t.Fatal(err)
		}
		if err := s.Announce(ctx, v6); err != nil {
			t.Fatal(err)
		}
	}
	r4 := globalRoutes(t, s, familyIPv4)
	if len(r4) != 1 || r4["203.0.113.10/32"].nexthop != "0.0.0.0" || len(r4["203.0.113.10/32"].communities) != 0 {
		t.Fatalf("after announce: ipv4 rib = %+v", r4)
	}
	r6 := globalRoutes(t, s, familyIPv6)
	if len(r6) != 1 || r6["2001:db8:100::10/128"].nexthop != "::" {
		t.Fatalf("after announce: ipv6 rib = %+v", r6)
	}

	for i := 0; i < 2; i++ {
		if err := s.Drain(ctx, v4); err != nil {
			t.Fatal(err)
		}
	}
	r4 = globalRoutes(t, s, familyIPv4)
	if got := r4["203.0.113.10/32"].communities; !slices.Equal(got, []uint32{GracefulShutdown}) || len(r4) != 1 {
		t.Fatalf("after drain: ipv4 rib = %+v, want one route with 65535:0", r4)
	}

	// Announcing a draining address takes GRACEFUL_SHUTDOWN off again.
	if err := s.Announce(ctx, v4); err != nil {
		t.Fatal(err)
	}
	if got := globalRoutes(t, s, familyIPv4)["203.0.113.10/32"].communities; len(got) != 0 {
		t.Fatalf("re-announce after drain: communities = %v, want none", got)
	}

	for i := 0; i < 2; i++ {
		if err := s.Withdraw(ctx, v4); err != nil {
			t.Fatal(err)
		}
	}
	if r4 := globalRoutes(t, s, familyIPv4); len(r4) != 0 {
		t.Fatalf("after withdraw: ipv4 rib = %+v, want empty", r4)
	}
	if r6 := globalRoutes(t, s, familyIPv6); len(r6) != 1 {
		t.Fatalf("after ipv4 withdraw: ipv6 rib = %+v, want the ipv6 route kept", r6)
	}
	if err := s.Withdraw(ctx, v6); err != nil {
		t.Fatal(err)
	}
	if r6 := globalRoutes(t, s, familyIPv6); len(r6) != 0 {
		t.Fatalf("after withdraw: ipv6 rib = %+v, want empty", r6)
	}
	// Withdrawing a never-announced address is a no-op.
	if err := s.Withdraw(ctx, netip.MustParseAddr("203.0.113.99")); err != nil {
		t.Fatal(err)
	}
}

func TestAnnounceRejectsBadAddress(t *testing.T) {
	s := startSpeaker(t)
	if err := s.Announce(context.Background(), netip.MustParseAddr("127.0.0.1")); err == nil {
		t.Fatal("Announce(127.0.0.1) succeeded, want error")
	}
}

func TestNotRunning(t *testing.T) {
	s, err := New(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("203.0.113.10")
	if err := s.Announce(context.Background(), addr); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Errorf("Announce before Start: err = %v, want not started", err)
	}
	if _, err := s.Peers(context.Background()); err == nil {
		t.Error("Peers before Start succeeded, want error")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop before Start: %v", err)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	c := validConfig()
	c.ASN = 0
	c.Peers[0].HoldTime = time.Second
	_, err := New(c)
	if err == nil || !strings.Contains(err.Error(), "asn") || !strings.Contains(err.Error(), "hold_time") {
		t.Fatalf("New: err = %v, want both problems", err)
	}
}

// loopbackPeer is a peer whose dials fail inside this host's loopback
// (nothing listens on 127.0.0.2:179 in a test), so no packet leaves the host.
func loopbackPeer(last byte, comms ...string) Peer {
	return Peer{Address: netip.AddrFrom4([4]byte{127, 0, 0, last}), ASN: 65000, HoldTime: 9 * time.Second, Communities: comms}
}

func TestPeersAndReconfigure(t *testing.T) {
	s := startSpeaker(t, loopbackPeer(2, "65000:2"), loopbackPeer(3))
	ctx := context.Background()

	ps, err := s.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Address != netip.MustParseAddr("127.0.0.2") || ps[1].Address != netip.MustParseAddr("127.0.0.3") {
		t.Fatalf("Peers() = %+v, want 127.0.0.2 and 127.0.0.3", ps)
	}
	for _, p := range ps {
		if p.ASN != 65000 || p.State == "established" || p.State == "unknown" || p.Uptime != 0 {
			t.Errorf("peer %+v: want asn 65000, not established, no uptime", p)
		}
	}

	cfg := s.cfg
	cfg.Peers = []Peer{loopbackPeer(3, "65000:3"), loopbackPeer(4)}
	if err := s.Reconfigure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	ps, err = s.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, p := range ps {
		addrs = append(addrs, p.Address.String())
	}
	if !slices.Equal(addrs, []string{"127.0.0.3", "127.0.0.4"}) {
		t.Fatalf("after reconfigure: peers = %v, want 127.0.0.3 127.0.0.4", addrs)
	}
	var sets []string
	err = s.server.ListDefinedSet(ctx, &api.ListDefinedSetRequest{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR}, func(d *api.DefinedSet) {
		sets = append(sets, strings.Join(d.List, ","))
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sets, []string{"127.0.0.3/32"}) {
		t.Errorf("after reconfigure: neighbor sets = %v, want only 127.0.0.3/32 (the peer with communities)", sets)
	}

	// A changed hold time re-creates the peer.
	cfg.Peers[1].HoldTime = 30 * time.Second
	if err := s.Reconfigure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var hold uint64
	err = s.server.ListPeer(ctx, &api.ListPeerRequest{Address: "127.0.0.4"}, func(p *api.Peer) { hold = p.Timers.Config.HoldTime })
	if err != nil {
		t.Fatal(err)
	}
	if hold != 30 {
		t.Errorf("after hold time change: hold = %d, want 30", hold)
	}

	bad := cfg
	bad.ASN = 65002
	if err := s.Reconfigure(ctx, bad); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Errorf("Reconfigure with new ASN: err = %v, want restart needed", err)
	}
	bad = cfg
	bad.GracefulRestart.RestartTime = 5 * time.Second
	if err := s.Reconfigure(ctx, bad); err == nil || !strings.Contains(err.Error(), "graceful restart settings need a restart") {
		t.Errorf("Reconfigure turning graceful restart on: err = %v, want restart needed", err)
	}
}

// TestResumeOriginatesHeldBeforePeers: a resumed speaker has the held
// routes in its RIB from the start, and its peers carry the restarting
// state (the OPEN's Restart State and Forwarding State bits).
func TestResumeOriginatesHeldBeforePeers(t *testing.T) {
	v4, v6 := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:100::10")
	s, err := New(Config{ASN: 65001, RouterID: netip.MustParseAddr("192.0.2.1"), Peers: []Peer{loopbackPeer(2)}, VIPs: testVIPs,
		GracefulRestart: GracefulRestart{RestartTime: 5 * time.Second}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Resume(ctx, []netip.Addr{v4, v6}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	if r := globalRoutes(t, s, familyIPv4); len(r) != 1 || r["203.0.113.10/32"].nexthop != "0.0.0.0" {
		t.Errorf("ipv4 rib after Resume = %+v, want the held route", r)
	}
	if r := globalRoutes(t, s, familyIPv6); len(r) != 1 {
		t.Errorf("ipv6 rib after Resume = %+v, want the held route", r)
	}
	for _, a := range []netip.Addr{v4, v6} {
		if ok, err := s.Announced(ctx, a); err != nil || !ok {
			t.Errorf("Announced(%s) = %t, %v; want true", a, ok, err)
		}
	}
	var gr *api.GracefulRestart
	err = s.server.ListPeer(ctx, &api.ListPeerRequest{Address: "127.0.0.2"}, func(p *api.Peer) { gr = p.GracefulRestart })
	if err != nil {
		t.Fatal(err)
	}
	if gr == nil || !gr.Enabled || !gr.LocalRestarting || gr.RestartTime != 5 {
		t.Errorf("peer graceful restart = %v, want enabled, restarting, 5s", gr)
	}
	// Withdrawing a held route works like any announced one.
	if err := s.Withdraw(ctx, v6); err != nil {
		t.Fatal(err)
	}
	if r := globalRoutes(t, s, familyIPv6); len(r) != 0 {
		t.Errorf("ipv6 rib after withdraw = %+v, want empty", r)
	}
}

func TestResumeRejectsUnknownVIP(t *testing.T) {
	s, err := New(Config{ASN: 65001, RouterID: netip.MustParseAddr("192.0.2.1"), VIPs: testVIPs, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Resume(context.Background(), []netip.Addr{netip.MustParseAddr("203.0.113.99")}); err == nil || !strings.Contains(err.Error(), "not a configured VIP") {
		t.Fatalf("Resume with an unknown VIP: err = %v, want not a configured VIP", err)
	}
	// Nothing started: a Start afterwards still works once.
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start after a refused Resume: %v", err)
	}
	s.Stop()
}

// TestDetachEndsCalls: after Detach the speaker refuses calls, and Stop
// and a second Detach do nothing (no panic, no CEASE: the sessions are
// left to the process exit).
func TestDetachEndsCalls(t *testing.T) {
	s := startSpeaker(t, loopbackPeer(2))
	// Detach leaves GoBGP to the process exit; this test process goes on,
	// so stop it here (other tests count GoBGP's goroutines).
	t.Cleanup(func() { s.server.Stop() })
	ctx := context.Background()
	if err := s.Announce(ctx, netip.MustParseAddr("203.0.113.10")); err != nil {
		t.Fatal(err)
	}
	s.Detach()
	s.Detach()
	if err := s.Announce(ctx, netip.MustParseAddr("203.0.113.10")); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Announce after Detach: err = %v, want stopped", err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop after Detach: %v", err)
	}
}

// serveGoroutines counts goroutines by whether they run GoBGP's Serve loop.
func goroutines() (serve, other []string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("server.(*BgpServer).Serve(")) {
			serve = append(serve, string(g))
		} else if bytes.Contains(g, []byte("github.com/osrg/gobgp")) || bytes.Contains(g, []byte("vipd/bgp.(*Speaker)")) || bytes.Contains(g, []byte("vipd/bfd.")) {
			other = append(other, string(g))
		}
	}
	return serve, other
}

func TestStopEndsGoBGP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(Config{ASN: 65001, RouterID: netip.MustParseAddr("192.0.2.1"), Peers: []Peer{loopbackPeer(2, "65000:2")}, VIPs: testVIPs, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	serveBefore, _ := goroutines()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx, netip.MustParseAddr("203.0.113.10")); err != nil {
		t.Fatal(err)
	}
	cancel() // ctx end stops the speaker
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(context.Background(), netip.MustParseAddr("203.0.113.10")); err == nil {
		t.Error("Announce after Stop succeeded, want error")
	}
	// Goroutines end asynchronously after their contexts are cancelled; poll
	// (bounded) instead of sleeping a fixed time.
	var other []string
	for i := 0; i < 200; i++ {
		_, other = goroutines()
		if len(other) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(other) != 0 {
		t.Errorf("goroutines left after Stop:\n%s", strings.Join(other, "\n\n"))
	}
	serveAfter, _ := goroutines()
	if len(serveAfter) > len(serveBefore) {
		t.Errorf("Serve goroutines: %d before, %d after; want GoBGP's Serve loop ended by Stop", len(serveBefore), len(serveAfter))
	}
}

// TestGlobalRIBFamilies: GoBGP's global RIB has tables for IPv4 and IPv6
// unicast only. GoBGP v4 builds every family it knows by default, each
// table with 2048 shards: about 10 MiB of heap for families vipd never
// uses.
func TestGlobalRIBFamilies(t *testing.T) {
	s := startSpeaker(t)
	list := func(f bgp.Family) error {
		return s.server.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f}, func(bgp.NLRI, []*apiutil.Path) {})
	}
	for _, f := range []bgp.Family{familyIPv4, familyIPv6} {
		if err := list(f); err != nil {
			t.Errorf("global rib %s: %v", f, err)
		}
	}
	for _, f := range []bgp.Family{bgp.RF_IPv4_VPN, bgp.RF_EVPN, bgp.RF_FS_IPv4_UC} {
		if err := list(f); err == nil {
			t.Errorf("global rib has a table for %s, want only ipv4 and ipv6 unicast", f)
		}
	}
}
