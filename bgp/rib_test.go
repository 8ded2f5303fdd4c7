package bgp

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
)

func TestAnnounceOnlyConfiguredVIPs(t *testing.T) {
	s := startSpeaker(t)
	err := s.Announce(context.Background(), netip.MustParseAddr("203.0.113.99"))
	if err == nil || !strings.Contains(err.Error(), "not a configured VIP") {
		t.Fatalf("Announce of an unconfigured address: err = %v, want not a configured VIP", err)
	}
	if r := globalRoutes(t, s, familyIPv4); len(r) != 0 {
		t.Fatalf("rib = %+v, want empty", r)
	}
}

// deleteBehindBack removes addr's path from GoBGP's RIB without telling
// the Speaker, as a bug or an operator with gobgp's API could.
func deleteBehindBack(t *testing.T, s *Speaker, addr netip.Addr) {
	t.Helper()
	p, err := buildPath(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.server.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}}); err != nil {
		t.Fatal(err)
	}
}

// TestAnnouncedSeesTheRIBAndAnnounceRestores: a path deleted from GoBGP's
// RIB behind the speaker's back is reported missing by Announced (once
// its cached listing expires) and put back by Announce, although the
// speaker's own memory says it is announced.
func TestAnnouncedSeesTheRIBAndAnnounceRestores(t *testing.T) {
	s := startSpeaker(t)
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
	v4, v6 := testVIPs[0], testVIPs[2]
	for _, a := range []netip.Addr{v4, v6} {
		if err := s.Announce(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, a netip.Addr, want bool) {
		t.Helper()
		got, err := s.Announced(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: Announced(%s) = %v, want %v", what, a, got, want)
		}
	}
	check("after announce", v4, true)
	check("after announce", v6, true)
	check("never announced", testVIPs[1], false)

	deleteBehindBack(t, s, v4)
	check("within the cached listing", v4, true)
	advance(ribCacheTTL)
	check("next listing", v4, false)
	check("next listing", v6, true)

	if err := s.Announce(ctx, v4); err != nil {
		t.Fatal(err)
	}
	if r := globalRoutes(t, s, familyIPv4); len(r) != 1 || len(r["203.0.113.10/32"].communities) != 0 {
		t.Fatalf("after Announce: rib = %+v, want the path back", r)
	}
	check("after Announce (a change clears the listing)", v4, true)

	// The same for a draining path: Drain puts it back with 65535:0.
	if err := s.Drain(ctx, v4); err != nil {
		t.Fatal(err)
	}
	deleteBehindBack(t, s, v4)
	if err := s.Drain(ctx, v4); err != nil {
		t.Fatal(err)
	}
	if r := globalRoutes(t, s, familyIPv4); len(r["203.0.113.10/32"].communities) != 1 {
		t.Fatalf("after Drain: rib = %+v, want the draining path back", r)
	}
	// A path that is there is not re-added: Announce with the RIB intact
	// is a no-op (the draining path would otherwise lose its community).
	if err := s.Drain(ctx, v4); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkVerifyPass measures one pass of the agent's verification over
// 100 VIPs: Announced for each, the way cmd/vipd's Verify calls it once a
// second. "cached" is what runs (one listing per pass); "uncached" lists
// the RIB for every VIP, for comparison.
func BenchmarkVerifyPass(b *testing.B) {
	var vips []netip.Addr
	for i := 0; i < 100; i++ {
		vips = append(vips, netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}))
	}
	s, err := New(Config{ASN: 65001, RouterID: netip.MustParseAddr("192.0.2.1"), VIPs: vips})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	for _, a := range vips {
		if err := s.Announce(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cached", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.mu.Lock()
			s.rib = ribCache{} // a new pass
			s.mu.Unlock()
			for _, a := range vips {
				if ok, err := s.Announced(ctx, a); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, a := range vips {
				m, err := listLocal(ctx, s.server, []netip.Addr{a})
				if err != nil || len(m) != 1 {
					b.Fatal(m, err)
				}
			}
		}
	})
}
