package bgplab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// The policy lab: one vipd node peers with two routers of different AS on
// one bridge. Router A (BIRD, AS 64512) sends a full-table-like load:
// 10,000 IPv6 /64s, 256 IPv4 /32s, and routes for the node's own VIP
// prefixes. Router B (FRR, AS 64514) only listens.
var (
	polA4    = netip.MustParseAddr("192.0.2.1")
	polA6    = netip.MustParseAddr("2001:db8:1::1")
	polB4    = netip.MustParseAddr("192.0.2.2")
	polB6    = netip.MustParseAddr("2001:db8:1::2")
	polNode4 = netip.MustParseAddr("192.0.2.11")
	polNode6 = netip.MustParseAddr("2001:db8:1::11")
	polVIP6  = netip.MustParseAddr("2001:db8:100::10")
)

const (
	polRoutes6 = 10000
	polRoutes4 = 256
	polASNB    = 64514
	// rssLimit is the bound on vipd's memory under the load.
	rssLimit = 60 << 20
)

// polBIRDConf is router A: static routes exported to the node, including
// the node's VIPs.
func polBIRDConf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "router id %s;\nprotocol device { scan time 1; }\n", polA4)
	b.WriteString("protocol static s4 {\n\tipv4;\n")
	fmt.Fprintf(&b, "\troute %s/32 blackhole;\n", vip)
	for i := 0; i < polRoutes4; i++ {
		fmt.Fprintf(&b, "\troute 198.51.100.%d/32 blackhole;\n", i)
	}
	b.WriteString("}\nprotocol static s6 {\n\tipv6;\n")
	fmt.Fprintf(&b, "\troute %s/128 blackhole;\n", polVIP6)
	for i := 0; i < polRoutes6; i++ {
		fmt.Fprintf(&b, "\troute 2001:db8:8000:%x::/64 blackhole;\n", i)
	}
	b.WriteString("}\n")
	for _, s := range []struct {
		name        string
		local, peer netip.Addr
		fam         string
	}{{"node4", polA4, polNode4, "ipv4"}, {"node6", polA6, polNode6, "ipv6"}} {
		fmt.Fprintf(&b, `protocol bgp %s {
	local %s as %d;
	neighbor %s as %d;
	passive on;
	hold time 3;
	error wait time 1, 5;
	%s { import all; export all; };
}
`, s.name, s.local, routerASN, s.peer, nodeASN, s.fam)
	}
	return b.String()
}

// polFRRConf is router B: it accepts whatever the node sends.
var polFRRConf = fmt.Sprintf(`
hostname b
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor %s remote-as %d
 neighbor %s passive
 neighbor %s timers 1 3
 neighbor %s remote-as %d
 neighbor %s passive
 neighbor %s timers 1 3
 address-family ipv4 unicast
  neighbor %s activate
 exit-address-family
 address-family ipv6 unicast
  neighbor %s activate
 exit-address-family
exit
`, polASNB, polB4, polNode4, nodeASN, polNode4, polNode4, polNode6, nodeASN, polNode6, polNode6, polNode4, polNode6)

// polVipdConfig is the node's configuration; maxPrefixes "" keeps the
// default for router A's sessions.
func polVipdConfig(n *node, maxPrefixes string) string {
	peer := func(a netip.Addr, asn int, extra string) string {
		return fmt.Sprintf("\n[[bgp.peer]]\naddress = %q\nasn = %d\nhold_time = \"3s\"\nkeepalive = \"1s\"\n%s", a, asn, extra)
	}
	limit := ""
	if maxPrefixes != "" {
		limit = "max_prefixes = " + maxPrefixes + "\n"
	}
	return fmt.Sprintf(`node_name = %q
state_dir = %q
log_level = "info"

[api]
socket = %q

[cluster]
bind_address = %q
failure_detection = "fast"

[[vip]]
name = "v4"
address = %q
mode = "bgp"
interface = "lo"

[[vip]]
name = "v6"
address = %q
mode = "bgp"
interface = "lo"

[bgp]
asn = %d
router_id = %q
graceful_shutdown = "0s"
`, n.name, filepath.Join(n.dir, "state"), n.socket(), n.ip, vip, polVIP6, nodeASN, n.ip) +
		peer(polA4, routerASN, limit) + peer(polA6, routerASN, limit) + peer(polB4, polASNB, "") + peer(polB6, polASNB, "")
}

// rssOf returns the resident set size of pid.
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// frrTable returns the prefixes of FRR's table for afi ("ipv4", "ipv6")
// with their next hops.
func frrTable(f *routers.FRR, afi string) (map[string][]string, error) {
	out, err := f.Cmd("show bgp " + afi + " unicast json")
	if err != nil {
		return nil, err
	}
	var v struct {
		Routes map[string][]struct {
			Nexthops []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("parse %q: %w", out, err)
	}
	got := map[string][]string{}
	for p, paths := range v.Routes {
		for _, path := range paths {
			for _, nh := range path.Nexthops {
				got[p] = append(got[p], nh.IP)
			}
		}
	}
	return got, nil
}

// TestPolicy proves the locked-down routing policy against real routers:
// router A sends 10,000 routes and routes for the node's own VIPs; the
// node's vipd stays small, keeps announcing its VIPs, and router B (another
// AS) receives exactly the VIP prefixes from it, nothing of A's, also when
// the node withdraws (A's copy of the VIP prefix is not passed on). With a
// prefix limit above A's table the sessions with A stay up; with the
// default limit (100) they are shut down by it (CEASE, maximum number of
// prefixes), GoBGP keeps them down (no reconnect loop), and B is
// unaffected.
func TestPolicy(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc", "/usr/lib/frr/bgpd", "/usr/lib/frr/zebra", "vtysh")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{t: t, bin: binaries(t), self: self, dir: t.TempDir()}
	a := netnstest.NewNS(t, netnstest.Name("bgpl", "pa"))
	bns := netnstest.NewNS(t, netnstest.Name("bgpl", "pb"))
	n := &node{name: "n1", ns: netnstest.NewNS(t, netnstest.Name("bgpl", "pn")), ip: polNode4, dir: filepath.Join(l.dir, "n1")}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l.nodes = []*node{n}
	netnstest.MustRun(t, "ip", "-n", a, "link", "add", "br0", "type", "bridge")
	netnstest.MustRun(t, "ip", "-n", a, "addr", "add", polA4.String()+"/24", "dev", "br0")
	netnstest.MustRun(t, "ip", "-n", a, "addr", "add", polA6.String()+"/64", "dev", "br0", "nodad")
	netnstest.MustRun(t, "ip", "-n", a, "link", "set", "br0", "up")
	for _, h := range []struct {
		ns, port string
		addrs    []string
	}{{n.ns, "p-n1", []string{polNode4.String() + "/24", polNode6.String() + "/64"}}, {bns, "p-b", []string{polB4.String() + "/24", polB6.String() + "/64"}}} {
		netnstest.MustRun(t, "ip", "-n", a, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		netnstest.MustRun(t, "ip", "-n", a, "link", "set", h.port, "master", "br0", "up")
		for _, ad := range h.addrs {
			args := []string{"-n", h.ns, "addr", "add", ad, "dev", "eth0"}
			if strings.Contains(ad, ":") {
				args = append(args, "nodad")
			}
			netnstest.MustRun(t, "ip", args...)
		}
		netnstest.MustRun(t, "ip", "-n", h.ns, "link", "set", "eth0", "up")
	}
	birdA := routers.StartBIRD(t, a, polBIRDConf())
	frrB := routers.StartFRR(t, bns, polFRRConf)
	l.setRouter(router{Router: frrB, kind: "frr (router B)", dump: func() string {
		s, _ := frrB.Cmd("show bgp summary")
		p, _ := birdA.Cmd("show protocols all")
		return s + "\n==== bird (router A) ====\n" + p
	}})

	start := func(maxPrefixes string) {
		t.Helper()
		path := filepath.Join(n.dir, "vipd.toml")
		if err := os.WriteFile(path, []byte(polVipdConfig(n, maxPrefixes)), 0o644); err != nil {
			t.Fatal(err)
		}
		n.vipd = startProc(t, n.ns, "vipd n1", filepath.Join(n.dir, "vipd.log"), nil, nil, filepath.Join(l.bin, "vipd"), "--config", path)
		netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "vipd API", func() (bool, string) {
			if !n.vipd.running() {
				t.Fatalf("vipd exited: %v", n.vipd.err)
			}
			_, err := l.status(n)
			return err == nil, fmt.Sprint(err)
		})
	}
	peers := func() map[string]bgpPeer {
		st, err := l.status(n)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bgpPeer{}
		for _, p := range st.BGPPeers {
			m[p.Address] = p
		}
		return m
	}
	// onlyVIPs: B's tables hold exactly the node's two VIP prefixes, via
	// the node (none of A's routes, not A's copy of the VIP).
	onlyVIPs := func() (bool, string) {
		t4, err := frrTable(frrB, "ipv4")
		if err != nil {
			return false, err.Error()
		}
		t6, err := frrTable(frrB, "ipv6")
		if err != nil {
			return false, err.Error()
		}
		ok := len(t4) == 1 && slices.Equal(t4[vipPrefix.String()], []string{polNode4.String()}) &&
			len(t6) == 1 && len(t6[polVIP6.String()+"/128"]) == 1
		return ok, fmt.Sprintf("router B ipv4 %v ipv6 %v", t4, t6)
	}
	maxRSS := func(d time.Duration) int64 {
		var m int64
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			r, err := rssOf(n.vipd.cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			m = max(m, r)
		}
		return m
	}

	// Phase 1: max_prefixes = 20000, above what A sends.
	start("20000")
	netnstest.Eventually(t, 60*time.Second, 200*time.Millisecond, "all four sessions established, A's table received", func() (bool, string) {
		ps := peers()
		for _, a := range []netip.Addr{polA4, polA6, polB4, polB6} {
			if p := ps[a.String()]; p.State != "established" {
				return false, fmt.Sprintf("%s not established: %+v", a, ps)
			}
		}
		return ps[polA6.String()].Received == polRoutes6+1 && ps[polA4.String()].Received == polRoutes4+1,
			fmt.Sprintf("received from A: v6 %d v4 %d", ps[polA6.String()].Received, ps[polA4.String()].Received)
	})
	netnstest.Eventually(t, 20*time.Second, 200*time.Millisecond, "router B has exactly the VIPs", onlyVIPs)
	rss := maxRSS(10 * time.Second)
	t.Logf("max_prefixes 20000: sessions with A up, %d + %d routes received; vipd RSS %.1f MiB (max over 10s)",
		polRoutes6+1, polRoutes4+1, float64(rss)/(1<<20))
	if rss > rssLimit {
		t.Errorf("vipd RSS %.1f MiB with A's routes, want under 60 MiB", float64(rss)/(1<<20))
	}
	for _, a := range []netip.Addr{polA4, polA6} {
		if p := peers()[a.String()]; p.State != "established" {
			t.Errorf("session with A %s not established after 10s: %+v", a, p)
		}
	}
	st, _ := l.status(n)
	for _, v := range st.VIPs {
		if !v.Held {
			t.Errorf("VIP %s not held with A announcing its prefix: %+v", v.Name, v)
		}
	}
	// Withdraw: B loses the VIPs although A still sends routes for them.
	if _, err := l.vipctl(n, 20*time.Second, "withdraw", "--force"); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 10*time.Second, 200*time.Millisecond, "router B has nothing after the withdraw", func() (bool, string) {
		t4, err4 := frrTable(frrB, "ipv4")
		t6, err6 := frrTable(frrB, "ipv6")
		return err4 == nil && err6 == nil && len(t4) == 0 && len(t6) == 0, fmt.Sprintf("ipv4 %v ipv6 %v (%v %v)", t4, t6, err4, err6)
	})
	if _, err := l.vipctl(n, 10*time.Second, "restore"); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 20*time.Second, 200*time.Millisecond, "router B has the VIPs again", onlyVIPs)

	// Phase 2: the default limit (100): A's sessions are closed by it.
	n.vipd.signal(t, syscall.SIGTERM)
	if err := n.vipd.wait(30 * time.Second); err != nil {
		t.Fatalf("vipd after SIGTERM: %v", err)
	}
	start("")
	netnstest.Eventually(t, 30*time.Second, 200*time.Millisecond, "vipd closes both sessions with A at the prefix limit", func() (bool, string) {
		v4, err4 := logged(n, "prefix limit reached", "Key=192.0.2.1 ")
		v6, err6 := logged(n, "prefix limit reached", "Key=2001:db8:1::1 ")
		if err4 != nil || err6 != nil {
			return false, fmt.Sprint(err4, err6)
		}
		ps := peers()
		return v4 && v6 && ps[polA4.String()].State != "established" && ps[polA6.String()].State != "established",
			fmt.Sprintf("peers %+v", ps)
	})
	for _, p := range []string{"node4", "node6"} {
		out, _ := birdA.Cmd("show protocols all " + p)
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "Last error") {
				t.Logf("router A, session %s: %s", p, strings.TrimSpace(line))
			}
		}
	}
	rss = maxRSS(15 * time.Second)
	ps := peers()
	t.Logf("max_prefixes default: A's sessions closed by the limit and kept down (v6 %s, v4 %s); vipd RSS %.1f MiB (max over 15s)",
		ps[polA6.String()].State, ps[polA4.String()].State, float64(rss)/(1<<20))
	for _, a := range []netip.Addr{polA4, polA6} {
		if p := ps[a.String()]; p.State == "established" {
			t.Errorf("session with A %s established again after the prefix limit: %+v", a, p)
		}
	}
	if rss > rssLimit {
		t.Errorf("vipd RSS %.1f MiB, want under 60 MiB", float64(rss)/(1<<20))
	}
	if ok, d := onlyVIPs(); !ok {
		t.Errorf("router B: %s", d)
	}
	for _, a := range []netip.Addr{polB4, polB6} {
		if p := ps[a.String()]; p.State != "established" {
			t.Errorf("session with B %s not established: %+v", a, p)
		}
	}
}
