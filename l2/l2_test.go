package l2

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/sys/unix"
)

var (
	vip4 = netip.MustParseAddr("192.0.2.10")
	vip6 = netip.MustParseAddr("2001:db8::10")

	// What vipd adds: IPv4 scope host; IPv6 nodad, deprecated (preferred
	// lifetime 0), valid forever.
	v4Attrs = addrAttrs{scope: unix.RT_SCOPE_HOST, permanent: true}
	v6Attrs = addrAttrs{scope: unix.RT_SCOPE_UNIVERSE, nodad: true, deprecated: true, permanent: true}
)

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{Interface: "eth0"}.withDefaults()
	if err != nil {
		t.Fatalf("withDefaults: %v", err)
	}
	if cfg.GARPCount != DefaultGARPCount || cfg.GARPInterval != DefaultGARPInterval || cfg.Logger == nil {
		t.Fatalf("defaults not applied: count %d interval %s logger %v", cfg.GARPCount, cfg.GARPInterval, cfg.Logger)
	}
	if DefaultGARPCount != 5 || DefaultGARPInterval != 200*time.Millisecond {
		t.Fatalf("documented defaults changed: %d, %s", DefaultGARPCount, DefaultGARPInterval)
	}
	kept, err := Config{Interface: "eth0", GARPCount: 2, GARPInterval: time.Second}.withDefaults()
	if err != nil {
		t.Fatalf("withDefaults: %v", err)
	}
	if kept.GARPCount != 2 || kept.GARPInterval != time.Second {
		t.Fatalf("explicit values overridden: %d, %s", kept.GARPCount, kept.GARPInterval)
	}
}

// TestNewRejectsInvalidConfig: New refuses what Validate refuses (the
// kernel's rule for interface names among it), and Validate takes a name of
// 15 bytes.
func TestNewRejectsInvalidConfig(t *testing.T) {
	if err := (Config{Interface: "eth0.vlan-12345"}).Validate(); err != nil {
		t.Errorf("a name of 15 bytes refused: %v", err)
	}
	if err := (Config{Interface: "eth0", RefreshInterval: MinRefreshInterval}).Validate(); err != nil {
		t.Errorf("a refresh of MinRefreshInterval refused: %v", err)
	}
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"no interface", Config{}},
		{"negative count", Config{Interface: "eth0", GARPCount: -1}},
		{"negative interval", Config{Interface: "eth0", GARPInterval: -time.Second}},
		{"negative refresh", Config{Interface: "eth0", RefreshInterval: -time.Second}},
		{"refresh shorter than a second", Config{Interface: "eth0", RefreshInterval: 999 * time.Millisecond}},
		{"name of 16 bytes", Config{Interface: "eth0.vlan-123456"}},
		{"name with a slash", Config{Interface: "eth/0"}},
		{"name with a colon (an alias)", Config{Interface: "eth0:1"}},
		{"name with a space", Config{Interface: "eth 0"}},
		{"dot", Config{Interface: "."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Validate() == nil {
				t.Error("Validate accepted it")
			}
			a, err := New(tt.cfg)
			if err == nil {
				a.Close()
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

func TestAnnounceConfiguresHostAddress(t *testing.T) {
	for _, tt := range []struct {
		name     string
		present  []string
		addr     netip.Addr
		times    int
		wantAdds []addCall
	}{
		{
			name:     "ipv4 vip gets a /32",
			addr:     vip4,
			times:    1,
			wantAdds: []addCall{{netip.MustParsePrefix("192.0.2.10/32"), v4Attrs}},
		},
		{
			name:     "ipv6 vip gets a /128 without DAD",
			addr:     vip6,
			times:    1,
			wantAdds: []addCall{{netip.MustParsePrefix("2001:db8::10/128"), v6Attrs}},
		},
		{
			name:     "ipv4-mapped ipv6 vip is treated as ipv4",
			addr:     netip.MustParseAddr("::ffff:192.0.2.10"),
			times:    1,
			wantAdds: []addCall{{netip.MustParsePrefix("192.0.2.10/32"), v4Attrs}},
		},
		{
			name:     "announcing twice adds once",
			addr:     vip4,
			times:    2,
			wantAdds: []addCall{{netip.MustParsePrefix("192.0.2.10/32"), v4Attrs}},
		},
		{
			name:    "vip already present is not added again",
			present: []string{"192.0.2.1/24", "192.0.2.10/32 vip"},
			addr:    vip4,
			times:   1,
		},
		{
			name:    "ipv6 vip already present is not added again",
			present: []string{"2001:db8::1/64", "2001:db8::10/128 vip"},
			addr:    vip6,
			times:   1,
		},
		{
			name:     "vip equal to the host's own address gets a /32 beside it",
			present:  []string{"192.0.2.10/24"},
			addr:     vip4,
			times:    1,
			wantAdds: []addCall{{netip.MustParsePrefix("192.0.2.10/32"), v4Attrs}},
		},
		{
			name:     "vip inside the host's subnet gets a /32",
			present:  []string{"192.0.2.1/24"},
			addr:     vip4,
			times:    2,
			wantAdds: []addCall{{netip.MustParsePrefix("192.0.2.10/32"), v4Attrs}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{GARPCount: 1}, newFakeAddrs(tt.present...))
			for range tt.times {
				if err := h.a.Announce(context.Background(), tt.addr); err != nil {
					t.Fatalf("Announce: %v", err)
				}
			}
			left, adds, dels := h.addrs.snapshot()
			if !slices.Equal(adds, tt.wantAdds) {
				t.Fatalf("adds = %v, want %v", adds, tt.wantAdds)
			}
			for _, p := range prefixes(tt.present) {
				if !slices.Contains(left, p) {
					t.Fatalf("Announce removed %s: left %v, deleted %v", p, left, dels)
				}
			}
			held, err := h.a.Held(tt.addr)
			if err != nil || !held {
				t.Fatalf("Held = %v, %v; want true", held, err)
			}
			if got := h.advertisements(); got != tt.times {
				t.Fatalf("%d advertisements for %d Announce calls with GARPCount 1", got, tt.times)
			}
		})
	}
}

func TestAnnounceSendsGratuitousARP(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 1}, nil)
	if err := h.a.Announce(context.Background(), vip4); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	arps, nas := h.dial.sent()
	if len(nas) != 0 {
		t.Fatalf("IPv4 announce sent %d neighbor advertisements", len(nas))
	}
	if len(arps) != 2 {
		t.Fatalf("sent %d ARP packets, want a request and a reply", len(arps))
	}
	for i, want := range []struct {
		op  arp.Operation
		tha net.HardwareAddr
	}{
		{arp.OperationRequest, net.HardwareAddr{0, 0, 0, 0, 0, 0}},
		{arp.OperationReply, ethernet.Broadcast},
	} {
		s := arps[i]
		// Round-trip through the wire format to check what a neighbour sees.
		b, err := s.p.MarshalBinary()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var p arp.Packet
		if err := p.UnmarshalBinary(b); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		if p.Operation != want.op || p.SenderIP != vip4 || p.TargetIP != vip4 ||
			!bytes.Equal(p.SenderHardwareAddr, testMAC) || !bytes.Equal(p.TargetHardwareAddr, want.tha) {
			t.Errorf("packet %d = %+v, want op %v sender %s/%s target %s/%s", i, p, want.op, testMAC, vip4, want.tha, vip4)
		}
		if !bytes.Equal(s.dst, ethernet.Broadcast) {
			t.Errorf("packet %d sent to %s, want broadcast", i, s.dst)
		}
	}
}

func TestAnnounceSendsUnsolicitedNA(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 1}, nil)
	if err := h.a.Announce(context.Background(), vip6); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	arps, nas := h.dial.sent()
	if len(arps) != 0 || len(nas) != 1 {
		t.Fatalf("sent %d ARP and %d NA, want 0 and 1", len(arps), len(nas))
	}
	s := nas[0]
	if s.dst != allNodes {
		t.Errorf("NA sent to %s, want ff02::1", s.dst)
	}
	if s.cm == nil || s.cm.HopLimit != 255 || s.cm.IfIndex != testIndex || !net.IP(s.cm.Src).Equal(vip6.AsSlice()) {
		t.Errorf("control message = %v, want hop limit 255, source %s, interface %d", s.cm, vip6, testIndex)
	}
	// Round-trip through the wire format to check what a neighbour sees.
	b, err := ndp.MarshalMessage(s.m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	m, err := ndp.ParseMessage(b)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok {
		t.Fatalf("sent %T, want neighbor advertisement", m)
	}
	if !na.Override || na.Solicited || na.Router || na.TargetAddress != vip6 {
		t.Errorf("NA = %+v, want Override, not Solicited, not Router, target %s", na, vip6)
	}
	if len(na.Options) != 1 {
		t.Fatalf("NA has %d options, want the target link-layer address only", len(na.Options))
	}
	lla, ok := na.Options[0].(*ndp.LinkLayerAddress)
	if !ok || lla.Direction != ndp.Target || !bytes.Equal(lla.Addr, testMAC) {
		t.Errorf("NA option = %+v, want target link-layer address %s", na.Options[0], testMAC)
	}
}

func TestBurstSpacing(t *testing.T) {
	for _, tt := range []struct {
		name string
		addr netip.Addr
	}{
		{"ipv4 burst of gratuitous ARP", vip4},
		{"ipv6 burst of neighbor advertisements", vip6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const count, interval = 4, 7 * time.Millisecond
			h := newHarness(t, Config{GARPCount: count, GARPInterval: interval}, nil)
			if err := h.a.Announce(context.Background(), tt.addr); err != nil {
				t.Fatalf("Announce: %v", err)
			}
			if got := h.advertisements(); got != 1 {
				t.Fatalf("%d advertisements when Announce returned, want 1", got)
			}
			for i := 1; i < count; i++ {
				w := h.clock.next(t)
				if w.d != interval {
					t.Fatalf("wait %d is %s, want %s", i, w.d, interval)
				}
				if got := h.advertisements(); got != i {
					t.Fatalf("%d advertisements before wait %d fired, want %d", got, i, i)
				}
				w.fire <- time.Time{}
			}
			h.waitBurst(t, tt.addr.Unmap())
			if got := h.advertisements(); got != count {
				t.Fatalf("%d advertisements after the burst, want %d", got, count)
			}
			h.clock.idle(t)
		})
	}
}

func TestWithdrawStopsBurst(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 5}, nil)
	ctx := context.Background()
	if err := h.a.Announce(ctx, vip4); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	w := h.clock.next(t)
	if err := h.a.Withdraw(ctx, vip4); err != nil {
		t.Fatalf("Withdraw: %v", err)
	}
	// Withdraw stopped the burst: firing its timer now sends nothing.
	w.fire <- time.Time{}
	h.clock.idle(t)
	if got := h.advertisements(); got != 1 {
		t.Fatalf("%d advertisements, want only the first one", got)
	}
	addrs, _, dels := h.addrs.snapshot()
	if len(addrs) != 0 || !slices.Equal(dels, []netip.Prefix{hostPrefix(vip4)}) {
		t.Fatalf("after Withdraw addrs = %v, dels = %v", addrs, dels)
	}
}

func TestReannounceRestartsBurst(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 3}, nil)
	ctx := context.Background()
	if err := h.a.Announce(ctx, vip6); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	old := h.clock.next(t)
	if err := h.a.Announce(ctx, vip6); err != nil {
		t.Fatalf("second Announce: %v", err)
	}
	cur := h.clock.next(t)
	old.fire <- time.Time{} // the replaced burst must not react
	if got := h.advertisements(); got != 2 {
		t.Fatalf("%d advertisements, want one per Announce", got)
	}
	cur.fire <- time.Time{}
	h.clock.next(t).fire <- time.Time{}
	h.waitBurst(t, vip6)
	if got := h.advertisements(); got != 1+3 {
		t.Fatalf("%d advertisements, want 1 from the replaced burst and 3 from the new one", got)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 5}, nil)
	ctx := context.Background()
	for _, addr := range []netip.Addr{vip4, vip6} {
		if err := h.a.Announce(ctx, addr); err != nil {
			t.Fatalf("Announce %s: %v", addr, err)
		}
	}
	h.clock.next(t)
	h.clock.next(t)
	h.a.mu.Lock()
	var done []chan struct{}
	for _, b := range h.a.bursts {
		done = append(done, b.done)
	}
	h.a.mu.Unlock()
	if len(done) != 2 {
		t.Fatalf("%d bursts running, want 2", len(done))
	}

	if err := h.a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, d := range done {
		select {
		case <-d:
		default:
			t.Fatalf("burst %d still running after Close", i)
		}
	}
	if !h.dial.allClosed() {
		t.Fatal("a socket is still open after Close")
	}
	if !h.addrs.closed {
		t.Fatal("address manager not closed")
	}
	if addrs, _, _ := h.addrs.snapshot(); len(addrs) != 2 {
		t.Fatalf("Close changed addresses: %v", addrs)
	}
	if err := h.a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := h.a.Announce(ctx, vip4); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Announce after Close = %v, want net.ErrClosed", err)
	}
	if err := h.a.Withdraw(ctx, vip4); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Withdraw after Close = %v, want net.ErrClosed", err)
	}
	if err := h.a.WatchConflicts(ctx, vip4, func(net.HardwareAddr) {}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WatchConflicts after Close = %v, want net.ErrClosed", err)
	}
}

func TestQuietOnlyManagesAddresses(t *testing.T) {
	h := newHarness(t, Config{Quiet: true, Interface: "lo"}, nil)
	h.addrs.ifi.Name = "lo"
	ctx := context.Background()
	for _, addr := range []netip.Addr{vip4, vip6} {
		if err := h.a.Announce(ctx, addr); err != nil {
			t.Fatalf("Announce %s: %v", addr, err)
		}
	}
	_, adds, _ := h.addrs.snapshot()
	want := []addCall{{hostPrefix(vip4), v4Attrs}, {hostPrefix(vip6), v6Attrs}}
	if !slices.Equal(adds, want) {
		t.Fatalf("adds = %v, want %v", adds, want)
	}
	if n := h.dial.dialCount(); n != 0 {
		t.Fatalf("Quiet announcer opened %d sockets", n)
	}
	h.clock.idle(t)
	if err := h.a.WatchConflicts(ctx, vip4, func(net.HardwareAddr) {}); err == nil {
		t.Fatal("WatchConflicts in Quiet mode returned nil")
	}
	for _, addr := range []netip.Addr{vip4, vip6} {
		if err := h.a.Withdraw(ctx, addr); err != nil {
			t.Fatalf("Withdraw %s: %v", addr, err)
		}
	}
	if addrs, _, _ := h.addrs.snapshot(); len(addrs) != 0 {
		t.Fatalf("addresses left after Withdraw: %v", addrs)
	}
}

func TestWithdraw(t *testing.T) {
	for _, tt := range []struct {
		name     string
		addrs    *fakeAddrs
		addr     netip.Addr
		wantErr  bool
		wantLeft []string
		wantDels []string
	}{
		{
			name:     "vip present as a host address is removed",
			addrs:    newFakeAddrs("192.0.2.1/24", "192.0.2.10/32"),
			addr:     vip4,
			wantLeft: []string{"192.0.2.1/24"},
			wantDels: []string{"192.0.2.10/32"},
		},
		{
			name:     "ipv6 host prefix is removed",
			addrs:    newFakeAddrs("2001:db8::10/128", "2001:db8::1/64"),
			addr:     vip6,
			wantLeft: []string{"2001:db8::1/64"},
			wantDels: []string{"2001:db8::10/128"},
		},
		{
			name:     "only the host prefix is removed, not the same ip with another prefix",
			addrs:    newFakeAddrs("192.0.2.10/24", "192.0.2.10/32"),
			addr:     vip4,
			wantLeft: []string{"192.0.2.10/24"},
			wantDels: []string{"192.0.2.10/32"},
		},
		{
			name:     "host's own ipv4 address equal to the vip stays",
			addrs:    newFakeAddrs("192.0.2.10/24"),
			addr:     vip4,
			wantLeft: []string{"192.0.2.10/24"},
		},
		{
			name:     "host's own ipv6 address equal to the vip stays",
			addrs:    newFakeAddrs("2001:db8::10/64"),
			addr:     vip6,
			wantLeft: []string{"2001:db8::10/64"},
		},
		{
			name:     "absent vip is not an error",
			addrs:    newFakeAddrs("192.0.2.1/24"),
			addr:     vip4,
			wantLeft: []string{"192.0.2.1/24"},
		},
		{
			name:  "missing interface is not an error",
			addrs: func() *fakeAddrs { f := newFakeAddrs(); f.ifi = nil; return f }(),
			addr:  vip4,
		},
		{
			name:     "delete failure is reported",
			addrs:    func() *fakeAddrs { f := newFakeAddrs("192.0.2.10/32"); f.delErr = errBoom; return f }(),
			addr:     vip4,
			wantErr:  true,
			wantLeft: []string{"192.0.2.10/32"},
		},
		{
			name:    "list failure is reported",
			addrs:   func() *fakeAddrs { f := newFakeAddrs(); f.listErr = errBoom; return f }(),
			addr:    vip4,
			wantErr: true,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, tt.addrs)
			err := h.a.Withdraw(context.Background(), tt.addr)
			if tt.wantErr != (err != nil) {
				t.Fatalf("Withdraw error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr && !errors.Is(err, errBoom) {
				t.Fatalf("Withdraw error %v does not wrap the cause", err)
			}
			left, _, dels := h.addrs.snapshot()
			if !slices.Equal(left, prefixes(tt.wantLeft)) || !slices.Equal(dels, prefixes(tt.wantDels)) {
				t.Fatalf("left %v, deleted %v; want %v, %v", left, dels, tt.wantLeft, tt.wantDels)
			}
		})
	}
}

func prefixes(ss []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(strings.TrimSuffix(s, " vip")))
	}
	return out
}

func TestAnnounceErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name      string
		ctx       context.Context
		addr      netip.Addr
		setup     func(*harness)
		wantIs    error
		wantAdded bool
	}{
		{name: "zero address", addr: netip.Addr{}},
		{name: "unspecified address", addr: netip.IPv6Unspecified()},
		{name: "multicast address", addr: netip.MustParseAddr("224.0.0.18")},
		{name: "broadcast address", addr: netip.MustParseAddr("255.255.255.255")},
		{name: "cancelled context", ctx: cancelled, addr: vip4, wantIs: context.Canceled},
		{
			name:   "missing interface",
			addr:   vip4,
			setup:  func(h *harness) { h.addrs.ifi = nil },
			wantIs: errNoLink,
		},
		{
			name:   "address cannot be added",
			addr:   vip6,
			setup:  func(h *harness) { h.addrs.addErr = errBoom },
			wantIs: errBoom,
		},
		{
			name:      "advertisement socket cannot be opened",
			addr:      vip4,
			setup:     func(h *harness) { h.dial.dialErr = errBoom },
			wantIs:    errBoom,
			wantAdded: true,
		},
		{
			name:      "first advertisement fails",
			addr:      vip6,
			setup:     func(h *harness) { h.dial.writeErr = errBoom },
			wantIs:    errBoom,
			wantAdded: true,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			if tt.setup != nil {
				tt.setup(h)
			}
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			err := h.a.Announce(ctx, tt.addr)
			if err == nil {
				t.Fatal("Announce returned nil")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("Announce error %v does not wrap %v", err, tt.wantIs)
			}
			if addrs, _, _ := h.addrs.snapshot(); (len(addrs) > 0) != tt.wantAdded {
				t.Fatalf("addresses after failed Announce: %v, want added %v", addrs, tt.wantAdded)
			}
			// No burst may start after a failure.
			h.clock.idle(t)
			if got := h.advertisements(); got != 0 {
				t.Fatalf("%d advertisements recorded after a failed Announce", got)
			}
		})
	}
}

func TestAnnounceReopensSocketAfterWriteFailure(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 1}, nil)
	ctx := context.Background()
	h.dial.writeErr = errBoom
	if err := h.a.Announce(ctx, vip4); !errors.Is(err, errBoom) {
		t.Fatalf("Announce = %v, want errBoom", err)
	}
	h.dial.mu.Lock()
	h.dial.writeErr = nil
	h.dial.mu.Unlock()
	if err := h.a.Announce(ctx, vip4); err != nil {
		t.Fatalf("Announce after recovery: %v", err)
	}
	// The failed Announce opened two (the retry on a fresh socket failed
	// too); the next one opened a third.
	if n := h.dial.dialCount(); n != 3 {
		t.Fatalf("%d sockets opened, want the failed ones replaced (3)", n)
	}
	if got := h.advertisements(); got != 1 {
		t.Fatalf("%d advertisements, want 1", got)
	}
}

// TestAnnounceRecoversFromStaleSocket: a cached socket that fails with a
// stale error (its link went down and up) is replaced within the same
// Announce, which succeeds.
func TestAnnounceRecoversFromStaleSocket(t *testing.T) {
	for _, vip := range []netip.Addr{vip4, vip6} {
		h := newHarness(t, Config{GARPCount: 1}, nil)
		h.dial.brokenDials = 1
		h.dial.staleErr = errBoom
		if err := h.a.Announce(context.Background(), vip); err != nil {
			t.Fatalf("%s: Announce with a stale socket: %v", vip, err)
		}
		if n := h.dial.dialCount(); n != 2 {
			t.Errorf("%s: %d sockets opened, want 2 (stale one replaced)", vip, n)
		}
		if got := h.advertisements(); got != 1 {
			t.Errorf("%s: %d advertisements, want 1", vip, got)
		}
	}
}

func TestHeld(t *testing.T) {
	for _, tt := range []struct {
		name    string
		addrs   *fakeAddrs
		addr    netip.Addr
		want    bool
		wantErr bool
	}{
		{name: "vip configured", addrs: newFakeAddrs("192.0.2.10/32"), addr: vip4, want: true},
		{name: "other address configured", addrs: newFakeAddrs("192.0.2.11/32"), addr: vip4},
		{name: "ipv6 vip configured only with a wider prefix", addrs: newFakeAddrs("2001:db8::10/64"), addr: vip6},
		{name: "ipv4 vip configured only with a wider prefix", addrs: newFakeAddrs("192.0.2.10/24"), addr: vip4},
		{name: "ipv4 vip configured beside the host's own address", addrs: newFakeAddrs("192.0.2.10/24", "192.0.2.10/32"), addr: vip4, want: true},
		{name: "ipv6 host prefix configured", addrs: newFakeAddrs("2001:db8::1/64", "2001:db8::10/128"), addr: vip6, want: true},
		{name: "missing interface holds nothing", addrs: func() *fakeAddrs { f := newFakeAddrs(); f.ifi = nil; return f }(), addr: vip4},
		{name: "list failure", addrs: func() *fakeAddrs { f := newFakeAddrs(); f.listErr = errBoom; return f }(), addr: vip4, wantErr: true},
		{name: "invalid address", addrs: newFakeAddrs(), addr: netip.Addr{}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, tt.addrs)
			got, err := h.a.Held(tt.addr)
			if tt.wantErr != (err != nil) || got != tt.want {
				t.Fatalf("Held = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestAnnounceIPv6WithAnotherPrefix: the kernel holds an IPv6 address once
// per interface, so a VIP equal to the host's own IPv6 address cannot get its
// /128: Announce says so and changes nothing.
func TestAnnounceIPv6WithAnotherPrefix(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 1}, newFakeAddrs("2001:db8::10/64"))
	err := h.a.Announce(context.Background(), vip6)
	if !errors.Is(err, errOtherPrefix) {
		t.Fatalf("Announce = %v, want errOtherPrefix", err)
	}
	left, adds, dels := h.addrs.snapshot()
	if len(adds) != 0 || len(dels) != 0 || !slices.Equal(left, prefixes([]string{"2001:db8::10/64"})) {
		t.Fatalf("after Announce: left %v, added %v, deleted %v; want the /64 untouched", left, adds, dels)
	}
	if got := h.advertisements(); got != 0 {
		t.Fatalf("%d advertisements for an address that could not be added", got)
	}
	if held, err := h.a.Held(vip6); err != nil || held {
		t.Fatalf("Held = %v, %v; want false", held, err)
	}
}

// TestAnnounceOnRecreatedInterface: the interface was deleted and created
// again under the same name, with a new index and MAC. Announce opens new
// advertisement sockets on the new index and advertises the new MAC; the old
// sockets are closed.
func TestAnnounceOnRecreatedInterface(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 1}, nil)
	ctx := context.Background()
	for _, vip := range []netip.Addr{vip4, vip6} {
		if err := h.a.Announce(ctx, vip); err != nil {
			t.Fatalf("Announce %s: %v", vip, err)
		}
	}
	newMAC := net.HardwareAddr{0x02, 0, 0x5e, 0, 0, 0x42}
	h.addrs.mu.Lock()
	h.addrs.ifi = &net.Interface{Index: testIndex + 10, MTU: 1500, Name: "test0", HardwareAddr: newMAC}
	h.addrs.addrs = nil // a new interface starts without the VIPs
	h.addrs.mu.Unlock()

	for _, vip := range []netip.Addr{vip4, vip6} {
		if err := h.a.Announce(ctx, vip); err != nil {
			t.Fatalf("Announce %s on the new interface: %v", vip, err)
		}
		if held, err := h.a.Held(vip); err != nil || !held {
			t.Fatalf("Held(%s) on the new interface = %v, %v", vip, held, err)
		}
	}
	if n := h.dial.dialCount(); n != 4 {
		t.Fatalf("%d sockets opened, want 2 per interface", n)
	}
	h.dial.mu.Lock()
	old := h.dial.conns[:2]
	h.dial.mu.Unlock()
	for i, c := range old {
		select {
		case <-c.closed:
		default:
			t.Fatalf("socket %d on the old interface still open", i)
		}
	}
	arps, nas := h.dial.sent()
	if last := arps[len(arps)-1].p; !bytes.Equal(last.SenderHardwareAddr, newMAC) {
		t.Errorf("gratuitous ARP on the new interface from %s, want %s", last.SenderHardwareAddr, newMAC)
	}
	last := nas[len(nas)-1]
	if last.cm.IfIndex != testIndex+10 {
		t.Errorf("NA sent on interface %d, want the new index %d", last.cm.IfIndex, testIndex+10)
	}
	if lla := last.m.(*ndp.NeighborAdvertisement).Options[0].(*ndp.LinkLayerAddress); !bytes.Equal(lla.Addr, newMAC) {
		t.Errorf("NA names %s, want %s", lla.Addr, newMAC)
	}
}

func TestRemoveAddressOnMissingInterface(t *testing.T) {
	// Reads links through netlink only, which needs no privileges; a missing
	// interface holds nothing, so there is nothing to remove.
	if err := RemoveAddress("vt-l2-absent", vip4); err != nil {
		t.Fatalf("RemoveAddress on a missing interface: %v", err)
	}
	if err := RemoveAddress("", vip4); err == nil {
		t.Fatal("RemoveAddress accepted an empty interface name")
	}
	if err := RemoveAddress("vt-l2-absent", netip.Addr{}); err == nil {
		t.Fatal("RemoveAddress accepted an invalid address")
	}
}

func TestHasAddress(t *testing.T) {
	// Reads through netlink only, which needs no privileges.
	if held, err := HasAddress("vt-l2-absent", vip4); err != nil || held {
		t.Fatalf("HasAddress on a missing interface = %v, %v; want false, nil", held, err)
	}
	if _, err := HasAddress("", vip4); err == nil {
		t.Fatal("HasAddress accepted an empty interface name")
	}
	if _, err := HasAddress("lo", netip.Addr{}); err == nil {
		t.Fatal("HasAddress accepted an invalid address")
	}
	// Loopback carries 127.0.0.1/8, not 127.0.0.1/32: the same IP with
	// another prefix length is not the host prefix.
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface: %v", err)
	}
	addrs, err := lo.Addrs()
	if err != nil || !slices.ContainsFunc(addrs, func(a net.Addr) bool { return a.String() == "127.0.0.1/8" }) {
		t.Skipf("loopback does not carry 127.0.0.1/8 (%v, %v)", addrs, err)
	}
	if held, err := HasAddress("lo", netip.MustParseAddr("127.0.0.1")); err != nil || held {
		t.Fatalf("HasAddress(lo, 127.0.0.1) with only 127.0.0.1/8 = %v, %v; want false", held, err)
	}
}

// TestAnnounceAddsVIPNeverASource: what Announce asks of the kernel is what
// keeps the VIP from becoming the host's source address (see vipAttrs):
// scope host for IPv4, deprecated and never expiring for IPv6.
func TestAnnounceAddsVIPNeverASource(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 1}, newFakeAddrs("192.0.2.11/24", "2001:db8::11/64"))
	for _, vip := range []netip.Addr{vip4, vip6} {
		if err := h.a.Announce(context.Background(), vip); err != nil {
			t.Fatalf("Announce %s: %v", vip, err)
		}
	}
	if at, _ := h.addrs.attrs(hostPrefix(vip4)); at.scope != unix.RT_SCOPE_HOST {
		t.Errorf("IPv4 VIP scope %d, want host (%d): a global /32 is the first primary address once the node's is re-added", at.scope, unix.RT_SCOPE_HOST)
	}
	if at, _ := h.addrs.attrs(hostPrefix(vip6)); !at.deprecated || !at.permanent || !at.nodad || at.scope != unix.RT_SCOPE_UNIVERSE {
		t.Errorf("IPv6 VIP attributes %+v, want nodad, deprecated (preferred lifetime 0) and permanent (valid forever), scope global", at)
	}
	// The node's own addresses are untouched.
	for _, p := range prefixes([]string{"192.0.2.11/24", "2001:db8::11/64"}) {
		if at, ok := h.addrs.attrs(p); !ok || at != plainAttrs {
			t.Errorf("%s: %+v, %v; want it left as it was", p, at, ok)
		}
	}
}

// TestAnnounceRestoresAttributes: the VIP's host prefix is there, but
// something re-added it with other attributes (a network manager putting
// back a plain address, an operator's ip addr add). Verify says so, and
// Announce gives it vipd's attributes again: an IPv4 address is removed and
// added back (the kernel keeps the scope of an existing IPv4 address), an
// IPv6 one is replaced in place.
func TestAnnounceRestoresAttributes(t *testing.T) {
	for _, tt := range []struct {
		name     string
		vip      netip.Addr
		found    addrAttrs
		wantDels []netip.Prefix
	}{
		{"ipv4 vip re-added with scope global", vip4, plainAttrs, []netip.Prefix{hostPrefix(vip4)}},
		{"ipv4 vip re-added with scope link", vip4, addrAttrs{scope: unix.RT_SCOPE_LINK, permanent: true}, []netip.Prefix{hostPrefix(vip4)}},
		{"ipv6 vip re-added preferred", vip6, addrAttrs{nodad: true, permanent: true}, nil},
		{"ipv6 vip deprecated but expiring", vip6, addrAttrs{nodad: true, deprecated: true}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host := hostPrefix(tt.vip)
			h := newHarness(t, Config{GARPCount: 1}, newFakeAddrs("192.0.2.11/24", "2001:db8::11/64", host.String()+" vip"))
			ctx := context.Background()
			if ok, err := h.a.Verify(ctx, tt.vip); err != nil || !ok {
				t.Fatalf("Verify as vipd added it = %v, %v; want true", ok, err)
			}
			h.addrs.setAttrs(host, tt.found)
			if ok, err := h.a.Verify(ctx, tt.vip); err != nil || ok {
				t.Fatalf("Verify with attributes %+v = %v, %v; want false", tt.found, ok, err)
			}
			if held, err := h.a.Held(tt.vip); err != nil || !held {
				t.Fatalf("Held = %v, %v; want true (the address is there)", held, err)
			}
			if err := h.a.Announce(ctx, tt.vip); err != nil {
				t.Fatalf("Announce: %v", err)
			}
			if ok, err := h.a.Verify(ctx, tt.vip); err != nil || !ok {
				at, _ := h.addrs.attrs(host)
				t.Fatalf("Verify after Announce = %v, %v with attributes %+v; want true", ok, err, at)
			}
			_, adds, dels := h.addrs.snapshot()
			if !slices.Equal(dels, tt.wantDels) {
				t.Errorf("deleted %v, want %v", dels, tt.wantDels)
			}
			if want := []addCall{{host, vipAttrs(tt.vip)}}; !slices.Equal(adds, want) {
				t.Errorf("adds %v, want %v", adds, want)
			}
			if got := h.advertisements(); got != 1 {
				t.Errorf("%d advertisements, want 1", got)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	for _, tt := range []struct {
		name  string
		addrs *fakeAddrs
		addr  netip.Addr
		want  bool
	}{
		{name: "ipv4 vip as vipd adds it", addrs: newFakeAddrs("192.0.2.10/32 vip"), addr: vip4, want: true},
		{name: "ipv6 vip as vipd adds it", addrs: newFakeAddrs("2001:db8::10/128 vip"), addr: vip6, want: true},
		{name: "ipv4 vip as a plain address", addrs: newFakeAddrs("192.0.2.10/32"), addr: vip4},
		{name: "ipv6 vip as a plain address", addrs: newFakeAddrs("2001:db8::10/128"), addr: vip6},
		{name: "absent", addrs: newFakeAddrs("192.0.2.11/24"), addr: vip4},
		{name: "only with a wider prefix", addrs: newFakeAddrs("192.0.2.10/24"), addr: vip4},
		{name: "missing interface", addrs: func() *fakeAddrs { f := newFakeAddrs(); f.ifi = nil; return f }(), addr: vip6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, tt.addrs)
			got, err := h.a.Verify(context.Background(), tt.addr)
			if err != nil || got != tt.want {
				t.Fatalf("Verify = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	h := newHarness(t, Config{}, func() *fakeAddrs { f := newFakeAddrs(); f.listErr = errBoom; return f }())
	if _, err := h.a.Verify(context.Background(), vip4); !errors.Is(err, errBoom) {
		t.Fatalf("Verify with a list failure = %v, want errBoom", err)
	}
}

// TestSetLifetime: a present host prefix gets the lifetime in whole seconds
// (at least one), and forever again with 0; an absent one, or the same IP
// with another prefix only, is an error and changes nothing.
func TestSetLifetime(t *testing.T) {
	ctx := context.Background()
	addrs := newFakeAddrs("192.0.2.10/32 vip", "2001:db8::10/128 vip", "192.0.2.11/24")
	h := newHarness(t, Config{}, addrs)
	for _, tt := range []struct {
		addr netip.Addr
		life time.Duration
		want time.Duration
	}{
		{vip4, 2500 * time.Millisecond, 2 * time.Second},
		{vip4, 300 * time.Millisecond, time.Second},
		{vip6, 2 * time.Second, 2 * time.Second},
		{vip4, 0, 0},
	} {
		if err := h.a.SetLifetime(ctx, tt.addr, tt.life); err != nil {
			t.Fatalf("SetLifetime(%s, %v): %v", tt.addr, tt.life, err)
		}
		host := hostPrefix(tt.addr)
		addrs.mu.Lock()
		got, ok := addrs.lifetimes[host]
		addrs.mu.Unlock()
		if !ok || got != tt.want {
			t.Errorf("SetLifetime(%s, %v): kernel lifetime %v (set %t), want %v", tt.addr, tt.life, got, ok, tt.want)
		}
		// Only the lifetime changes: the attributes Announce gave it stay
		// (an IPv6 VIP deprecated), and only forever is permanent.
		want := vipAttrs(tt.addr)
		want.permanent = tt.want == 0
		if at, _ := addrs.attrs(host); at != want {
			t.Errorf("SetLifetime(%s, %v): attributes %+v, want %+v", tt.addr, tt.life, at, want)
		}
	}
	for _, a := range []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.99")} {
		if err := h.a.SetLifetime(ctx, a, time.Second); err == nil || !strings.Contains(err.Error(), "is not on test0") {
			t.Errorf("SetLifetime(%s) of an address without its host prefix: %v, want an error", a, err)
		}
	}
	if err := h.a.SetLifetime(ctx, vip4, -time.Second); err == nil {
		t.Error("a negative lifetime was accepted")
	}
}
