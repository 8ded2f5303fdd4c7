package routers

import (
	"net/netip"
	"slices"
	"testing"
)

func TestParseBIRDRoutes(t *testing.T) {
	out := "BIRD 2.0.12 ready.\n" +
		"Table master4:\n" +
		"203.0.113.10/32      unicast [spk4 19:57:31.204] * (100) [AS65001i]\n" +
		"\tvia 192.0.2.2 on eth0\n" +
		"\tType: BGP univ\n" +
		"\tBGP.origin: IGP\n" +
		"\tBGP.as_path: 65001\n" +
		"\tBGP.next_hop: 192.0.2.2\n" +
		"\tBGP.local_pref: 100\n" +
		"\tBGP.community: (65000,101) (65535,0)\n" +
		"                     unicast [other 19:57:32.000] (100) [AS65002i]\n" +
		"\tvia 192.0.2.3 on eth0\n" +
		"\tType: BGP univ\n"
	rs, err := parseBIRDRoutes(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("routes = %+v, want 2", rs)
	}
	want := netip.MustParsePrefix("203.0.113.10/32")
	if rs[0].Prefix != want || !rs[0].Best || !slices.Equal(rs[0].NextHops, []netip.Addr{netip.MustParseAddr("192.0.2.2")}) ||
		!slices.Equal(rs[0].Communities, []string{"65000:101", "65535:0"}) {
		t.Errorf("first route = %+v", rs[0])
	}
	if rs[1].Prefix != want || rs[1].Best || !slices.Equal(rs[1].NextHops, []netip.Addr{netip.MustParseAddr("192.0.2.3")}) ||
		len(rs[1].Communities) != 0 {
		t.Errorf("second route = %+v", rs[1])
	}
}

func TestParseFRRRoutes(t *testing.T) {
	p := netip.MustParsePrefix("203.0.113.10/32")
	out := `{"prefix":"203.0.113.10/32","paths":[
	 {"community":{"string":"65000:100 graceful-shutdown","list":["65000:100","gracefulShutdown"]},
	  "nexthops":[{"ip":"192.0.2.2","afi":"ipv4","used":true}],"bestpath":{"overall":true}},
	 {"nexthops":[{"ip":"192.0.2.3"}],"stale":true}]}`
	rs, err := parseFRRRoutes(p, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || !rs[0].Best || rs[1].Best || rs[0].Stale || !rs[1].Stale {
		t.Fatalf("routes = %+v, want 2 with the first best and the second stale", rs)
	}
	if !rs[0].HasCommunity("65535:0") || !rs[0].HasCommunity("65000:100") || rs[0].NextHops[0] != netip.MustParseAddr("192.0.2.2") {
		t.Errorf("first route = %+v", rs[0])
	}
	if empty, err := parseFRRRoutes(p, "{}\n"); err != nil || len(empty) != 0 {
		t.Errorf("no route: got %+v, %v", empty, err)
	}
}
