package l2

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// The refresh: after its burst, an announced VIP is advertised again every
// Config.RefreshInterval until it is withdrawn, quiesced, silenced or the
// Announcer is closed. The fake clock decides when each wait ends.

const testRefresh = 3 * time.Second

// startRefresh announces addr with a burst of two and a refresh, lets the
// burst finish (checking it sent 2) and returns the first refresh wait, checked to be of
// testRefresh. The context given to Announce is cancelled when Announce
// returns, as the agent's per-call timeout is: the refresh does not depend
// on it.
func startRefresh(t *testing.T, h *harness, addr netip.Addr) fakeWait {
	t.Helper()
	before := h.advertisements()
	ctx, cancel := context.WithCancel(context.Background())
	err := h.a.Announce(ctx, addr)
	cancel()
	if err != nil {
		t.Fatalf("Announce %s: %v", addr, err)
	}
	if w := h.clock.next(t); w.d != 7*time.Millisecond {
		t.Fatalf("burst wait is %s, want 7ms", w.d)
	} else {
		w.fire <- time.Time{}
	}
	w := h.clock.next(t)
	if w.d != testRefresh {
		t.Fatalf("wait after the burst is %s, want the refresh interval %s", w.d, testRefresh)
	}
	if got := h.advertisements() - before; got != 2 {
		t.Fatalf("%d advertisements in the burst, want 2", got)
	}
	return w
}

func refreshHarness(t *testing.T) *harness {
	h := newHarness(t, Config{GARPCount: 2, GARPInterval: 7 * time.Millisecond, RefreshInterval: testRefresh}, nil)
	h.a.filter = newFakeFilter()
	return h
}

// TestRefreshEveryPeriod: while the VIP is held, each period sends one more
// advertisement, the same as the burst's: for IPv4 a gratuitous ARP request
// and reply from the interface's MAC, for IPv6 an unsolicited NA with the
// Override flag and the interface's MAC as target link-layer address.
func TestRefreshEveryPeriod(t *testing.T) {
	for _, vip := range []netip.Addr{vip4, vip6} {
		t.Run(vip.String(), func(t *testing.T) {
			h := refreshHarness(t)
			w := startRefresh(t, h, vip)
			for i := range 3 {
				w.fire <- time.Time{}
				w = h.clock.next(t)
				if w.d != testRefresh {
					t.Fatalf("refresh wait %d is %s, want %s", i+1, w.d, testRefresh)
				}
				if got := h.advertisements(); got != 3+i {
					t.Fatalf("%d advertisements after refresh %d, want %d", got, i+1, 3+i)
				}
			}
			arps, nas := h.dial.sent()
			if vip.Is4() {
				if len(arps) != 2*5 || len(nas) != 0 {
					t.Fatalf("sent %d ARP packets and %d NAs, want 10 ARP (request and reply, 5 times)", len(arps), len(nas))
				}
				for _, s := range arps[4:] {
					if s.p.SenderIP != vip || s.p.TargetIP != vip || !bytes.Equal(s.p.SenderHardwareAddr, testMAC) || !bytes.Equal(s.dst, ethernet.Broadcast) {
						t.Errorf("refresh sent %s %s is-at %s to %s, want gratuitous ARP for %s at %s, broadcast", s.p.Operation, s.p.SenderIP, s.p.SenderHardwareAddr, s.dst, vip, testMAC)
					}
				}
				if arps[8].p.Operation != arp.OperationRequest || arps[9].p.Operation != arp.OperationReply {
					t.Errorf("refresh sent %s and %s, want a request and a reply", arps[8].p.Operation, arps[9].p.Operation)
				}
				return
			}
			if len(nas) != 5 || len(arps) != 0 {
				t.Fatalf("sent %d NAs and %d ARP packets, want 5 NAs", len(nas), len(arps))
			}
			for _, s := range nas[2:] {
				na, ok := s.m.(*ndp.NeighborAdvertisement)
				if !ok || !na.Override || na.Solicited || na.TargetAddress != vip || s.dst != allNodes {
					t.Fatalf("refresh sent %+v to %s, want an unsolicited NA with Override for %s to ff02::1", s.m, s.dst, vip)
				}
				if lla := na.Options[0].(*ndp.LinkLayerAddress); !bytes.Equal(lla.Addr, testMAC) {
					t.Errorf("refresh NA names %s, want %s", lla.Addr, testMAC)
				}
			}
		})
	}
}

// TestRefreshStops: whatever ends the holding (a release, a quiesce for a
// daisy-chained handoff, Silence for a make-before-break handoff, Close at
// the end of the daemon's run) stops the refresh before it returns: the
// pending period's timer firing afterwards sends nothing, and the refresh
// goroutine ends.
func TestRefreshStops(t *testing.T) {
	for _, tt := range []struct {
		name string
		stop func(h *harness, vip netip.Addr) error
	}{
		{"withdrawn", func(h *harness, vip netip.Addr) error { return h.a.Withdraw(context.Background(), vip) }},
		{"quiesced", func(h *harness, vip netip.Addr) error { return h.a.Quiesce(context.Background(), vip) }},
		{"silenced", func(h *harness, vip netip.Addr) error { return h.a.Silence(context.Background(), vip) }},
		{"closed", func(h *harness, _ netip.Addr) error { return h.a.Close() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := refreshHarness(t)
			w := startRefresh(t, h, vip4)
			h.a.mu.Lock()
			done := h.a.bursts[vip4].done
			h.a.mu.Unlock()
			if err := tt.stop(h, vip4); err != nil {
				t.Fatalf("stop: %v", err)
			}
			w.fire <- time.Time{}
			select {
			case <-done:
			case <-time.After(10 * time.Second): // only guards a hung test
				t.Fatal("refresh goroutine still running")
			}
			h.clock.idle(t)
			if got := h.advertisements(); got != 2 {
				t.Fatalf("%d advertisements, want the burst's 2 only", got)
			}
		})
	}
}

// TestRefreshResumesWhenHandoffCalledOff: a quiesced or silenced VIP
// announced again (the handoff was called off) is refreshed again.
func TestRefreshResumesWhenHandoffCalledOff(t *testing.T) {
	for _, tt := range []struct {
		name string
		stop func(h *harness, vip netip.Addr) error
	}{
		{"quiesced", func(h *harness, vip netip.Addr) error { return h.a.Quiesce(context.Background(), vip) }},
		{"silenced", func(h *harness, vip netip.Addr) error { return h.a.Silence(context.Background(), vip) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := refreshHarness(t)
			w := startRefresh(t, h, vip4)
			if err := tt.stop(h, vip4); err != nil {
				t.Fatalf("stop: %v", err)
			}
			w.fire <- time.Time{}
			w = startRefresh(t, h, vip4)
			w.fire <- time.Time{}
			h.clock.next(t)
			if got := h.advertisements(); got != 2+2+1 {
				t.Fatalf("%d advertisements, want two bursts of 2 and a refresh", got)
			}
		})
	}
}

// TestRefreshSkipsMissingAddress: a refresh is sent only while the VIP's
// host prefix is on the interface: removed behind vipd's back, it is not
// advertised (the agent puts it back, or releases the VIP); back, it is.
func TestRefreshSkipsMissingAddress(t *testing.T) {
	h := refreshHarness(t)
	w := startRefresh(t, h, vip6)
	h.addrs.mu.Lock()
	saved := h.addrs.addrs
	h.addrs.addrs = nil
	h.addrs.mu.Unlock()
	w.fire <- time.Time{}
	w = h.clock.next(t)
	if got := h.advertisements(); got != 2 {
		t.Fatalf("%d advertisements with the address gone, want the burst's 2", got)
	}
	h.addrs.mu.Lock()
	h.addrs.addrs = saved
	h.addrs.mu.Unlock()
	w.fire <- time.Time{}
	h.clock.next(t)
	if got := h.advertisements(); got != 3 {
		t.Fatalf("%d advertisements with the address back, want 3", got)
	}
}

// TestRefreshReopensSocket: a refresh whose socket fails (closed after
// another VIP's failed advertisement, or stale after a link flap) is sent
// on a fresh one.
func TestRefreshReopensSocket(t *testing.T) {
	h := refreshHarness(t)
	w := startRefresh(t, h, vip4)
	h.dial.mu.Lock()
	h.dial.conns[0].broken = true
	h.dial.staleErr = errBoom
	h.dial.mu.Unlock()
	w.fire <- time.Time{}
	h.clock.next(t)
	if got := h.advertisements(); got != 3 {
		t.Fatalf("%d advertisements, want the refresh sent on a fresh socket (3)", got)
	}
	if n := h.dial.dialCount(); n != 2 {
		t.Fatalf("%d sockets opened, want the broken one replaced (2)", n)
	}
}

// TestRefreshOnNewInterfaceMAC: the refresh reads the interface at each
// period: after the interface was created again with another MAC (and the
// VIP put back), it advertises the new one.
func TestRefreshOnNewInterfaceMAC(t *testing.T) {
	h := refreshHarness(t)
	w := startRefresh(t, h, vip4)
	newMAC := []byte{0x02, 0, 0x5e, 0, 0, 0x42}
	h.addrs.mu.Lock()
	h.addrs.ifi.HardwareAddr = newMAC
	h.addrs.ifi.Index = testIndex + 10
	h.addrs.mu.Unlock()
	w.fire <- time.Time{}
	h.clock.next(t)
	arps, _ := h.dial.sent()
	if len(arps) != 6 || !bytes.Equal(arps[5].p.SenderHardwareAddr, newMAC) {
		t.Fatalf("refresh after the MAC changed: %d ARP packets, last from %v; want 6, from %v", len(arps), arps[len(arps)-1].p.SenderHardwareAddr, newMAC)
	}
}

// TestRefreshOff: with RefreshInterval 0 the burst is all: its goroutine
// ends and nothing waits.
func TestRefreshOff(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 2, GARPInterval: 7 * time.Millisecond}, nil)
	if err := h.a.Announce(context.Background(), vip4); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	h.clock.next(t).fire <- time.Time{}
	h.waitBurst(t, vip4)
	h.clock.idle(t)
}

// TestRefreshWithoutBurst: a burst of one (GARPCount 1) is still refreshed.
func TestRefreshWithoutBurst(t *testing.T) {
	h := newHarness(t, Config{GARPCount: 1, RefreshInterval: testRefresh}, nil)
	if err := h.a.Announce(context.Background(), vip4); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	w := h.clock.next(t)
	if w.d != testRefresh {
		t.Fatalf("wait is %s, want %s", w.d, testRefresh)
	}
	w.fire <- time.Time{}
	h.clock.next(t)
	if got := h.advertisements(); got != 2 {
		t.Fatalf("%d advertisements, want the first and one refresh", got)
	}
}
