package bgplab

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// birdConf peers passively with the three nodes, merges equal BGP paths
// into one ECMP kernel route and lowers the local preference of paths
// tagged GRACEFUL_SHUTDOWN (RFC 8326) so a draining node leaves the ECMP
// set before it withdraws.
const birdConf = `
router id 192.0.2.1;
protocol device { scan time 1; }
protocol kernel k4 {
	merge paths yes limit 8;
	ipv4 { export where source = RTS_BGP; };
}
filter nodes_in {
	if (65535, 0) ~ bgp_community then bgp_local_pref = 0;
	accept;
}
template bgp nodes {
	local 192.0.2.1 as 64512;
	passive on;
	error wait time 1, 5;
	hold time 3;
	password "vipd-bgplab-secret";
	ipv4 { import filter nodes_in; export none; };
}
protocol bgp n1 from nodes { neighbor 192.0.2.11 as 64513; }
protocol bgp n2 from nodes { neighbor 192.0.2.12 as 64513; }
protocol bgp n3 from nodes { neighbor 192.0.2.13 as 64513; }
`

// frrConf is the same router in FRR: maximum-paths for ECMP, and a
// route-map that sets local-preference 0 on GRACEFUL_SHUTDOWN paths.
const frrConf = `
hostname r
bgp community-list standard GSHUT seq 5 permit graceful-shutdown
route-map NODES-IN permit 10
 match community GSHUT
 set local-preference 0
exit
route-map NODES-IN permit 20
exit
router bgp 64512
 bgp router-id 192.0.2.1
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 bgp bestpath as-path multipath-relax
 neighbor NODES peer-group
 neighbor NODES remote-as 64513
 neighbor NODES passive
 neighbor NODES timers 1 3
 neighbor NODES password vipd-bgplab-secret
 neighbor 192.0.2.11 peer-group NODES
 neighbor 192.0.2.12 peer-group NODES
 neighbor 192.0.2.13 peer-group NODES
 address-family ipv4 unicast
  neighbor NODES activate
  neighbor NODES route-map NODES-IN in
  maximum-paths 8
 exit-address-family
exit
`

func TestBIRD(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc")
	l := newLab(t, "b")
	l.setRouter(birdRouter(routers.StartBIRD(t, l.routerNS, birdConf)))
	runScenario(t, l)
}

func TestFRR(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "/usr/lib/frr/bgpd", "/usr/lib/frr/zebra", "vtysh")
	l := newLab(t, "f")
	l.setRouter(frrRouter(routers.StartFRR(t, l.routerNS, frrConf)))
	runScenario(t, l, step{"owner-fence", ownerFence})
}

// birdRouter is the lab's view of BIRD b: sessions named after the nodes,
// the protocols and the routes for the dump.
func birdRouter(b *routers.BIRD) router {
	return router{
		Router:      b,
		kind:        "bird",
		established: func(n *node) (bool, string) { return b.Established(n.name) },
		lastError:   func(n *node) string { out, _ := b.Cmd("show protocols all " + n.name); return out },
		dump: func() string {
			p, _ := b.Cmd("show protocols all")
			r, _ := b.Cmd("show route all")
			return p + "\n" + r
		},
	}
}

// frrRouter is the lab's view of FRR f: neighbors by address, the summary,
// the VIP's BGP paths and its kernel route for the dump.
func frrRouter(f *routers.FRR) router {
	return router{
		Router:      f,
		kind:        "frr",
		established: func(n *node) (bool, string) { return f.Established(n.ip) },
		lastError:   func(n *node) string { out, _ := f.Cmd("show bgp neighbors " + n.ip.String() + " json"); return out },
		dump: func() string {
			s, _ := f.Cmd("show bgp summary")
			r, _ := f.Cmd("show bgp ipv4 unicast " + vipPrefix.String())
			z, _ := f.Cmd("show ip route " + vipPrefix.String())
			return s + "\n" + r + "\n" + z
		},
	}
}

// step is an extra announce=owner subtest of runScenario.
type step struct {
	name string
	run  func(*testing.T, *lab)
}

// runScenario runs the whole proof against l's router: announce=owner
// first, then the extra announce=owner steps, then all vipds are stopped
// (SIGTERM) and restarted with announce=all.
func runScenario(t *testing.T, l *lab, ownerSteps ...step) {
	for _, n := range l.nodes {
		l.startHTTP(n)
	}
	t.Run("owner", func(t *testing.T) { ownerMode(t, l) })
	if t.Failed() {
		return
	}
	for _, s := range ownerSteps {
		t.Run(s.name, func(t *testing.T) { s.run(t, l) })
		if t.Failed() {
			return
		}
	}
	l.stopAll()
	l.waitView(10*time.Second, "no route once every vipd stopped", func(v view) (bool, string) {
		return len(v.paths) == 0 && len(v.kernel) == 0, "want no path and no kernel route"
	})
	t.Run("all", func(t *testing.T) { allMode(t, l) })
}

// agreedOwner returns the node every status names as owner and checks that
// only it reports holding the VIP.
func (l *lab) agreedOwner() (*node, string) {
	owner := ""
	for _, n := range l.nodes {
		st, err := l.status(n)
		if err != nil {
			return nil, err.Error()
		}
		if len(st.VIPs) != 1 || st.VIPs[0].Name != vipName || st.VIPs[0].Mode != "bgp" {
			return nil, fmt.Sprintf("%s: vips %+v", n.name, st.VIPs)
		}
		v := st.VIPs[0]
		if owner == "" {
			owner = v.Owner
		}
		if v.Owner == "" || v.Owner != owner {
			return nil, fmt.Sprintf("%s says owner %q, another said %q", n.name, v.Owner, owner)
		}
		if v.Held != (n.name == owner) {
			return nil, fmt.Sprintf("%s: held=%t with owner %s", n.name, v.Held, owner)
		}
	}
	for _, n := range l.nodes {
		if n.name == owner {
			return n, ""
		}
	}
	return nil, "owner " + owner + " is not a lab node"
}

// onePathVia is the condition "exactly one BGP path and one kernel next
// hop, both via a node that every status names as owner (and not via
// not)"; it stores that node in *owner.
func (l *lab) onePathVia(owner **node, not *node) func(view) (bool, string) {
	return func(v view) (bool, string) {
		if len(v.paths) != 1 || len(v.paths[0].NextHops) != 1 || len(v.kernel) != 1 {
			return false, "want exactly one path and one kernel next hop"
		}
		nh := v.paths[0].NextHops[0]
		if v.kernel[0] != nh || v.paths[0].HasCommunity(gshut) {
			return false, "want the kernel route via the path's next hop, without " + gshut
		}
		o, detail := l.agreedOwner()
		if o == nil {
			return false, detail
		}
		if o.ip != nh {
			return false, fmt.Sprintf("status owner %s (%s), path via %s", o.name, o.ip, nh)
		}
		if not != nil && o == not {
			return false, "path still via " + not.name
		}
		*owner = o
		return true, ""
	}
}

func ownerMode(t *testing.T, l *lab) {
	for _, n := range l.nodes {
		l.startVipd(n, "owner")
	}
	l.waitEstablished(l.nodes...)

	// 1. One path, via the owner vipctl status names.
	var owner *node
	l.waitView(20*time.Second, "one path via the owner", l.onePathVia(&owner, nil))
	t.Logf("announce=owner: one path via %s (%s), the owner in every status", owner.name, owner.ip)

	// 3 + 5. vipctl withdraw on the owner: its path is re-sent with
	// GRACEFUL_SHUTDOWN, then the path moves to another node.
	withdrawn := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := l.vipctl(owner, 40*time.Second, "withdraw", "--wait", "--timeout", "30s")
		done <- err
	}()
	old := owner
	_, seen := l.waitView(drainDelay+2*time.Second, old.name+"'s path carries "+gshut+" while draining", func(v view) (bool, string) {
		p, ok := v.pathVia(old.ip)
		return ok && p.HasCommunity(gshut), "want " + old.name + "'s path with " + gshut
	})
	t.Logf("announce=owner: %s's path carried %s %v after vipctl withdraw", old.name, gshut, seen.Sub(withdrawn).Round(time.Millisecond))
	// Make-before-break: while old drains, the successor's path is there
	// and, because the router lowers the local preference of GSHUT paths,
	// it alone is in the kernel.
	var succ netip.Addr
	_, both := l.waitView(drainDelay, "successor's path preferred while "+old.name+" drains", func(v view) (bool, string) {
		p, ok := v.pathVia(old.ip)
		if !ok || !p.HasCommunity(gshut) || len(v.paths) != 2 || len(v.kernel) != 1 || v.kernel[0] == old.ip {
			return false, "want " + old.name + "'s path with " + gshut + " and a second path, the kernel via the second"
		}
		succ = v.kernel[0]
		return true, ""
	})
	t.Logf("announce=owner: %v after vipctl withdraw the router forwards to %s while %s still announces with %s",
		both.Sub(withdrawn).Round(time.Millisecond), l.nodeByIP(succ).name, old.name, gshut)
	var successor *node
	_, moved := l.waitView(drainDelay+15*time.Second, "path moved off the withdrawn owner", l.onePathVia(&successor, old))
	t.Logf("announce=owner: path moved %s -> %s %v after vipctl withdraw", old.name, successor.name, moved.Sub(withdrawn).Round(time.Millisecond))
	if err := <-done; err != nil {
		t.Fatalf("withdraw --wait: %v", err)
	}

	// Restore: no preemption, the path stays on the successor.
	if _, err := l.vipctl(old, 10*time.Second, "restore"); err != nil {
		t.Fatal(err)
	}
	stableFor(t, l, 2*time.Second, "path stays on "+successor.name+" after restore of "+old.name, func(v view) (bool, string) {
		var o *node
		ok, detail := l.onePathVia(&o, old)(v)
		return ok && o == successor, detail
	})

	// 4. SIGKILL of the owner: its path goes within hold time + 1s and the
	// VIP moves to the remaining node.
	killed := time.Now()
	successor.vipd.signal(t, syscall.SIGKILL)
	_, gone := l.waitView(4*time.Second, "killed owner "+successor.name+"'s path gone", func(v view) (bool, string) {
		_, ok := v.pathVia(successor.ip)
		return !ok && !slices.Contains(v.kernel, successor.ip), "want no path via " + successor.name
	})
	t.Logf("announce=owner: SIGKILL of owner %s: path gone after %v", successor.name, gone.Sub(killed).Round(time.Millisecond))
	l.waitView(15*time.Second, "path on a surviving node", func(v view) (bool, string) {
		if len(v.paths) != 1 || len(v.kernel) != 1 || v.kernel[0] == successor.ip {
			return false, "want one path via a surviving node"
		}
		return true, ""
	})
}

func allMode(t *testing.T, l *lab) {
	for _, n := range l.nodes {
		l.startVipd(n, "all")
	}
	l.waitEstablished(l.nodes...)
	n1, n2, n3 := l.nodes[0], l.nodes[1], l.nodes[2]

	// 2. ECMP: three paths, three kernel next hops.
	v, _ := l.waitView(20*time.Second, "ECMP over all three nodes", ecmpOver(n1, n2, n3))
	t.Logf("announce=all: %s", v)
	if out, err := l.vipctl(n1, 5*time.Second, "status"); err == nil {
		t.Logf("vipctl status on n1:\n%s", out)
	}
	for _, n := range l.nodes {
		st, err := l.status(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.VIPs) != 1 || !st.VIPs[0].Held {
			t.Errorf("%s: status vips %+v, want the VIP held", n.name, st.VIPs)
		}
		if len(st.BGPPeers) != 1 || st.BGPPeers[0].Advertised != 1 {
			t.Errorf("%s: bgp_peers %+v, want one peer with 1 advertised path", n.name, st.BGPPeers)
		}
	}

	// 6. Probe the VIP from the client through the router while n1 drains.
	const interval = 20 * time.Millisecond
	pr := l.startProber(interval, 3000, 60*time.Second)
	warm := time.Now()
	netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "client reaches the VIP through the router", func() (bool, string) {
		total, _, by, _ := countProbes(pr.snapshot(), warm, time.Now().Add(time.Hour))
		return total >= 50 && by["n1"] > 0 && by["n2"] > 0 && by["n3"] > 0,
			fmt.Sprintf("want 50 probes and answers from every node (ECMP), got %d: %v", total, by)
	})

	// 3 + 5. vipctl withdraw --wait on n1: GRACEFUL_SHUTDOWN first, then
	// its path goes and two next hops are left.
	start := time.Now()
	_, _, before, _ := countProbes(pr.snapshot(), warm, start)
	done := make(chan error, 1)
	go func() {
		_, err := l.vipctl(n1, 40*time.Second, "withdraw", "--wait", "--timeout", "30s")
		done <- err
	}()
	_, seen := l.waitView(drainDelay+2*time.Second, "n1's path carries "+gshut+" while draining", func(v view) (bool, string) {
		p, ok := v.pathVia(n1.ip)
		return ok && p.HasCommunity(gshut), "want n1's path with " + gshut
	})
	t.Logf("announce=all: n1's path carried %s %v after vipctl withdraw", gshut, seen.Sub(start).Round(time.Millisecond))
	var waitErr error
	select {
	case waitErr = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("vipctl withdraw --wait did not return within 45s")
	}
	returned := time.Now()
	if waitErr != nil {
		t.Fatalf("withdraw --wait: %v", waitErr)
	}
	if returned.Sub(start) < drainDelay {
		t.Errorf("withdraw --wait returned after %v, before graceful_shutdown %v passed", returned.Sub(start), drainDelay)
	}
	v, gone := l.waitView(3*time.Second, "n1's path gone, ECMP over n2 and n3", ecmpOver(n2, n3))
	t.Logf("announce=all: withdraw --wait returned after %v; n1 gone from the router %v after the command: %s",
		returned.Sub(start).Round(time.Millisecond), gone.Sub(start).Round(time.Millisecond), v)
	// Keep probing a second past the end of the drain, then count.
	time.Sleep(time.Second)
	end := time.Now()
	results := pr.stop(t)
	total, failed, by, fails := countProbes(results, start, end)
	t.Logf("announce=all: probes during withdraw --wait of n1 (%v): %d sent, %d lost, answered by %s",
		end.Sub(start).Round(time.Millisecond), total, failed, fmtCounts(by))
	if minProbes := int(end.Sub(start)/interval) / 2; total < minProbes {
		t.Errorf("only %d probes in %v, want at least %d", total, end.Sub(start), minProbes)
	}
	// A reset at the moment the kernel's ECMP set shrinks (when the GSHUT
	// path leaves it) is the router rehashing a connection in flight to
	// another node; a timeout or "unreachable" would be a blackhole.
	// Compare the times with the vipd logs dumped below.
	checkPlannedLoss(t, fmt.Sprintf("withdraw --wait (started %s, %s seen %v later)",
		start.Format("15:04:05.000"), gshut, seen.Sub(start).Round(time.Millisecond)), fails)
	t.Logf("announce=all: before the withdraw the client was answered by %s", fmtCounts(before))
	all, _, _, allFails := countProbes(results, warm, end)
	checkPlannedLoss(t, fmt.Sprintf("of %d probes over the whole run", all), allFails)
	if _, err := l.vipctl(n1, 10*time.Second, "restore"); err != nil {
		t.Fatal(err)
	}
	l.waitView(15*time.Second, "n1 back after restore", ecmpOver(n1, n2, n3))

	// 4. Hold timer: SIGSTOP keeps the TCP session open, so only the hold
	// timer (3s) can remove n2's path.
	frozen := time.Now()
	n2.vipd.signal(t, syscall.SIGSTOP)
	_, gone = l.waitView(4*time.Second, "frozen n2's path gone (hold 3s)", func(v view) (bool, string) {
		_, ok := v.pathVia(n2.ip)
		return !ok && slices.Equal(v.kernelHops(), ipsOf(n1, n3)), "want n2 gone, kernel via n1 and n3"
	})
	t.Logf("announce=all: SIGSTOP of n2's vipd: path gone after %v (hold timer 3s)", gone.Sub(frozen).Round(time.Millisecond))
	if why := l.router.lastError(n2); !strings.Contains(strings.ToLower(why), "hold timer expired") {
		t.Errorf("%s does not say the session with n2 ended by hold timer expiry:\n%s", l.router.kind, why)
	}
	n2.vipd.signal(t, syscall.SIGCONT)
	l.waitView(30*time.Second, "n2 back after SIGCONT", ecmpOver(n1, n2, n3))

	// SIGKILL closes the socket: the router may drop the session at once.
	killed := time.Now()
	n3.vipd.signal(t, syscall.SIGKILL)
	_, gone = l.waitView(4*time.Second, "killed n3's path gone", func(v view) (bool, string) {
		_, ok := v.pathVia(n3.ip)
		return !ok && slices.Equal(v.kernelHops(), ipsOf(n1, n2)), "want n3 gone, kernel via n1 and n2"
	})
	t.Logf("announce=all: SIGKILL of n3's vipd: path gone after %v", gone.Sub(killed).Round(time.Millisecond))
}

// stableFor checks cond every 100ms for d and fails at the first miss.
func stableFor(t *testing.T, l *lab, d time.Duration, what string, cond func(view) (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		v, err := l.view()
		if err != nil {
			t.Fatal(err)
		}
		if ok, detail := cond(v); !ok {
			t.Fatalf("%s: %s; router: %s", what, detail, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func fmtCounts(by map[string]int) string {
	var ks []string
	for k := range by {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s:%d", k, by[k]))
	}
	return strings.Join(parts, " ")
}
