package bgp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

func u32(v uint32) *uint32 { return &v }

// TestValidateHopsAndAttrs: multihop, TTL security, the local address and
// the path attributes are refused where a router would not get what the
// configuration says.
func TestValidateHopsAndAttrs(t *testing.T) {
	ibgp := func(c *Config) { c.Peers[0].ASN = c.ASN }
	tests := []struct {
		name   string
		modify func(c *Config)
		want   []string // substrings, one per expected error, in order
	}{
		{name: "multihop over a loopback", modify: func(c *Config) {
			c.Peers[0].EBGPMultihop = 2
			c.Peers[0].LocalAddress = netip.MustParseAddr("198.51.100.11")
			c.Peers[0].Attrs = Attrs{MED: u32(0)}
		}},
		{name: "ttl security two hops away", modify: func(c *Config) { c.Peers[0].TTLSecurityHops = 2 }},
		{name: "ttl security on an ibgp peer", modify: func(c *Config) { ibgp(c); c.Peers[0].TTLSecurityHops = 1 }},
		{name: "local pref and med to an ibgp peer", modify: func(c *Config) {
			ibgp(c)
			c.Peers[0].Attrs = Attrs{MED: u32(10), LocalPref: u32(200)}
		}},
		{name: "local pref to an ebgp peer", modify: func(c *Config) { c.Peers[0].Attrs.LocalPref = u32(200) },
			want: []string{"peer 192.0.2.254: local_pref 200: LOCAL_PREF is only sent to iBGP peers"}},
		{name: "local pref zero", modify: func(c *Config) { ibgp(c); c.Peers[0].Attrs.LocalPref = u32(0) },
			want: []string{"local_pref 0: must be at least 1"}},
		{name: "multihop on an ibgp peer", modify: func(c *Config) { ibgp(c); c.Peers[0].EBGPMultihop = 2 },
			want: []string{"ebgp_multihop 2: only for eBGP peers"}},
		{name: "multihop and ttl security", modify: func(c *Config) {
			c.Peers[0].EBGPMultihop = 2
			c.Peers[0].TTLSecurityHops = 2
		}, want: []string{"ttl_security_hops and ebgp_multihop exclude each other"}},
		{name: "ttl security beyond 254", modify: func(c *Config) { c.Peers[0].TTLSecurityHops = 255 },
			want: []string{"ttl_security_hops 255: must be 1-254"}},
		{name: "bfd with a router two hops away", modify: func(c *Config) {
			c.Peers[0].EBGPMultihop = 2
			c.Peers[0].BFD.Enabled = true
		}, want: []string{"bfd is single-hop BFD"}},
		{name: "bfd with ttl security of one hop", modify: func(c *Config) {
			c.Peers[0].TTLSecurityHops = 1
			c.Peers[0].BFD.Enabled = true
		}},
		{name: "local address of another family", modify: func(c *Config) { c.Peers[0].LocalAddress = netip.MustParseAddr("2001:db8::11") },
			want: []string{"local_address 2001:db8::11: not of the peer address's family"}},
		{name: "local address unspecified", modify: func(c *Config) { c.Peers[0].LocalAddress = netip.IPv4Unspecified() },
			want: []string{"local_address 0.0.0.0: must be a unicast"}},
		{name: "vip med with ebgp peers only", modify: func(c *Config) {
			c.VIPs = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
			c.VIPAttrs = map[netip.Addr]Attrs{c.VIPs[0]: {MED: u32(5)}}
		}},
		{name: "vip local pref with ebgp peers only", modify: func(c *Config) {
			c.VIPs = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
			c.VIPAttrs = map[netip.Addr]Attrs{c.VIPs[0]: {LocalPref: u32(300)}}
		}, want: []string{"vip 203.0.113.10: local_pref 300: no iBGP peer"}},
		{name: "vip local pref with an ibgp peer", modify: func(c *Config) {
			c.Peers = append(c.Peers, Peer{Address: netip.MustParseAddr("192.0.2.253"), ASN: c.ASN})
			c.VIPs = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
			c.VIPAttrs = map[netip.Addr]Attrs{c.VIPs[0]: {LocalPref: u32(300)}}
		}},
		{name: "attributes of an address that is no vip", modify: func(c *Config) {
			c.VIPAttrs = map[netip.Addr]Attrs{netip.MustParseAddr("203.0.113.99"): {MED: u32(1)}}
		}, want: []string{"vip_attrs 203.0.113.99: not one of the VIPs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.modify(&c)
			errs := c.Validate()
			if len(errs) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d errors matching %q", errs, len(tt.want), tt.want)
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tt.want[i]) {
					t.Errorf("error %d = %q, want it to contain %q", i, e, tt.want[i])
				}
			}
		})
	}
}

// TestHopsAndAttrsFieldErrors: the new problems name their field and
// element, for vipd's configuration to place them at their keys.
func TestHopsAndAttrsFieldErrors(t *testing.T) {
	c := validConfig()
	c.Peers = append(c.Peers, Peer{Address: netip.MustParseAddr("192.0.2.253"), ASN: 65000, EBGPMultihop: 3, TTLSecurityHops: 1,
		LocalAddress: netip.MustParseAddr("2001:db8::1"), Attrs: Attrs{LocalPref: u32(10)}})
	c.VIPs = []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("203.0.113.11")}
	c.VIPAttrs = map[netip.Addr]Attrs{c.VIPs[1]: {LocalPref: u32(0)}}
	type field struct {
		name  string
		index int
	}
	var got []field
	for _, err := range c.Validate() {
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("%v is not a *FieldError", err)
		}
		got = append(got, field{fe.Field, fe.Index})
	}
	want := []field{{"peer.local_address", 1}, {"peer.ttl_security_hops", 1}, {"peer.local_pref", 1}, {"vip.local_pref", 1}}
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
}

// TestAPIPeerHops: the local address, multihop TTL and TTL security reach
// GoBGP's peer configuration; GTSM's minimum TTL is 256 - hops (RFC 5082
// section 3: 255 for a directly connected router).
func TestAPIPeerHops(t *testing.T) {
	base := Peer{Address: netip.MustParseAddr("203.0.113.1"), ASN: 65000}
	for _, tt := range []struct {
		name     string
		modify   func(p *Peer)
		local    string
		multihop uint32 // 0: no EbgpMultihop
		ttlMin   uint32 // 0: no TtlSecurity
	}{
		{name: "directly connected", modify: func(*Peer) {}},
		{name: "two hops from a loopback", modify: func(p *Peer) {
			p.EBGPMultihop = 2
			p.LocalAddress = netip.MustParseAddr("198.51.100.11")
		}, local: "198.51.100.11", multihop: 2},
		{name: "gtsm, directly connected", modify: func(p *Peer) { p.TTLSecurityHops = 1 }, ttlMin: 255},
		{name: "gtsm, two hops", modify: func(p *Peer) { p.TTLSecurityHops = 2 }, ttlMin: 254},
		{name: "gtsm at its limit", modify: func(p *Peer) { p.TTLSecurityHops = MaxTTLSecurityHops }, ttlMin: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := base
			tt.modify(&p)
			ap := apiPeer(p, peerSession{})
			if got := ap.GetTransport().GetLocalAddress(); got != tt.local {
				t.Errorf("transport local address %q, want %q", got, tt.local)
			}
			if m := ap.GetEbgpMultihop(); m.GetEnabled() != (tt.multihop > 0) || m.GetMultihopTtl() != tt.multihop {
				t.Errorf("ebgp multihop %v, want ttl %d", m, tt.multihop)
			}
			if s := ap.GetTtlSecurity(); s.GetEnabled() != (tt.ttlMin > 0) || s.GetTtlMin() != tt.ttlMin {
				t.Errorf("ttl security %v, want min ttl %d", s, tt.ttlMin)
			}
		})
	}
}

// freePort returns a TCP port of 127.0.0.1 nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// testRouter is a GoBGP server playing a router: it connects from local
// to the speaker at 127.0.0.1:port and keeps what it receives.
func testRouter(t *testing.T, asn uint32, local netip.Addr, speakerASN uint32, port int) *server.BgpServer {
	t.Helper()
	r := server.NewBgpServer(server.LoggerOption(gobgpLogger(testLogger(t)), nil))
	go r.Serve()
	t.Cleanup(r.Stop)
	ctx := context.Background()
	if err := r.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: local.String(), ListenPort: -1}}); err != nil {
		t.Fatal(err)
	}
	err := r.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: speakerASN},
		Transport: &api.Transport{LocalAddress: local.String(), RemotePort: uint32(port)},
		Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1, HoldTime: 9, KeepaliveInterval: 3}},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: apiFamilyIPv4, Enabled: true}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// received is what a router got for one prefix: MED and LOCAL_PREF, -1
// when the attribute is absent.
type received struct{ med, localPref int64 }

func (r received) String() string { return fmt.Sprintf("med %d local_pref %d", r.med, r.localPref) }

// receivedFrom returns the router's adj-RIB-in from the speaker, by
// prefix.
func receivedFrom(t *testing.T, r *server.BgpServer) map[string]received {
	t.Helper()
	got := map[string]received{}
	err := r.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: "127.0.0.1", Family: familyIPv4},
		func(nlri bgp.NLRI, paths []*apiutil.Path) {
			for _, p := range paths {
				rv := received{med: -1, localPref: -1}
				for _, a := range p.Attrs {
					switch a := a.(type) {
					case *bgp.PathAttributeMultiExitDisc:
						rv.med = int64(a.Value)
					case *bgp.PathAttributeLocalPref:
						rv.localPref = int64(a.Value)
					}
				}
				got[nlri.String()] = rv
			}
		})
	if err != nil {
		t.Fatalf("list adj-rib-in: %v", err)
	}
	return got
}

// waitReceived polls r (every 50ms, at most 20s: a session comes up
// within GoBGP's 2s first connect) until it holds want.
func waitReceived(t *testing.T, what string, r *server.BgpServer, want map[string]received) {
	t.Helper()
	var got map[string]received
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = receivedFrom(t, r); fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
	}
	t.Fatalf("%s: router received %v, want %v", what, got, want)
}

// TestAttrsOnTheWire runs the speaker against two GoBGP routers on
// loopback addresses, one eBGP and one iBGP, and reads the MED and
// LOCAL_PREF of what they received: the peer's MED on every route, a
// VIP's replacing it; LOCAL_PREF to the iBGP router only (the VIP's
// replacing the peer's), none to the eBGP router; a reconfigured MED
// re-sent without a session reset.
func TestAttrsOnTheWire(t *testing.T) {
	const speakerASN, ebgpASN = 65001, 65010
	port := freePort(t)
	v1, v2 := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("203.0.113.11")
	ebgpAddr, ibgpAddr := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	cfg := Config{
		ASN: speakerASN, RouterID: netip.MustParseAddr("192.0.2.1"),
		ListenPort: int32(port), ListenAddresses: []string{"127.0.0.1"},
		Peers: []Peer{
			{Address: ebgpAddr, ASN: ebgpASN, Attrs: Attrs{MED: u32(20)}},
			{Address: ibgpAddr, ASN: speakerASN, Attrs: Attrs{MED: u32(30), LocalPref: u32(200)}},
		},
		VIPs:     []netip.Addr{v1, v2},
		VIPAttrs: map[netip.Addr]Attrs{v1: {MED: u32(5)}, v2: {LocalPref: u32(300)}},
		Logger:   testLogger(t),
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	ebgpRouter := testRouter(t, ebgpASN, ebgpAddr, speakerASN, port)
	ibgpRouter := testRouter(t, speakerASN, ibgpAddr, speakerASN, port)
	for _, a := range cfg.VIPs {
		if err := s.Announce(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	waitReceived(t, "ebgp router", ebgpRouter, map[string]received{
		"203.0.113.10/32": {med: 5, localPref: -1},
		"203.0.113.11/32": {med: 20, localPref: -1},
	})
	waitReceived(t, "ibgp router", ibgpRouter, map[string]received{
		"203.0.113.10/32": {med: 5, localPref: 200},
		"203.0.113.11/32": {med: 30, localPref: 300},
	})

	cfg.Peers = slices.Clone(cfg.Peers)
	cfg.Peers[0].Attrs = Attrs{MED: u32(40)}
	cfg.VIPAttrs = map[netip.Addr]Attrs{v2: {LocalPref: u32(300)}}
	if err := s.Reconfigure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitReceived(t, "ebgp router after reconfigure", ebgpRouter, map[string]received{
		"203.0.113.10/32": {med: 40, localPref: -1},
		"203.0.113.11/32": {med: 40, localPref: -1},
	})
	waitReceived(t, "ibgp router after reconfigure", ibgpRouter, map[string]received{
		"203.0.113.10/32": {med: 30, localPref: 200},
		"203.0.113.11/32": {med: 30, localPref: 300},
	})
}

// TestSessionEqualHops: a change of how the neighbor is reached needs a
// new session (Reconfigure re-creates the peer); a change of path
// attributes does not (a soft reset out sends them).
func TestSessionEqualHops(t *testing.T) {
	base := Peer{Address: netip.MustParseAddr("203.0.113.1"), ASN: 65000}
	for _, tt := range []struct {
		name   string
		modify func(p *Peer)
		equal  bool
	}{
		{"local address", func(p *Peer) { p.LocalAddress = netip.MustParseAddr("198.51.100.11") }, false},
		{"multihop", func(p *Peer) { p.EBGPMultihop = 2 }, false},
		{"ttl security", func(p *Peer) { p.TTLSecurityHops = 1 }, false},
		{"med", func(p *Peer) { p.Attrs.MED = u32(7) }, true},
	} {
		n := base
		tt.modify(&n)
		if got := sessionEqual(base, n); got != tt.equal {
			t.Errorf("%s changed: sessionEqual = %v, want %v", tt.name, got, tt.equal)
		}
	}
}
