package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/vipd/vipd/agent"
	"github.com/vipd/vipd/bgp"
)

// fakeHalf is either half of a routed VIP: it records calls and answers
// Verify/Announced with what the test set.
type fakeHalf struct {
	present   bool
	err       error
	announces int
}

func (f *fakeHalf) Announce(context.Context, netip.Addr) error {
	f.announces++
	f.present = true
	return nil
}
func (f *fakeHalf) Withdraw(context.Context, netip.Addr) error { f.present = false; return nil }
func (f *fakeHalf) Drain(context.Context, netip.Addr) error    { return nil }
func (f *fakeHalf) Verify(context.Context, netip.Addr) (bool, error) {
	return f.present, f.err
}
func (f *fakeHalf) Announced(context.Context, netip.Addr) (bool, error) {
	return f.present, f.err
}

func TestRoutedVIPVerify(t *testing.T) {
	ctx := context.Background()
	vip := netip.MustParseAddr("203.0.113.10")
	boom := errors.New("netlink: boom")
	cases := []struct {
		name           string
		bound, routed  bool
		bindErr, rtErr error
		want           bool
		wantErr        error
	}{
		{"bound and in the rib", true, true, nil, nil, true, nil},
		{"address gone from lo", false, true, nil, nil, false, nil},
		{"path gone from the rib", true, false, nil, nil, false, nil},
		{"bind check fails", true, true, boom, nil, false, boom},
		{"rib read fails", true, true, nil, boom, false, boom},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bind := &fakeHalf{present: c.bound, err: c.bindErr}
			route := &fakeHalf{present: c.routed, err: c.rtErr}
			r := &routedVIP{bind: bind, route: route}
			got, err := r.Verify(ctx, vip)
			if got != c.want || !errors.Is(err, c.wantErr) {
				t.Fatalf("Verify = %v, %v; want %v, %v", got, err, c.want, c.wantErr)
			}
			if c.wantErr != nil || c.want {
				return
			}
			// What the agent does next: Announce restores both halves.
			if err := r.Announce(ctx, vip); err != nil {
				t.Fatal(err)
			}
			if ok, err := r.Verify(ctx, vip); !ok || err != nil || bind.announces != 1 || route.announces != 1 {
				t.Fatalf("after Announce: Verify = %v, %v; announces bind %d route %d", ok, err, bind.announces, route.announces)
			}
		})
	}
}

// TestSpeakerConfig: the [bgp] keys reach the speaker, with their
// defaults, and only bgp VIPs are exportable.
func TestSpeakerConfig(t *testing.T) {
	c, err := agent.Parse("test.toml", []byte(`
node_name = "n1"
state_dir = "/tmp/vipd-test-unused"
[cluster]
bind_address = "192.0.2.11"
[[vip]]
name = "api"
address = "192.0.2.10"
interface = "eth0"
[[vip]]
name = "routed"
address = "203.0.113.10"
mode = "bgp"
[[vip]]
name = "routed6"
address = "2001:db8:100::10"
mode = "bgp"
[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
bfd = true
bfd_min_interval = "100ms"
bfd_multiplier = 4
max_prefixes = 20000
[[bgp.peer]]
address = "2001:db8::1"
asn = 64512
`))
	if err != nil {
		t.Fatal(err)
	}
	bc := speakerConfig(c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(bc.Peers) != 2 {
		t.Fatalf("peers %+v", bc.Peers)
	}
	want := bgp.BFD{Enabled: true, MinInterval: 100 * time.Millisecond, Multiplier: 4}
	if p := bc.Peers[0]; p.BFD != want || p.MaxPrefixes != 20000 {
		t.Errorf("first peer %+v, want bfd %+v and max_prefixes 20000", p, want)
	}
	want = bgp.BFD{Enabled: false, MinInterval: 300 * time.Millisecond, Multiplier: 3}
	if p := bc.Peers[1]; p.BFD != want || p.MaxPrefixes != bgp.DefaultMaxPrefixes {
		t.Errorf("second peer %+v, want the defaults bfd %+v, max_prefixes %d", p, want, bgp.DefaultMaxPrefixes)
	}
	if len(bc.VIPs) != 2 || bc.VIPs[0] != netip.MustParseAddr("203.0.113.10") || bc.VIPs[1] != netip.MustParseAddr("2001:db8:100::10") {
		t.Errorf("vips %v, want the two bgp VIPs only", bc.VIPs)
	}
	if errs := bc.Validate(); len(errs) != 0 {
		t.Errorf("speaker config invalid: %v", errs)
	}
}
