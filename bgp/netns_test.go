package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// Lab addresses: the router and the speaker share one veth link.
var (
	routerV4  = netip.MustParseAddr("192.0.2.1")
	speakerV4 = netip.MustParseAddr("192.0.2.2")
	routerV6  = netip.MustParseAddr("2001:db8:1::1")
	speakerV6 = netip.MustParseAddr("2001:db8:1::2")
	vip4      = netip.MustParsePrefix("203.0.113.10/32")
	vip6      = netip.MustParsePrefix("2001:db8:100::10/128")
)

const (
	routerASN  = 65000
	speakerASN = 65001
	md5Secret  = "vipd-test-secret"
)

// lab creates a router namespace and a speaker namespace linked by a veth pair.
func lab(t *testing.T, tag string) (routerNS, speakerNS string) {
	routerNS = netnstest.NewNS(t, netnstest.Name("bgp", tag+"r"))
	speakerNS = netnstest.NewNS(t, netnstest.Name("bgp", tag+"s"))
	netnstest.Veth(t,
		routerNS, "eth0", []string{routerV4.String() + "/24", routerV6.String() + "/64"},
		speakerNS, "eth0", []string{speakerV4.String() + "/24", speakerV6.String() + "/64"})
	return routerNS, speakerNS
}

func speakerConfig(peers ...Peer) Config {
	return Config{ASN: speakerASN, RouterID: speakerV4, ListenPort: -1, Peers: peers, VIPs: []netip.Addr{vip4.Addr(), vip6.Addr()}}
}

// routeWith waits (bounded) until r has a best route for prefix whose next
// hop is nh and whose communities satisfy want.
func waitRoute(t *testing.T, r routers.Router, prefix netip.Prefix, nh netip.Addr, what string, want func(routers.Route) bool) {
	t.Helper()
	netnstest.Eventually(t, 15*time.Second, 100*time.Millisecond, what, func() (bool, string) {
		rs, err := r.Routes(prefix)
		if err != nil {
			return false, err.Error()
		}
		for _, rt := range rs {
			if rt.Best && slices.Contains(rt.NextHops, nh) && want(rt) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("routes for %s: %+v", prefix, rs)
	})
}

func waitNoRoute(t *testing.T, r routers.Router, prefix netip.Prefix, timeout time.Duration, what string) {
	t.Helper()
	netnstest.Eventually(t, timeout, 50*time.Millisecond, what, func() (bool, string) {
		rs, err := r.Routes(prefix)
		if err != nil {
			return false, err.Error()
		}
		return len(rs) == 0, fmt.Sprintf("routes for %s: %+v", prefix, rs)
	})
}

func waitKernelRoute(t *testing.T, ns string, prefix netip.Prefix, nh netip.Addr) {
	t.Helper()
	netnstest.Eventually(t, 10*time.Second, 100*time.Millisecond, "kernel route "+prefix.String(), func() (bool, string) {
		nhs, err := routers.KernelNextHops(ns, prefix)
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(nhs, nh), fmt.Sprintf("kernel next hops %v", nhs)
	})
}

func noGshut(r routers.Route) bool { return !r.HasCommunity("65535:0") }

const birdConf = `
router id 192.0.2.1;
protocol device { scan time 1; }
protocol direct { ipv4; ipv6; interface "eth0"; }
protocol kernel k4 { ipv4 { export where source = RTS_BGP; }; }
protocol kernel k6 { ipv6 { export where source = RTS_BGP; }; }
protocol bgp spk4 {
	local 192.0.2.1 as 65000;
	neighbor 192.0.2.2 as 65001;
	passive on;
	error wait time 1, 5;
	password "vipd-test-secret";
	hold time 3;
	ipv4 { import all; export none; };
}
protocol bgp spk6 {
	local 2001:db8:1::1 as 65000;
	neighbor 2001:db8:1::2 as 65001;
	passive on;
	error wait time 1, 5;
	hold time 3;
	ipv6 { import all; export none; };
}
`

func TestBIRD(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc")
	rns, sns := lab(t, "b")
	bird := routers.StartBIRD(t, rns, birdConf)
	cfg := speakerConfig(
		Peer{Address: routerV4, ASN: routerASN, Password: md5Secret, HoldTime: 3 * time.Second, Communities: []string{"65000:100"}},
		Peer{Address: routerV6, ASN: routerASN, HoldTime: 3 * time.Second, Communities: []string{"65000:600"}},
	)
	spk := startSpeakerProc(t, sns, cfg)
	for _, proto := range []string{"spk4", "spk6"} {
		netnstest.Eventually(t, 20*time.Second, 200*time.Millisecond, "bird "+proto+" established", func() (bool, string) {
			return bird.Established(proto)
		})
	}

	spk.do(t, "announce "+vip4.Addr().String())
	spk.do(t, "announce "+vip6.Addr().String())
	waitRoute(t, bird, vip4, speakerV4, "bird has ipv4 vip via speaker with peer community", func(r routers.Route) bool {
		return r.HasCommunity("65000:100") && !r.HasCommunity("65000:600") && noGshut(r)
	})
	waitRoute(t, bird, vip6, speakerV6, "bird has ipv6 vip via speaker with peer community", func(r routers.Route) bool {
		return r.HasCommunity("65000:600") && !r.HasCommunity("65000:100")
	})
	waitKernelRoute(t, rns, vip4, speakerV4)
	waitKernelRoute(t, rns, vip6, speakerV6)

	ps := spk.peers(t)
	if len(ps) != 2 {
		t.Fatalf("peers = %+v, want 2", ps)
	}
	for _, p := range ps {
		if p.State != "established" || p.Advertised != 1 || p.ASN != routerASN || p.Uptime <= 0 {
			t.Errorf("peer %+v: want established, 1 advertised, asn %d, uptime > 0", p, routerASN)
		}
	}

	// Reload with new communities for the IPv4 peer: the session stays up
	// and the route is re-sent with the new community.
	before := spk.peers(t)[0].Uptime
	cfg.Peers[0].Communities = []string{"65000:101"}
	spk.reconfigure(t, cfg)
	waitRoute(t, bird, vip4, speakerV4, "bird sees the reconfigured community", func(r routers.Route) bool {
		return r.HasCommunity("65000:101") && !r.HasCommunity("65000:100")
	})
	// A reset session restarts its uptime near zero; a kept one only grows.
	if ps := spk.peers(t); ps[0].State != "established" || ps[0].Uptime < before {
		t.Errorf("after community change: peers %+v (ipv4 uptime %v before), want the ipv4 session kept (no reset)", ps, before)
	}

	spk.do(t, "drain "+vip4.Addr().String())
	waitRoute(t, bird, vip4, speakerV4, "bird sees GRACEFUL_SHUTDOWN after drain", func(r routers.Route) bool {
		return r.HasCommunity("65535:0") && r.HasCommunity("65000:101")
	})

	spk.do(t, "withdraw "+vip4.Addr().String())
	waitNoRoute(t, bird, vip4, 10*time.Second, "bird drops ipv4 vip after withdraw")
	waitRoute(t, bird, vip6, speakerV6, "ipv6 vip stays", func(routers.Route) bool { return true })
	spk.do(t, "withdraw "+vip6.Addr().String())
	waitNoRoute(t, bird, vip6, 10*time.Second, "bird drops ipv6 vip after withdraw")

	holdTimerAndKill(t, bird, spk)
}

// holdTimerAndKill checks that the router drops the vip within 4s (hold time
// 3s) when the speaker freezes (SIGSTOP: the TCP session stays open, only the
// hold timer can end it), that the speaker re-establishes and re-announces
// after SIGCONT, and that SIGKILL also removes the route within 4s.
func holdTimerAndKill(t *testing.T, r routers.Router, spk *speakerProc) {
	t.Helper()
	spk.do(t, "announce "+vip4.Addr().String())
	waitRoute(t, r, vip4, speakerV4, "router has vip before freeze", noGshut)
	frozen := time.Now()
	spk.signal(t, syscall.SIGSTOP)
	waitNoRoute(t, r, vip4, 4*time.Second, "router drops vip of a frozen speaker (hold 3s)")
	t.Logf("route gone %s after SIGSTOP", time.Since(frozen).Round(100*time.Millisecond))
	spk.signal(t, syscall.SIGCONT)
	waitRoute(t, r, vip4, speakerV4, "router has vip again after SIGCONT (session re-established)", noGshut)

	killed := time.Now()
	spk.kill(t)
	waitNoRoute(t, r, vip4, 4*time.Second, "router drops vip after speaker SIGKILL")
	t.Logf("route gone %s after SIGKILL", time.Since(killed).Round(100*time.Millisecond))
}

const frrConf = `
hostname r
router bgp 65000
 bgp router-id 192.0.2.1
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor 192.0.2.2 remote-as 65001
 neighbor 192.0.2.2 passive
 neighbor 192.0.2.2 timers 1 3
 neighbor 192.0.2.2 password vipd-test-secret
 neighbor 2001:db8:1::2 remote-as 65001
 neighbor 2001:db8:1::2 passive
 neighbor 2001:db8:1::2 timers 1 3
 address-family ipv4 unicast
  neighbor 192.0.2.2 activate
 exit-address-family
 address-family ipv6 unicast
  neighbor 2001:db8:1::2 activate
 exit-address-family
`

func TestFRR(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "/usr/lib/frr/bgpd", "/usr/lib/frr/zebra", "vtysh")
	rns, sns := lab(t, "f")
	frr := routers.StartFRR(t, rns, frrConf)
	spk := startSpeakerProc(t, sns, speakerConfig(
		Peer{Address: routerV4, ASN: routerASN, Password: md5Secret, HoldTime: 3 * time.Second, Communities: []string{"65000:100"}},
		Peer{Address: routerV6, ASN: routerASN, HoldTime: 3 * time.Second},
	))
	for _, nb := range []netip.Addr{speakerV4, speakerV6} {
		netnstest.Eventually(t, 20*time.Second, 200*time.Millisecond, "frr session with "+nb.String(), func() (bool, string) {
			return frr.Established(nb)
		})
	}

	spk.do(t, "announce "+vip4.Addr().String())
	spk.do(t, "announce "+vip6.Addr().String())
	waitRoute(t, frr, vip4, speakerV4, "frr has ipv4 vip via speaker", func(r routers.Route) bool {
		return r.HasCommunity("65000:100") && noGshut(r)
	})
	waitRoute(t, frr, vip6, speakerV6, "frr has ipv6 vip via speaker", func(r routers.Route) bool { return len(r.Communities) == 0 })
	waitKernelRoute(t, rns, vip4, speakerV4)
	waitKernelRoute(t, rns, vip6, speakerV6)

	spk.do(t, "drain "+vip4.Addr().String())
	waitRoute(t, frr, vip4, speakerV4, "frr sees GRACEFUL_SHUTDOWN after drain", func(r routers.Route) bool {
		return r.HasCommunity("65535:0") && r.HasCommunity("65000:100")
	})
	spk.do(t, "withdraw "+vip4.Addr().String())
	waitNoRoute(t, frr, vip4, 10*time.Second, "frr drops ipv4 vip after withdraw")

	holdTimerAndKill(t, frr, spk)
}
