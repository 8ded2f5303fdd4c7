package bgp

import (
	"net/netip"
	"slices"
	"testing"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// decoded is the part of a path the tests look at.
type decoded struct {
	prefix      string
	nexthop     string
	communities []uint32
	origin      int
}

func decodePath(t *testing.T, p *api.Path) decoded {
	t.Helper()
	nlri, err := apiutil.GetNativeNlri(p)
	if err != nil {
		t.Fatalf("decode nlri: %v", err)
	}
	attrs, err := apiutil.GetNativePathAttributes(p)
	if err != nil {
		t.Fatalf("decode attributes: %v", err)
	}
	d := decoded{prefix: nlri.String(), origin: -1}
	for _, a := range attrs {
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
		wantFamily  *api.Family
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
			if p.Family.Afi != tt.wantFamily.Afi || p.Family.Safi != tt.wantFamily.Safi {
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
	req, err := exportPolicy(peers)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.DefinedSets) != 2 {
		t.Fatalf("defined sets = %v, want one per peer with communities", req.DefinedSets)
	}
	if got := req.DefinedSets[0].List; !slices.Equal(got, []string{"192.0.2.254/32"}) {
		t.Errorf("first neighbor set = %v", got)
	}
	if got := req.DefinedSets[1].List; !slices.Equal(got, []string{"2001:db8::fe/128"}) {
		t.Errorf("second neighbor set = %v", got)
	}
	if len(req.Policies) != 1 || len(req.Policies[0].Statements) != 2 {
		t.Fatalf("policies = %v, want one policy with two statements", req.Policies)
	}
	st := req.Policies[0].Statements[0]
	if st.Conditions.NeighborSet.Name != req.DefinedSets[0].Name {
		t.Errorf("statement matches set %q, want %q", st.Conditions.NeighborSet.Name, req.DefinedSets[0].Name)
	}
	if got := st.Actions.Community.Communities; !slices.Equal(got, []string{"65000:100", "65000:200"}) || st.Actions.Community.Type != api.CommunityAction_ADD {
		t.Errorf("community action = %v", st.Actions.Community)
	}
	a := exportAssignment().Assignment
	if a.Name != "global" || a.Direction != api.PolicyDirection_EXPORT || a.DefaultAction != api.RouteAction_ACCEPT ||
		len(a.Policies) != 1 || a.Policies[0].Name != req.Policies[0].Name {
		t.Errorf("assignment = %v, want global export of %q accepting by default", a, req.Policies[0].Name)
	}

	empty, err := exportPolicy([]Peer{{Address: netip.MustParseAddr("192.0.2.254"), ASN: 65000}})
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.DefinedSets) != 0 || len(empty.Policies) != 1 || len(empty.Policies[0].Statements) != 0 {
		t.Errorf("no communities: got %v, want the policy without statements", empty)
	}
}

func TestAPIPeer(t *testing.T) {
	p := apiPeer(Peer{Address: netip.MustParseAddr("2001:db8::fe"), ASN: 65000, Password: "s3cret", HoldTime: 9e9})
	if p.Conf.NeighborAddress != "2001:db8::fe" || p.Conf.PeerAsn != 65000 || p.Conf.AuthPassword != "s3cret" {
		t.Errorf("conf = %v", p.Conf)
	}
	if p.Timers.Config.HoldTime != 9 || p.Timers.Config.KeepaliveInterval != 3 {
		t.Errorf("timers = %v, want hold 9 keepalive 3", p.Timers.Config)
	}
	if len(p.AfiSafis) != 1 || p.AfiSafis[0].Config.Family.Afi != api.Family_AFI_IP6 {
		t.Errorf("afi-safis = %v, want only ipv6 unicast for an ipv6 peer", p.AfiSafis)
	}
}
