package bgplab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// The multihop lab: one vipd node and two routers with a plain Linux
// router (the hop) between them; every BGP address is on a loopback and
// reached by static /32 routes (no default route anywhere):
//
//	node            hop                      router E (eBGP, AS 64512)
//	lo 203.0.113.11 192.0.2.1 / 198.51.100.1 lo 203.0.113.1, eth0 198.51.100.2
//	eth0 192.0.2.11                          router I (iBGP, AS 64513)
//	                198.51.100.17            lo 203.0.113.2, eth0 198.51.100.18
//
// The node peers from its loopback (local_address) with both routers'
// loopbacks: two IP hops, so the eBGP session needs ebgp_multihop = 2 (TTL
// 1 dies at the hop). Two VIPs: mhVIP1 with the peers' attributes (eBGP
// med 50; iBGP med 60, local_pref 200), mhVIP2 with its own (med 7,
// local_pref 300), which replace the peers'.
var (
	mhNodeLo   = netip.MustParseAddr("203.0.113.11")
	mhNodeIP   = netip.MustParseAddr("192.0.2.11")
	mhHopNode  = netip.MustParseAddr("192.0.2.1")
	mhHopE     = netip.MustParseAddr("198.51.100.1")
	mhEIP      = netip.MustParseAddr("198.51.100.2")
	mhELo      = netip.MustParseAddr("203.0.113.1")
	mhHopI     = netip.MustParseAddr("198.51.100.17")
	mhIIP      = netip.MustParseAddr("198.51.100.18")
	mhILo      = netip.MustParseAddr("203.0.113.2")
	mhVIP1     = netip.MustParseAddr("203.0.113.10")
	mhVIP2     = netip.MustParseAddr("203.0.113.20")
	mhASNE     = 64512
	mhASNNode  = 64513 // and router I's
	mhWantE    = map[netip.Addr]mhAttrs{mhVIP1: {med: 50}, mhVIP2: {med: 7}}
	mhWantI    = map[netip.Addr]mhAttrs{mhVIP1: {med: 60, localPref: 200}, mhVIP2: {med: 7, localPref: 300}}
	mhEstabMax = 20 * time.Second
)

// mhAttrs is what a router shows of a VIP path: MED, LOCAL_PREF (0 when
// not compared: eBGP) and next hop.
type mhAttrs struct {
	med, localPref int64
	nextHop        netip.Addr
}

// mhRouter is one router daemon of the multihop lab.
type mhRouter interface {
	// established reports whether the session with the node is up.
	established() (bool, string)
	// path returns the router's path for vip.
	path(vip netip.Addr) (mhAttrs, bool, error)
	dump() string
}

// mhLab is the namespaces of one multihop test.
type mhLab struct {
	l         *lab
	n         *node
	hop, e, i string
	routerE   mhRouter
	routerI   mhRouter
}

// newMultihopLab builds the namespaces, links and static routes.
func newMultihopLab(t *testing.T, tag string) *mhLab {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := &mhLab{l: &lab{t: t, bin: binaries(t), self: self, dir: t.TempDir()}}
	m.n = &node{name: "n1", ns: netnstest.NewNS(t, netnstest.Name("bgpl", tag+"n")), ip: mhNodeIP, dir: filepath.Join(m.l.dir, "n1")}
	if err := os.MkdirAll(m.n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m.l.nodes = []*node{m.n}
	m.hop = netnstest.NewNS(t, netnstest.Name("bgpl", tag+"h"))
	m.e = netnstest.NewNS(t, netnstest.Name("bgpl", tag+"e"))
	m.i = netnstest.NewNS(t, netnstest.Name("bgpl", tag+"i"))
	netnstest.MustRun(t, "ip", "netns", "exec", m.hop, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	netnstest.Veth(t, m.n.ns, "eth0", []string{mhNodeIP.String() + "/24"}, m.hop, "eth-n", []string{mhHopNode.String() + "/24"})
	netnstest.Veth(t, m.hop, "eth-e", []string{mhHopE.String() + "/28"}, m.e, "eth0", []string{mhEIP.String() + "/28"})
	netnstest.Veth(t, m.hop, "eth-i", []string{mhHopI.String() + "/28"}, m.i, "eth0", []string{mhIIP.String() + "/28"})
	for _, lo := range []struct {
		ns   string
		addr netip.Addr
	}{{m.n.ns, mhNodeLo}, {m.e, mhELo}, {m.i, mhILo}} {
		netnstest.MustRun(t, "ip", "-n", lo.ns, "addr", "add", lo.addr.String()+"/32", "dev", "lo")
	}
	route := func(ns string, dst, via netip.Addr) {
		netnstest.MustRun(t, "ip", "-n", ns, "route", "add", dst.String()+"/32", "via", via.String())
	}
	route(m.n.ns, mhELo, mhHopNode)
	route(m.n.ns, mhILo, mhHopNode)
	route(m.hop, mhNodeLo, mhNodeIP)
	route(m.hop, mhELo, mhEIP)
	route(m.hop, mhILo, mhIIP)
	route(m.e, mhNodeLo, mhHopE)
	route(m.i, mhNodeLo, mhHopI)
	return m
}

// vipdConfig is the node's configuration; eHops is the eBGP peer's
// ebgp_multihop or ttl_security_hops line.
func (m *mhLab) vipdConfig(eHops string) string {
	return fmt.Sprintf(`node_name = "n1"
state_dir = %q
log_level = "debug"

[api]
socket = %q

[cluster]
bind_address = %q
failure_detection = "fast"

[[vip]]
name = "v1"
address = %q
mode = "bgp"

[[vip]]
name = "v2"
address = %q
mode = "bgp"
med = 7
local_pref = 300

[bgp]
asn = %d
router_id = %q
graceful_shutdown = "0s"

[[bgp.peer]]
address = %q
asn = %d
local_address = %q
%s
med = 50
hold_time = "3s"
keepalive = "1s"

[[bgp.peer]]
address = %q
asn = %d
local_address = %q
med = 60
local_pref = 200
hold_time = "3s"
keepalive = "1s"
`, filepath.Join(m.n.dir, "state"), m.n.socket(), mhNodeIP, mhVIP1, mhVIP2, mhASNNode, mhNodeIP,
		mhELo, mhASNE, mhNodeLo, eHops, mhILo, mhASNNode, mhNodeLo)
}

// startVipd writes the configuration with eHops and starts vipd, waiting
// (bounded) for its API.
func (m *mhLab) startVipd(eHops string) {
	t := m.l.t
	t.Helper()
	path := filepath.Join(m.n.dir, "vipd.toml")
	if err := os.WriteFile(path, []byte(m.vipdConfig(eHops)), 0o644); err != nil {
		t.Fatal(err)
	}
	m.n.vipd = startProc(t, m.n.ns, "vipd n1", filepath.Join(m.n.dir, "vipd.log"), nil, nil, filepath.Join(m.l.bin, "vipd"), "--config", path)
	netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "vipd API", func() (bool, string) {
		if !m.n.vipd.running() {
			t.Fatalf("vipd exited: %v", m.n.vipd.err)
		}
		_, err := m.l.status(m.n)
		return err == nil, fmt.Sprint(err)
	})
}

// reload rewrites the configuration with eHops and sends SIGHUP.
func (m *mhLab) reload(eHops string) {
	t := m.l.t
	t.Helper()
	if err := os.WriteFile(filepath.Join(m.n.dir, "vipd.toml"), []byte(m.vipdConfig(eHops)), 0o644); err != nil {
		t.Fatal(err)
	}
	m.n.vipd.signal(t, syscall.SIGHUP)
}

// peerState returns the session state vipd reports for peer.
func (m *mhLab) peerState(peer netip.Addr) (string, error) {
	st, err := m.l.status(m.n)
	if err != nil {
		return "", err
	}
	for _, p := range st.BGPPeers {
		if p.Address == peer.String() {
			return p.State, nil
		}
	}
	return "", fmt.Errorf("no peer %s in status: %+v", peer, st.BGPPeers)
}

// waitPaths waits until r holds both VIPs with the attributes of want
// and the node's loopback as next hop.
func (m *mhLab) waitPaths(name string, r mhRouter, want map[netip.Addr]mhAttrs) {
	t := m.l.t
	t.Helper()
	for _, vip := range []netip.Addr{mhVIP1, mhVIP2} {
		w := want[vip]
		w.nextHop = mhNodeLo
		netnstest.Eventually(t, 15*time.Second, 100*time.Millisecond, fmt.Sprintf("%s: path for %s", name, vip), func() (bool, string) {
			got, ok, err := r.path(vip)
			switch {
			case err != nil:
				return false, err.Error()
			case !ok:
				return false, "no path"
			}
			return got == w, fmt.Sprintf("got %+v, want %+v", got, w)
		})
		t.Logf("%s: %s med %d local_pref %d via %s", name, vip, w.med, w.localPref, w.nextHop)
	}
}

// count adds, in namespace ns, an nft table name counting the packets
// that match (an nft expression) before routing (prerouting, -300).
func (m *mhLab) count(ns, name, match string) {
	t := m.l.t
	t.Helper()
	rule := fmt.Sprintf("add table ip %s { chain pre { type filter hook prerouting priority -300; policy accept; %s counter; }; }", name, match)
	netnstest.MustRun(t, "ip", "netns", "exec", ns, "nft", rule)
}

// packets returns the count of table name in ns.
func (m *mhLab) packets(ns, name string) (int, error) {
	out, err := netnstest.Run("ip", "netns", "exec", ns, "nft", "list", "table", "ip", name)
	if err != nil {
		return 0, err
	}
	i := strings.Index(out, "counter packets ")
	if i < 0 {
		return 0, fmt.Errorf("no counter in %q", out)
	}
	f := strings.Fields(out[i+len("counter packets "):])
	return strconv.Atoi(f[0])
}

// eBGPStaysDown fails t if the eBGP session comes up, in the router's or
// vipd's view, within d (the iBGP session, the control, must come up),
// and returns how many packets the counter table name in ns saw by then.
func (m *mhLab) eBGPStaysDown(d time.Duration, why, ns, name string) int {
	t := m.l.t
	t.Helper()
	netnstest.Eventually(t, mhEstabMax, 100*time.Millisecond, "ibgp session (the control)", func() (bool, string) {
		return m.routerI.established()
	})
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if up, _ := m.routerE.established(); up {
			t.Fatalf("eBGP session up with %s:\n%s", why, m.routerE.dump())
		}
		if st, err := m.peerState(mhELo); err == nil && strings.EqualFold(st, "established") {
			t.Fatalf("vipd reports the eBGP session established with %s", why)
		}
	}
	n, err := m.packets(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runMultihop is the multihop lab against one router kind:
//
//   - eBGP over a routed hop, loopback to loopback: without
//     ebgp_multihop the session stays down for 8 s (the iBGP one, the
//     control, comes up) and the hop sees vipd's segments arrive with TTL
//     1 (an nft counter), which it drops; a reload to ebgp_multihop = 2
//     brings it up. Then each router has both VIPs
//     with the node's loopback as next hop, the eBGP router with the
//     peer's MED (50) on mhVIP1 and the VIP's (7) on mhVIP2, the iBGP
//     router MED 60 and LOCAL_PREF 200 (the peer's) on mhVIP1, MED 7 and
//     LOCAL_PREF 300 (the VIP's) on mhVIP2;
//   - TTL security (GTSM): the eBGP router sends TTL 255 (it is set for two
//     hops); with ttl_security_hops = 1 the node's kernel drops its
//     segments, which arrive with TTL 254 (an nft counter sees them), and
//     the session stays down for 10 s; a reload to ttl_security_hops = 2
//     brings it up with the same paths.
//
// start starts the routers: multihop for the eBGP router's multihop
// configuration, false for its TTL security one.
func runMultihop(t *testing.T, tag string, start func(m *mhLab, multihop bool)) {
	t.Run("multihop", func(t *testing.T) {
		m := newMultihopLab(t, tag+"m")
		start(m, true)
		// Without ebgp_multihop vipd's segments leave with TTL 1 and
		// die at the hop.
		m.count(m.hop, "vt_ttl1", fmt.Sprintf("ip daddr %s tcp dport 179 ip ttl 1", mhELo))
		m.startVipd("")
		if n := m.eBGPStaysDown(8*time.Second, "no ebgp_multihop and the router two hops away", m.hop, "vt_ttl1"); n == 0 {
			t.Fatal("no segment of vipd reached the hop with TTL 1: the session is down for another reason")
		} else {
			t.Logf("no ebgp_multihop: session down for 8s; the hop dropped %d of vipd's segments (TTL 1)", n)
		}
		m.reload("ebgp_multihop = 2")
		m.waitEstablished()
		m.waitPaths("ebgp router", m.routerE, mhWantE)
		m.waitPaths("ibgp router", m.routerI, mhWantI)
		m.stop()
	})
	t.Run("ttl-security", func(t *testing.T) {
		m := newMultihopLab(t, tag+"t")
		start(m, false)
		m.count(m.n.ns, "vt_ttl254", fmt.Sprintf("ip saddr %s tcp sport 179 ip ttl 254", mhELo))
		m.startVipd("ttl_security_hops = 1")
		// Long enough for two of vipd's connect attempts (every 5 s).
		if n := m.eBGPStaysDown(10*time.Second, "ttl_security_hops = 1 and the router two hops away", m.n.ns, "vt_ttl254"); n == 0 {
			t.Fatal("no segment of the router arrived with TTL 254: the refusal is not GTSM's")
		} else {
			t.Logf("ttl_security_hops = 1: session down for 10s; %d segments of the router arrived with TTL 254 and were dropped", n)
		}
		m.reload("ttl_security_hops = 2")
		m.waitEstablished()
		m.waitPaths("ebgp router", m.routerE, mhWantE)
		m.stop()
	})
}

// waitEstablished waits until both routers and vipd report both sessions
// up.
func (m *mhLab) waitEstablished() {
	t := m.l.t
	t.Helper()
	for _, r := range []struct {
		name string
		r    mhRouter
		addr netip.Addr
	}{{"ebgp router", m.routerE, mhELo}, {"ibgp router", m.routerI, mhILo}} {
		netnstest.Eventually(t, mhEstabMax, 100*time.Millisecond, r.name+" session", func() (bool, string) {
			return r.r.established()
		})
		netnstest.Eventually(t, 10*time.Second, 100*time.Millisecond, "vipd's session with the "+r.name, func() (bool, string) {
			st, err := m.peerState(r.addr)
			if err != nil {
				return false, err.Error()
			}
			return strings.EqualFold(st, "established"), st
		})
	}
}

// stop stops vipd with SIGTERM, bounded.
func (m *mhLab) stop() {
	t := m.l.t
	t.Helper()
	m.n.vipd.signal(t, syscall.SIGTERM)
	if err := m.n.vipd.wait(20 * time.Second); err != nil && m.n.vipd.running() {
		t.Fatalf("SIGTERM: %v", err)
	}
}

// dumpOnFailure logs vipd's log and the routers' state when t failed.
func (m *mhLab) dumpOnFailure() {
	t := m.l.t
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		b, _ := os.ReadFile(filepath.Join(m.n.dir, "vipd.log"))
		t.Logf("==== vipd log ====\n%s", b)
		t.Logf("==== ebgp router ====\n%s", m.routerE.dump())
		t.Logf("==== ibgp router ====\n%s", m.routerI.dump())
	})
}

// TestFRRMultihop runs the multihop lab against FRR (router E:
// `ebgp-multihop 2`, or `ttl-security hops 2`; both `update-source` their
// loopback).
func TestFRRMultihop(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "/usr/lib/frr/bgpd", "/usr/lib/frr/zebra", "vtysh", "nft")
	runMultihop(t, "f", func(m *mhLab, multihop bool) {
		reach := "neighbor %[1]s ebgp-multihop 2"
		if !multihop {
			reach = "neighbor %[1]s ttl-security hops 2"
		}
		e := routers.StartFRR(m.l.t, m.e, frrMultihopConf(mhASNE, mhELo, fmt.Sprintf(reach, mhNodeLo)))
		i := routers.StartFRR(m.l.t, m.i, frrMultihopConf(mhASNNode, mhILo, ""))
		m.routerE, m.routerI = frrMH{e}, frrMH{i}
		m.dumpOnFailure()
	})
}

// TestBIRDMultihop runs the multihop lab against BIRD (router E:
// `multihop 2`, or `multihop 2; ttl security on`, which BIRD allows
// together: the minimum TTL is then 256 - 2).
func TestBIRDMultihop(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc", "nft")
	runMultihop(t, "b", func(m *mhLab, multihop bool) {
		reach := "multihop 2;"
		if !multihop {
			reach = "multihop 2; ttl security on;"
		}
		e := routers.StartBIRD(m.l.t, m.e, birdMultihopConf(mhASNE, mhELo, mhHopE, reach))
		i := routers.StartBIRD(m.l.t, m.i, birdMultihopConf(mhASNNode, mhILo, mhHopI, ""))
		m.routerE, m.routerI = birdMH{e, false}, birdMH{i, true}
		m.dumpOnFailure()
	})
}

// frrMultihopConf is a router with its session from lo to the node's
// loopback; extra is one more neighbor line (multihop or GTSM).
func frrMultihopConf(asn int, lo netip.Addr, extra string) string {
	return fmt.Sprintf(`
hostname r
router bgp %[1]d
 bgp router-id %[2]s
 no bgp ebgp-requires-policy
 neighbor %[3]s remote-as %[4]d
 neighbor %[3]s update-source %[2]s
 neighbor %[3]s timers 1 3
 neighbor %[3]s timers connect 1
 %[5]s
exit
`, asn, lo, mhNodeLo, mhASNNode, extra)
}

// frrMH reads FRR's table.
type frrMH struct{ f *routers.FRR }

func (r frrMH) established() (bool, string) { return r.f.Established(mhNodeLo) }

func (r frrMH) dump() string {
	s, _ := r.f.Cmd("show bgp neighbors")
	p, _ := r.f.Cmd("show bgp ipv4 unicast")
	return s + "\n" + p
}

// path reads `show bgp ipv4 unicast VIP json`: "metric" (MED), "locPrf" (LOCAL_PREF
// as received on iBGP; FRR prints its default for eBGP paths too, so it
// is read for iBGP only) and the next hop.
func (r frrMH) path(vip netip.Addr) (mhAttrs, bool, error) {
	out, err := r.f.Cmd("show bgp ipv4 unicast " + vip.String() + "/32 json")
	if err != nil {
		return mhAttrs{}, false, err
	}
	return parseFRRPath(out)
}

func parseFRRPath(out string) (mhAttrs, bool, error) {
	var v struct {
		Paths []struct {
			Med      *int64 `json:"metric"`
			LocPrf   *int64 `json:"locPrf"`
			Nexthops []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
			Peer struct {
				Type string `json:"type"`
			} `json:"peer"`
		} `json:"paths"`
	}
	if s := strings.TrimSpace(out); s == "" || s == "{}" {
		return mhAttrs{}, false, nil
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return mhAttrs{}, false, fmt.Errorf("parse %q: %w", out, err)
	}
	if len(v.Paths) != 1 {
		return mhAttrs{}, false, fmt.Errorf("%d paths, want 1: %s", len(v.Paths), out)
	}
	p := v.Paths[0]
	a := mhAttrs{med: -1}
	if p.Med != nil {
		a.med = *p.Med
	}
	if p.LocPrf != nil && p.Peer.Type == "internal" {
		a.localPref = *p.LocPrf
	}
	if len(p.Nexthops) > 0 {
		a.nextHop, _ = netip.ParseAddr(p.Nexthops[0].IP)
	}
	return a, true, nil
}

// birdMultihopConf is a router with its session from lo to the node's
// loopback, the node's loopback resolved through a static route (BIRD
// resolves a multihop or iBGP next hop recursively); extra is added to
// the protocol (multihop, GTSM).
func birdMultihopConf(asn int, lo, gw netip.Addr, extra string) string {
	return fmt.Sprintf(`
router id %[2]s;
protocol device { scan time 1; }
protocol static loopbacks { ipv4; route %[3]s/32 via %[4]s; }
protocol bgp node {
	local %[2]s as %[1]d;
	neighbor %[3]s as %[5]d;
	%[6]s
	connect retry time 1;
	error wait time 1, 5;
	hold time 3;
	ipv4 { import all; export none; };
}
`, asn, lo, mhNodeLo, gw, mhASNNode, extra)
}

// birdMH reads BIRD's table; ibgp is whether its session with the node
// is iBGP.
type birdMH struct {
	b    *routers.BIRD
	ibgp bool
}

func (r birdMH) established() (bool, string) { return r.b.Established("node") }

func (r birdMH) dump() string {
	s, _ := r.b.Cmd("show protocols all node")
	p, _ := r.b.Cmd("show route all")
	return s + "\n" + p
}

// path reads `birdc show route VIP/32 all`: BGP.med, BGP.local_pref (as
// received on iBGP; BIRD sets its default on eBGP paths, so it is read for
// iBGP only) and the BGP.next_hop.
func (r birdMH) path(vip netip.Addr) (mhAttrs, bool, error) {
	out, err := r.b.Cmd("show route " + vip.String() + "/32 all")
	if strings.Contains(out, "Network not found") {
		return mhAttrs{}, false, nil
	}
	if err != nil {
		return mhAttrs{}, false, err
	}
	return parseBIRDPath(out, r.ibgp)
}

func parseBIRDPath(out string, ibgp bool) (mhAttrs, bool, error) {
	a := mhAttrs{med: -1}
	found := false
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		var err error
		switch k {
		case "BGP.med":
			found = true
			a.med, err = strconv.ParseInt(v, 10, 64)
		case "BGP.local_pref":
			if ibgp {
				a.localPref, err = strconv.ParseInt(v, 10, 64)
			}
		case "BGP.next_hop":
			found = true
			a.nextHop, err = netip.ParseAddr(strings.Fields(v)[0])
		}
		if err != nil {
			return mhAttrs{}, false, fmt.Errorf("bird %s %q: %w", k, v, err)
		}
	}
	return a, found, nil
}

// TestCheckMultihopConfig runs the real `vipd --check` on the multihop and
// path attribute keys: what the protocol or GoBGP refuses is one
// PATH:LINE:COL line at its key, and the lab's own configuration passes.
// It needs no root.
func TestCheckMultihopConfig(t *testing.T) {
	bin := binaries(t)
	dir := t.TempDir()
	bad := `node_name = "n1"
state_dir = "` + dir + `/state"
[cluster]
bind_address = "192.0.2.11"
[[vip]]
name = "v1"
address = "203.0.113.10"
mode = "bgp"
local_pref = 300
[bgp]
asn = 64513
[[bgp.peer]]
address = "203.0.113.1"
asn = 64512
ebgp_multihop = 2
ttl_security_hops = 2
local_pref = 200
`
	path := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, "vipd"), "--check", "--config", path).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("vipd --check: err %v, want exit status 1; output:\n%s", err, out)
	}
	want := []string{
		"9:1: bgp: vip 203.0.113.10: local_pref 300: no iBGP peer",
		"16:1: bgp: peer 203.0.113.1: ttl_security_hops and ebgp_multihop exclude each other",
		"17:1: bgp: peer 203.0.113.1: local_pref 200: LOCAL_PREF is only sent to iBGP peers",
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, path+":") {
			lines = append(lines, strings.TrimPrefix(l, path+":"))
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d %s:LINE:COL lines, want %d; output:\n%s", len(lines), path, len(want), out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: got %q, want prefix %q", i, lines[i], w)
		}
	}

	m := &mhLab{n: &node{name: "n1", dir: dir}}
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte(m.vipdConfig("ttl_security_hops = 2")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin, "vipd"), "--check", "--config", good).CombinedOutput(); err != nil {
		t.Fatalf("vipd --check on the lab's configuration: %v\n%s", err, out)
	}
}
