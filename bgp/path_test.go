package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// decoded is the part of a path the tests look at.
type decoded struct {
	prefix      string
	nexthop     string
	communities []uint32
	origin      int
}

func decodePath(t *testing.T, p *apiutil.Path) decoded {
	t.Helper()
	d := decoded{prefix: p.Nlri.String(), origin: -1}
	for _, a := range p.Attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeNextHop:
			d.nexthop = a.Value.String()
		case *bgp.PathAttributeMpReachNLRI:
			d.nexthop = a.Nexthop.String()
		case *bgp.PathAttributeCommunities:
			d.communities = a.Value
		case *bgp.PathAttributeOrigin:
			d.origin = int(a.Value)
		}
	}
	return d
}

func TestBuildPath(t *testing.T) {
	tests := []struct {
		name        string
		addr        string
		communities []uint32
		want        decoded
		wantFamily  bgp.Family
	}{
		{
			name:       "ipv4 announce",
			addr:       "203.0.113.10",
			want:       decoded{prefix: "203.0.113.10/32", nexthop: "0.0.0.0"},
			wantFamily: familyIPv4,
		},
		{
			name:        "ipv4 drain carries graceful shutdown",
			addr:        "203.0.113.10",
			communities: []uint32{GracefulShutdown},
			want:        decoded{prefix: "203.0.113.10/32", nexthop: "0.0.0.0", communities: []uint32{GracefulShutdown}},
			wantFamily:  familyIPv4,
		},
		{
			name:       "ipv6 via mp_reach with unspecified next hop",
			addr:       "2001:db8:100::10",
			want:       decoded{prefix: "2001:db8:100::10/128", nexthop: "::"},
			wantFamily: familyIPv6,
		},
		{
			name:       "ipv4-mapped ipv6 is treated as ipv4",
			addr:       "::ffff:203.0.113.10",
			want:       decoded{prefix: "203.0.113.10/32", nexthop: "0.0.0.0"},
			wantFamily: familyIPv4,
		},
		{
			name:        "communities sorted and deduplicated",
			addr:        "203.0.113.11",
			communities: []uint32{GracefulShutdown, 65000<<16 | 1, GracefulShutdown},
			want:        decoded{prefix: "203.0.113.11/32", nexthop: "0.0.0.0", communities: []uint32{65000<<16 | 1, GracefulShutdown}},
			wantFamily:  familyIPv4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := buildPath(netip.MustParseAddr(tt.addr).Unmap(), tt.communities)
			if err != nil {
				t.Fatal(err)
			}
			if p.Family != tt.wantFamily {
				t.Errorf("family = %v, want %v", p.Family, tt.wantFamily)
			}
			got := decodePath(t, p)
			tt.want.origin = 0 // IGP
			if got.prefix != tt.want.prefix || got.nexthop != tt.want.nexthop || got.origin != tt.want.origin ||
				!slices.Equal(got.communities, tt.want.communities) {
				t.Errorf("path = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBuildPathRejects(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "::", "127.0.0.1", "224.0.0.1", "fe80::1", "ff02::1"} {
		if _, err := buildPath(netip.MustParseAddr(s), nil); err == nil {
			t.Errorf("buildPath(%s) succeeded, want error", s)
		}
	}
	if _, err := buildPath(netip.Addr{}, nil); err == nil {
		t.Error("buildPath(invalid) succeeded, want error")
	}
}

func TestExportPolicy(t *testing.T) {
	peers := []Peer{
		{Address: netip.MustParseAddr("192.0.2.254"), ASN: 65000, Communities: []string{"65000:100", "65000:200"}},
		{Address: netip.MustParseAddr("198.51.100.254"), ASN: 65000},
		{Address: netip.MustParseAddr("2001:db8::fe"), ASN: 65000, Communities: []string{"65000:6"}},
	}
	vips := []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:100::10"), netip.MustParseAddr("203.0.113.11")}
	req, err := exportPolicy(peers, vips, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.DefinedSets) != 4 {
		t.Fatalf("defined sets = %v, want one per peer with communities and one per VIP family", req.DefinedSets)
	}
	if got := req.DefinedSets[0].List; !slices.Equal(got, []string{"192.0.2.254/32"}) {
		t.Errorf("first neighbor set = %v", got)
	}
	if got := req.DefinedSets[1].List; !slices.Equal(got, []string{"2001:db8::fe/128"}) {
		t.Errorf("second neighbor set = %v", got)
	}
	prefixes := func(d *api.DefinedSet) []string {
		var out []string
		for _, p := range d.Prefixes {
			out = append(out, fmt.Sprintf("%s %d-%d", p.IpPrefix, p.MaskLengthMin, p.MaskLengthMax))
		}
		return out
	}
	if d := req.DefinedSets[2]; d.DefinedType != api.DefinedType_DEFINED_TYPE_PREFIX || !slices.Equal(prefixes(d), []string{"203.0.113.10/32 32-32", "203.0.113.11/32 32-32"}) {
		t.Errorf("ipv4 vip set = %v, want the exact /32s", d)
	}
	if d := req.DefinedSets[3]; !slices.Equal(prefixes(d), []string{"2001:db8:100::10/128 128-128"}) {
		t.Errorf("ipv6 vip set = %v, want the exact /128", d)
	}
	if len(req.Policies) != 2 || len(req.Policies[0].Statements) != 4 {
		t.Fatalf("policies = %v, want the export policy with four statements and the import policy", req.Policies)
	}
	if imp := req.Policies[1]; imp.Name != importPolicyName || len(imp.Statements) != 1 ||
		imp.Statements[0].Conditions.RouteType != api.Conditions_ROUTE_TYPE_LOCAL || imp.Statements[0].Actions.RouteAction != api.RouteAction_ROUTE_ACTION_ACCEPT {
		t.Errorf("import policy = %v, want only locally originated paths accepted", imp)
	}
	st := req.Policies[0].Statements[0]
	if st.Conditions.NeighborSet.Name != req.DefinedSets[0].Name {
		t.Errorf("statement matches set %q, want %q", st.Conditions.NeighborSet.Name, req.DefinedSets[0].Name)
	}
	// Community statements add and go on: only the VIP statements accept.
	if got := st.Actions.Community.Communities; !slices.Equal(got, []string{"65000:100", "65000:200"}) ||
		st.Actions.Community.Type != api.CommunityAction_TYPE_ADD || st.Actions.RouteAction != api.RouteAction_ROUTE_ACTION_UNSPECIFIED {
		t.Errorf("community statement actions = %v, want add and continue", st.Actions)
	}
	for _, st := range req.Policies[0].Statements[2:] {
		if st.Conditions.PrefixSet == nil || st.Conditions.RouteType != api.Conditions_ROUTE_TYPE_LOCAL || st.Actions.RouteAction != api.RouteAction_ROUTE_ACTION_ACCEPT {
			t.Errorf("vip statement %v, want prefix set, locally originated, accept", st)
		}
	}
	a := exportAssignment().Assignment
	if a.Name != "global" || a.Direction != api.PolicyDirection_POLICY_DIRECTION_EXPORT || a.DefaultAction != api.RouteAction_ROUTE_ACTION_REJECT ||
		len(a.Policies) != 1 || a.Policies[0].Name != req.Policies[0].Name {
		t.Errorf("assignment = %v, want global export of %q rejecting by default", a, req.Policies[0].Name)
	}
	in := importAssignment().Assignment
	if in.Name != "global" || in.Direction != api.PolicyDirection_POLICY_DIRECTION_IMPORT || in.DefaultAction != api.RouteAction_ROUTE_ACTION_REJECT ||
		len(in.Policies) != 1 || in.Policies[0].Name != importPolicyName {
		t.Errorf("import assignment = %v, want global import of %q rejecting the rest", in, importPolicyName)
	}

	empty, err := exportPolicy([]Peer{{Address: netip.MustParseAddr("192.0.2.254"), ASN: 65000}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.DefinedSets) != 0 || len(empty.Policies) != 2 || len(empty.Policies[0].Statements) != 0 {
		t.Errorf("no communities, no vips: got %v, want the policy without statements (export nothing)", empty)
	}
}

func TestAPIPeer(t *testing.T) {
	p := apiPeer(Peer{Address: netip.MustParseAddr("2001:db8::fe"), ASN: 65000, Password: "s3cret", HoldTime: 9e9}, peerSession{})
	if p.Conf.NeighborAddress != "2001:db8::fe" || p.Conf.PeerAsn != 65000 || p.Conf.AuthPassword != "s3cret" || p.Conf.AdminDown {
		t.Errorf("conf = %v", p.Conf)
	}
	if p.Timers.Config.HoldTime != 9 || p.Timers.Config.KeepaliveInterval != 3 {
		t.Errorf("timers = %v, want hold 9 keepalive 3", p.Timers.Config)
	}
	if len(p.AfiSafis) != 1 || p.AfiSafis[0].Config.Family.Afi != api.Family_AFI_IP6 {
		t.Errorf("afi-safis = %v, want only ipv6 unicast for an ipv6 peer", p.AfiSafis)
	}
	if l := p.AfiSafis[0].PrefixLimits; l == nil || l.MaxPrefixes != DefaultMaxPrefixes || l.Family.Afi != api.Family_AFI_IP6 {
		t.Errorf("prefix limit = %v, want %d for ipv6", l, DefaultMaxPrefixes)
	}
	if p.GracefulRestart != nil || p.AfiSafis[0].MpGracefulRestart != nil {
		t.Errorf("graceful restart off: got %v and %v, want no capability", p.GracefulRestart, p.AfiSafis[0].MpGracefulRestart)
	}
	held := apiPeer(Peer{Address: netip.MustParseAddr("192.0.2.254"), ASN: 65000, MaxPrefixes: 20000}, peerSession{adminDown: true})
	if !held.Conf.AdminDown || held.AfiSafis[0].PrefixLimits.MaxPrefixes != 20000 {
		t.Errorf("held peer = %v, want admin down with limit 20000", held)
	}
}

func TestAPIPeerGracefulRestart(t *testing.T) {
	peer := Peer{Address: netip.MustParseAddr("192.0.2.254"), ASN: 65000}
	for _, tt := range []struct {
		name       string
		gr         GracefulRestart
		restarting bool
	}{
		{"fresh start after a crash", GracefulRestart{RestartTime: 5 * time.Second}, false},
		{"resumed after a planned restart", GracefulRestart{RestartTime: 5 * time.Second}, true},
		{"with long-lived", GracefulRestart{RestartTime: 2 * time.Second, LongLivedStaleTime: time.Hour}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := apiPeer(peer, peerSession{gr: tt.gr, restarting: tt.restarting})
			g := p.GracefulRestart
			secs := uint32(tt.gr.RestartTime / time.Second)
			if g == nil || !g.Enabled || g.RestartTime != secs || g.DeferralTime != secs || g.LocalRestarting != tt.restarting ||
				g.HelperOnly || g.NotificationEnabled {
				t.Errorf("graceful restart = %v, want enabled, restart and deferral %ds, restarting %t, not helper-only, no notification support", g, secs, tt.restarting)
			}
			// Without NotificationEnabled (RFC 8538), the CEASE of Stop
			// still makes routers drop the routes at once.
			if mp := p.AfiSafis[0].MpGracefulRestart; mp == nil || !mp.Config.Enabled {
				t.Errorf("afi-safi graceful restart = %v, want enabled for the family", mp)
			}
			ll := p.AfiSafis[0].LongLivedGracefulRestart
			if tt.gr.LongLivedStaleTime == 0 {
				if g.LonglivedEnabled || ll != nil {
					t.Errorf("long-lived = %t, %v; want off", g.LonglivedEnabled, ll)
				}
			} else if !g.LonglivedEnabled || ll == nil || !ll.Config.Enabled || ll.Config.RestartTime != 3600 {
				t.Errorf("long-lived = %t, %v; want on with 3600s", g.LonglivedEnabled, ll)
			}
		})
	}
}
