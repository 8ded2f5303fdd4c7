package l2

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

var otherMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x00, 0x99}

func mustARP(t *testing.T, op arp.Operation, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) *arp.Packet {
	t.Helper()
	p, err := arp.NewPacket(op, sha, spa, tha, tpa)
	if err != nil {
		t.Fatalf("NewPacket: %v", err)
	}
	return p
}

func TestARPConflict(t *testing.T) {
	other := netip.MustParseAddr("192.0.2.20")
	for _, tt := range []struct {
		name string
		p    *arp.Packet
		want net.HardwareAddr
	}{
		{"reply from another host claiming the vip", mustARP(t, arp.OperationReply, otherMAC, vip4, testMAC, other), otherMAC},
		{"gratuitous request from another host", mustARP(t, arp.OperationRequest, otherMAC, vip4, ethernet.Broadcast, vip4), otherMAC},
		{"request sent from the vip by another host", mustARP(t, arp.OperationRequest, otherMAC, vip4, ethernet.Broadcast, other), otherMAC},
		{"our own gratuitous ARP", mustARP(t, arp.OperationReply, testMAC, vip4, ethernet.Broadcast, vip4), nil},
		{"another host asking who has the vip", mustARP(t, arp.OperationRequest, otherMAC, other, ethernet.Broadcast, vip4), nil},
		{"reply about another address", mustARP(t, arp.OperationReply, otherMAC, other, testMAC, vip4), nil},
		{"unknown operation", func() *arp.Packet {
			p := mustARP(t, arp.OperationReply, otherMAC, vip4, testMAC, other)
			p.Operation = 3
			return p
		}(), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := arpConflict(tt.p, vip4, testMAC); !bytes.Equal(got, tt.want) {
				t.Fatalf("arpConflict = %v, want %v", got, tt.want)
			}
		})
	}
}

func na(target netip.Addr, opts ...ndp.Option) *ndp.NeighborAdvertisement {
	return &ndp.NeighborAdvertisement{Override: true, TargetAddress: target, Options: opts}
}

func tlla(mac net.HardwareAddr) ndp.Option {
	return &ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}
}

func TestNDPConflict(t *testing.T) {
	onIface := &ipv6.ControlMessage{IfIndex: testIndex}
	for _, tt := range []struct {
		name string
		m    ndp.Message
		cm   *ipv6.ControlMessage
		want net.HardwareAddr
	}{
		{"advertisement naming another host", na(vip6, tlla(otherMAC)), onIface, otherMAC},
		{"solicited advertisement naming another host", &ndp.NeighborAdvertisement{Solicited: true, TargetAddress: vip6, Options: []ndp.Option{tlla(otherMAC)}}, onIface, otherMAC},
		{"our own advertisement", na(vip6, tlla(testMAC)), onIface, nil},
		{"advertisement for another target", na(netip.MustParseAddr("2001:db8::20"), tlla(otherMAC)), onIface, nil},
		{"advertisement without target link-layer address", na(vip6), onIface, nil},
		{"advertisement with only a source link-layer address", na(vip6, &ndp.LinkLayerAddress{Direction: ndp.Source, Addr: otherMAC}), onIface, nil},
		{"advertisement received on another interface", na(vip6, tlla(otherMAC)), &ipv6.ControlMessage{IfIndex: testIndex + 1}, nil},
		{"advertisement without interface information", na(vip6, tlla(otherMAC)), nil, nil},
		{"neighbor solicitation for the vip", &ndp.NeighborSolicitation{TargetAddress: vip6}, onIface, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ndpConflict(tt.m, tt.cm, testIndex, vip6, testMAC); !bytes.Equal(got, tt.want) {
				t.Fatalf("ndpConflict = %v, want %v", got, tt.want)
			}
		})
	}
}

// watch runs WatchConflicts in a goroutine and collects what fn receives.
type watch struct {
	mu   sync.Mutex
	macs []net.HardwareAddr
	done chan error
}

func startWatch(ctx context.Context, a *Announcer, addr netip.Addr) *watch {
	w := &watch{done: make(chan error, 1)}
	go func() {
		w.done <- a.WatchConflicts(ctx, addr, func(mac net.HardwareAddr) {
			w.mu.Lock()
			w.macs = append(w.macs, mac)
			w.mu.Unlock()
		})
	}()
	return w
}

// wait returns WatchConflicts' result. The timeout only guards a hung test.
func (w *watch) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-w.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("WatchConflicts did not return")
		return nil
	}
}

func (w *watch) reported() []net.HardwareAddr {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.macs)
}

func TestWatchConflictsReportsClaims(t *testing.T) {
	other := netip.MustParseAddr("192.0.2.20")
	thirdMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x33}
	onIface := &ipv6.ControlMessage{IfIndex: testIndex}
	for _, tt := range []struct {
		name string
		addr netip.Addr
		in   []received
		want []net.HardwareAddr
	}{
		{
			name: "ipv4 claims among our own and unrelated ARP",
			addr: vip4,
			in: []received{
				{arp: mustARP(t, arp.OperationRequest, testMAC, vip4, ethernet.Broadcast, vip4)},
				{arp: mustARP(t, arp.OperationReply, otherMAC, vip4, testMAC, other)},
				{arp: mustARP(t, arp.OperationRequest, thirdMAC, other, ethernet.Broadcast, vip4)},
				{arp: mustARP(t, arp.OperationRequest, thirdMAC, vip4, ethernet.Broadcast, vip4)},
			},
			want: []net.HardwareAddr{otherMAC, thirdMAC},
		},
		{
			name: "ipv6 claims among our own and unrelated advertisements",
			addr: vip6,
			in: []received{
				{ndp: na(vip6, tlla(testMAC)), cm: onIface},
				{ndp: na(vip6, tlla(otherMAC)), cm: onIface},
				{ndp: na(netip.MustParseAddr("2001:db8::20"), tlla(thirdMAC)), cm: onIface},
				{ndp: na(vip6, tlla(thirdMAC)), cm: onIface},
			},
			want: []net.HardwareAddr{otherMAC, thirdMAC},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := startWatch(ctx, h.a, tt.addr)
			for _, r := range tt.in {
				h.dial.in <- r // returns once WatchConflicts read it
			}
			cancel()
			if err := w.wait(t); err != nil {
				t.Fatalf("WatchConflicts after cancel = %v, want nil", err)
			}
			got := w.reported()
			if !slices.EqualFunc(got, tt.want, func(a, b net.HardwareAddr) bool { return bytes.Equal(a, b) }) {
				t.Fatalf("reported %v, want %v", got, tt.want)
			}
			if !h.dial.allClosed() {
				t.Fatal("listening socket left open")
			}
			if n := h.dial.runningWatches(); n != 0 {
				t.Fatalf("%d link subscriptions still running", n)
			}
		})
	}
}

func TestWatchConflictsEndsOnClose(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	w := startWatch(context.Background(), h.a, vip4)
	h.dial.in <- received{arp: mustARP(t, arp.OperationReply, otherMAC, vip4, testMAC, vip4)}
	if err := h.a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close waits for WatchConflicts to finish, which closes its socket.
	if !h.dial.allClosed() {
		t.Fatal("Close returned while WatchConflicts still had its socket open")
	}
	if err := w.wait(t); err != nil {
		t.Fatalf("WatchConflicts after Close = %v, want nil", err)
	}
	if n := h.dial.runningWatches(); n != 0 {
		t.Fatalf("%d link subscriptions still running after Close", n)
	}
	if got := w.reported(); len(got) != 1 {
		t.Fatalf("reported %v, want the one claim", got)
	}
}

func TestWatchConflictsErrors(t *testing.T) {
	t.Run("read failure is returned", func(t *testing.T) {
		h := newHarness(t, Config{}, nil)
		w := startWatch(context.Background(), h.a, vip6)
		h.dial.in <- received{err: errBoom}
		if err := w.wait(t); !errors.Is(err, errBoom) {
			t.Fatalf("WatchConflicts = %v, want errBoom", err)
		}
	})
	t.Run("socket cannot be opened", func(t *testing.T) {
		h := newHarness(t, Config{}, nil)
		h.dial.dialErr = errBoom
		err := h.a.WatchConflicts(context.Background(), vip4, func(net.HardwareAddr) {})
		if !errors.Is(err, errBoom) {
			t.Fatalf("WatchConflicts = %v, want errBoom", err)
		}
	})
	t.Run("missing interface", func(t *testing.T) {
		h := newHarness(t, Config{}, nil)
		h.addrs.ifi = nil
		err := h.a.WatchConflicts(context.Background(), vip4, func(net.HardwareAddr) {})
		if !errors.Is(err, errNoLink) {
			t.Fatalf("WatchConflicts = %v, want errNoLink", err)
		}
	})
	t.Run("nil callback", func(t *testing.T) {
		h := newHarness(t, Config{}, nil)
		if err := h.a.WatchConflicts(context.Background(), vip4, nil); err == nil {
			t.Fatal("WatchConflicts accepted a nil callback")
		}
	})
}

// TestWatchConflictsEndsWhenInterfaceRemoved: once the interface is removed
// its socket hears nothing more, so WatchConflicts returns an error (the
// caller restarts it on the interface that then carries the name), closes
// its socket and ends its link subscription.
func TestWatchConflictsEndsWhenInterfaceRemoved(t *testing.T) {
	for _, vip := range []netip.Addr{vip4, vip6} {
		t.Run(vip.String(), func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			w := startWatch(context.Background(), h.a, vip)
			// A claim read proves the watch is running before the removal.
			if vip.Is4() {
				h.dial.in <- received{arp: mustARP(t, arp.OperationReply, otherMAC, vip4, testMAC, vip4)}
			} else {
				h.dial.in <- received{ndp: na(vip6, tlla(otherMAC)), cm: &ipv6.ControlMessage{IfIndex: testIndex}}
			}
			close(h.dial.removed)
			if err := w.wait(t); !errors.Is(err, errLinkRemoved) {
				t.Fatalf("WatchConflicts after the interface was removed = %v, want errLinkRemoved", err)
			}
			if got := w.reported(); len(got) != 1 {
				t.Fatalf("reported %v, want the one claim", got)
			}
			if !h.dial.allClosed() {
				t.Fatal("listening socket left open")
			}
			if n := h.dial.runningWatches(); n != 0 {
				t.Fatalf("%d link subscriptions still running", n)
			}
		})
	}
}

func TestWatchConflictsInterfaceGoneBeforeSubscription(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(f *fakeAddrs)
	}{
		{"interface deleted", func(f *fakeAddrs) { f.ifi = nil }},
		{"interface recreated with a new index", func(f *fakeAddrs) {
			ifi := *f.ifi
			ifi.Index++
			f.ifi = &ifi
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			// The change lands between the lookup and the subscription.
			h.dial.onWatch = func() {
				h.addrs.mu.Lock()
				tt.change(h.addrs)
				h.addrs.mu.Unlock()
			}
			err := h.a.WatchConflicts(context.Background(), vip6, func(net.HardwareAddr) {})
			if !errors.Is(err, errLinkRemoved) {
				t.Fatalf("WatchConflicts = %v, want errLinkRemoved", err)
			}
			if !h.dial.allClosed() || h.dial.runningWatches() != 0 {
				t.Fatalf("socket or subscription left open (watches %d)", h.dial.runningWatches())
			}
		})
	}
}

func TestWatchConflictsLinkSubscriptionFails(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	h.dial.watchErr = errBoom
	err := h.a.WatchConflicts(context.Background(), vip4, func(net.HardwareAddr) {})
	if !errors.Is(err, errBoom) {
		t.Fatalf("WatchConflicts = %v, want errBoom", err)
	}
	if !h.dial.allClosed() {
		t.Fatal("listening socket left open")
	}
}
