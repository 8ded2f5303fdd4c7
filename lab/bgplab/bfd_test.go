package bgplab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// frrBFDDConf is bfdd's profile for the nodes: 100ms x 3 like theirs.
const frrBFDDConf = `
bfd
 profile vipd
  receive-interval 100
  transmit-interval 100
  detect-multiplier 3
 exit
exit
`

// frrBFDConf is frrConf with BFD on the nodes' sessions and one path per
// prefix (maximum-paths 1): the router forwards to one node and keeps the
// others' paths as alternatives.
var frrBFDConf = strings.NewReplacer(
	" neighbor NODES password vipd-bgplab-secret\n", " neighbor NODES password vipd-bgplab-secret\n neighbor NODES bfd profile vipd\n",
	"  maximum-paths 8\n", "  maximum-paths 1\n",
).Replace(frrConf)

// birdBFDConf is birdConf with protocol bfd, bfd on the nodes' sessions and
// the best path alone in the kernel (no merge paths).
var birdBFDConf = strings.NewReplacer(
	"	merge paths yes limit 8;\n", "",
	"	hold time 3;\n", "	hold time 3;\n	bfd yes;\n",
	"protocol device { scan time 1; }\n", "protocol device { scan time 1; }\nprotocol bfd {\n	interface \"br0\" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; };\n}\n",
).Replace(birdConf)

// bfdRouter is what the BFD scenario reads from the router about the BFD
// session with a node.
type bfdRouter struct {
	// up reports whether the session is Up.
	up func(n *node) (bool, string)
	// failed reports whether the session went down by detection timeout.
	failed func(n *node) (bool, string)
	// adminDown reports whether the router saw the node's AdminDown (as
	// far as it shows) and BGP end by the node's CEASE.
	adminDown func(n *node) (bool, string)
	// lastReset says why the router's BGP session with n last ended.
	lastReset func(n *node) string
}

func TestFRRBFD(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "/usr/lib/frr/bgpd", "/usr/lib/frr/bfdd", "/usr/lib/frr/zebra", "vtysh", "nft")
	if !strings.Contains(frrBFDConf, "bfd profile vipd") || !strings.Contains(frrBFDConf, "maximum-paths 1") {
		t.Fatalf("frrBFDConf did not get its BFD lines:\n%s", frrBFDConf)
	}
	l := newLab(t, "fb")
	l.bfd = true
	f := routers.StartFRRConfig(t, l.routerNS, routers.FRRConfig{BGPD: frrBFDConf, BFDD: frrBFDDConf})
	l.setRouter(router{
		Router:      f,
		kind:        "frr",
		established: func(n *node) (bool, string) { return f.Established(n.ip) },
		lastError: func(n *node) string {
			out, _ := f.Cmd("show bgp neighbors " + n.ip.String() + " json")
			return out
		},
		dump: func() string {
			s, _ := f.Cmd("show bgp summary")
			b, _ := f.Cmd("show bfd peers")
			r, _ := f.Cmd("show bgp ipv4 unicast " + vipPrefix.String())
			z, _ := f.Cmd("show ip route " + vipPrefix.String())
			return s + "\n" + b + "\n" + r + "\n" + z
		},
	})
	peer := func(n *node) (routers.BFDPeer, string) {
		p, ok, err := f.BFDPeer(n.ip)
		if err != nil || !ok {
			return p, fmt.Sprintf("no bfd peer %s (%v)", n.ip, err)
		}
		return p, fmt.Sprintf("%+v", p)
	}
	runBFDScenario(t, l, bfdRouter{
		up: func(n *node) (bool, string) {
			p, d := peer(n)
			// The node's Poll Sequence after Up brought FRR to 100ms.
			return p.Status == "up" && p.RemoteTransmitInterval == 100 && p.RemoteReceiveInterval == 100, d
		},
		failed: func(n *node) (bool, string) {
			p, d := peer(n)
			return p.Status == "down" && p.Diagnostic == "control detection time expired", d
		},
		adminDown: func(n *node) (bool, string) {
			p, d := peer(n)
			return p.Status == "down" && p.RemoteDiagnostic == "administratively down" &&
				p.Diagnostic != "control detection time expired", d
		},
		lastReset: func(n *node) string {
			out, _ := f.Cmd("show bgp neighbors " + n.ip.String() + " json")
			var m map[string]map[string]any
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				return out
			}
			var parts []string
			for k, v := range m[n.ip.String()] {
				if strings.HasPrefix(k, "last") {
					parts = append(parts, fmt.Sprintf("%s=%v", k, v))
				}
			}
			slices.Sort(parts)
			return strings.Join(parts, " ")
		},
	})
}

func TestBIRDBFD(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc", "nft")
	if !strings.Contains(birdBFDConf, "bfd yes") || strings.Contains(birdBFDConf, "merge paths") {
		t.Fatalf("birdBFDConf did not get its BFD lines:\n%s", birdBFDConf)
	}
	l := newLab(t, "bb")
	l.bfd = true
	b := routers.StartBIRD(t, l.routerNS, birdBFDConf)
	l.setRouter(router{
		Router:      b,
		kind:        "bird",
		established: func(n *node) (bool, string) { return b.Established(n.name) },
		lastError: func(n *node) string {
			out, _ := b.Cmd("show protocols all " + n.name)
			return out
		},
		dump: func() string {
			p, _ := b.Cmd("show protocols all")
			s, _ := b.Cmd("show bfd sessions")
			r, _ := b.Cmd("show route all")
			return p + "\n" + s + "\n" + r
		},
	})
	state := func(n *node) (string, string) {
		st, err := b.BFDState(n.ip)
		out, _ := b.Cmd("show bfd sessions")
		return st, fmt.Sprintf("state %q (%v)\n%s", st, err, out)
	}
	runBFDScenario(t, l, bfdRouter{
		up: func(n *node) (bool, string) {
			st, d := state(n)
			return st == "Up", d
		},
		failed: func(n *node) (bool, string) {
			// BIRD names the reason in the BGP protocol's last error.
			out, _ := b.Cmd("show protocols all " + n.name)
			return strings.Contains(out, "BFD session down"), out
		},
		adminDown: func(n *node) (bool, string) {
			// BIRD's CLI shows no remote diagnostic (TestFRRBFD shows
			// the AdminDown itself): the BFD session is down and BGP
			// ended by the node's CEASE, not by BFD or the hold timer.
			st, d := state(n)
			out, _ := b.Cmd("show protocols all " + n.name)
			return st == "Down" && strings.Contains(out, "Last error:       Received: Administrative shutdown"), d + "\n" + out
		},
		lastReset: func(n *node) string {
			out, _ := b.Cmd("show protocols all " + n.name)
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "Last error") {
					return strings.TrimSpace(line)
				}
			}
			return out
		},
	})
}

// runBFDScenario: every node announces (announce = "all"), the router
// forwards to one of them (one path in its kernel), BFD 100ms x 3 on both
// sides, a client probes the VIP every 20ms.
//
//  1. Cut the node the router forwards to (its port leaves the bridge,
//     carrier stays): the router's BFD fails, it drops that path and
//     forwards to another node. The client's gap is logged; the path must
//     be gone within 1.5s (the hold time is 3s).
//  2. Heal: BFD and BGP come back. Then the node in use is frozen
//     (SIGSTOP): the router's BFD drops its path within 1.5s too, and
//     after SIGCONT it comes back.
//  3. vipctl withdraw --wait of the node in use, BFD on: no probe lost,
//     BFD stays Up (a withdraw is not a failure).
//  4. SIGTERM of the node in use: no probe lost, and the router saw an
//     AdminDown, not a detection failure.
func runBFDScenario(t *testing.T, l *lab, r bfdRouter) {
	for _, n := range l.nodes {
		l.startHTTP(n)
		l.startVipd(n, "all")
	}
	l.waitEstablished(l.nodes...)
	bfdUp := func(what string, ns ...*node) {
		t.Helper()
		for _, n := range ns {
			netnstest.Eventually(t, 30*time.Second, 100*time.Millisecond, what+": router's bfd with "+n.name+" up", func() (bool, string) {
				return r.up(n)
			})
		}
	}
	bfdUp("start", l.nodes...)
	for _, n := range l.nodes {
		assertLogged(t, n, `msg="bfd session state"`, "peer=192.0.2.1", "to=up")
	}

	// The router holds three paths and forwards to one.
	inUse := func(what string) *node {
		t.Helper()
		v, _ := l.waitView(20*time.Second, what, func(v view) (bool, string) {
			if len(v.paths) != 3 || len(v.kernel) != 1 {
				return false, "want three bgp paths and one kernel next hop"
			}
			return true, ""
		})
		return l.nodeByIP(v.kernel[0])
	}
	cur := inUse("three paths, one in the kernel")
	t.Logf("router forwards to %s", cur.name)

	const interval = 20 * time.Millisecond
	pr := l.startProber(interval, 4000, 80*time.Second)
	warm := time.Now()
	netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "client reaches the VIP through the router", func() (bool, string) {
		total, failed, by, _ := countProbes(pr.snapshot(), warm, time.Now().Add(time.Hour))
		return total >= 25 && failed == 0 && by[cur.name] == total, fmt.Sprintf("%d probes, %d failed, by %v", total, failed, by)
	})

	// 1. Cut.
	cutAt := time.Now()
	l.cut(cur)
	_, gone := l.waitView(1500*time.Millisecond, cur.name+"'s path gone through bfd (hold 3s)", func(v view) (bool, string) {
		_, ok := v.pathVia(cur.ip)
		return !ok && len(v.kernel) == 1 && v.kernel[0] != cur.ip, "want no path via " + cur.name
	})
	netnstest.Eventually(t, 2*time.Second, 50*time.Millisecond, "router reports a bfd failure with "+cur.name, func() (bool, string) {
		return r.failed(cur)
	})
	netnstest.Eventually(t, 5*time.Second, 50*time.Millisecond, "client answered by another node", func() (bool, string) {
		rs := pr.snapshot()
		last := rs[len(rs)-1]
		return last.ok && last.server != cur.name && last.start.After(gone), fmt.Sprintf("last probe %+v", last)
	})
	time.Sleep(500 * time.Millisecond) // probes after the switch, for the gap's end
	gap, lost := longestGap(pr.snapshot(), cutAt, time.Now())
	t.Logf("cut of %s: router dropped its path after %v; client gap %v (%d probes lost)",
		cur.name, gone.Sub(cutAt).Round(10*time.Millisecond), gap.Round(10*time.Millisecond), lost)
	if gap > time.Second {
		t.Errorf("client gap %v after the cut, want under 1s with bfd (3s hold time)", gap)
	}

	// 2. Heal.
	l.uncut(cur)
	bfdUp("after the cut healed", cur)
	l.waitView(30*time.Second, cur.name+"'s path back", func(v view) (bool, string) {
		_, ok := v.pathVia(cur.ip)
		return ok && len(v.paths) == 3, "want three paths again"
	})

	// 2b. A hung host: vipd frozen (SIGSTOP), link and kernel fine. The
	// router's BFD stops hearing it and drops the path; after SIGCONT BFD
	// and BGP come back.
	cur = inUse("three paths before the freeze")
	frozen := time.Now()
	cur.vipd.signal(t, syscall.SIGSTOP)
	_, gone = l.waitView(1500*time.Millisecond, "frozen "+cur.name+"'s path gone through bfd (hold 3s)", func(v view) (bool, string) {
		_, ok := v.pathVia(cur.ip)
		return !ok && len(v.kernel) == 1, "want no path via " + cur.name
	})
	t.Logf("SIGSTOP of %s: router dropped its path after %v", cur.name, gone.Sub(frozen).Round(10*time.Millisecond))
	if ok, d := r.failed(cur); !ok {
		t.Errorf("router does not report a bfd failure with the frozen %s: %s", cur.name, d)
	}
	cur.vipd.signal(t, syscall.SIGCONT)
	bfdUp("after SIGCONT", cur)
	l.waitView(30*time.Second, cur.name+"'s path back after SIGCONT", func(v view) (bool, string) {
		_, ok := v.pathVia(cur.ip)
		return ok && len(v.paths) == 3, "want three paths again"
	})

	// 3. Planned withdraw with BFD on.
	cur = inUse("three paths before the withdraw")
	start := time.Now()
	if _, err := l.vipctl(cur, 40*time.Second, "withdraw", "--wait", "--timeout", "30s"); err != nil {
		t.Fatal(err)
	}
	l.waitView(5*time.Second, cur.name+"'s path withdrawn", func(v view) (bool, string) {
		_, ok := v.pathVia(cur.ip)
		return !ok, "want no path via " + cur.name
	})
	time.Sleep(500 * time.Millisecond)
	total, failed, by, fails := countProbes(pr.snapshot(), start, time.Now())
	t.Logf("withdraw --wait of %s with bfd: %d probes, %d lost, answered by %s", cur.name, total, failed, fmtCounts(by))
	checkPlannedLoss(t, "planned withdraw", fails)
	if ok, d := r.up(cur); !ok {
		t.Errorf("bfd with %s not up after a withdraw (a withdraw is not a failure): %s", cur.name, d)
	}
	if _, err := l.vipctl(cur, 10*time.Second, "restore"); err != nil {
		t.Fatal(err)
	}

	// 4. SIGTERM: a planned stop sends AdminDown.
	cur = inUse("three paths before SIGTERM")
	start = time.Now()
	cur.vipd.signal(t, syscall.SIGTERM)
	if err := cur.vipd.wait(30 * time.Second); err != nil {
		t.Fatalf("vipd on %s after SIGTERM: %v", cur.name, err)
	}
	netnstest.Eventually(t, 5*time.Second, 50*time.Millisecond, "router saw "+cur.name+"'s AdminDown", func() (bool, string) {
		return r.adminDown(cur)
	})
	t.Logf("%s after SIGTERM of %s: %s", l.router.kind, cur.name, r.lastReset(cur))
	time.Sleep(500 * time.Millisecond)
	results := pr.stop(t)
	total, failed, by, fails = countProbes(results, start, time.Now())
	t.Logf("SIGTERM of %s with bfd: %d probes, %d lost, answered by %s", cur.name, total, failed, fmtCounts(by))
	checkPlannedLoss(t, "SIGTERM drain", fails)
	assertLogged(t, cur, `msg="bfd session state"`, "to=admin_down", "diag=administratively_down")
}

// assertLogged fails t unless a line of n's vipd log contains every part.
func assertLogged(t *testing.T, n *node, parts ...string) {
	t.Helper()
	ok, err := logged(n, parts...)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Errorf("vipd log of %s has no line with %q", n.name, parts)
	}
}

// logged reports whether a line of n's vipd log contains every part.
func logged(n *node, parts ...string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "vipd.log"))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true, nil
		}
	}
	return false, nil
}
