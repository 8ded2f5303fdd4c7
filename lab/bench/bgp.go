package bench

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/vipd/vipd/internal/netnstest/routers"
	"github.com/vipd/vipd/lab/netlab"
)

// The BGP lab: BIRD runs in the client namespace (192.0.2.100), peers
// passively with the three nodes and installs its best path for the VIP
// (one path: no merge paths, like maximum-paths 1) in the client
// namespace's kernel; vipd announces 203.0.113.10/32 with hold_time 3s; the
// client probes 203.0.113.10:6443 through that route.
var (
	bgpVIP    = netip.MustParseAddr("203.0.113.10")
	bgpPrefix = netip.PrefixFrom(bgpVIP, 32)
)

// BGPScenarios are the BGP events measured:
//
//   - withdraw: vipctl withdraw on the owner (announce "owner");
//   - crash: the owner's vipd killed (the kernel closes its BGP session);
//   - partition: the owner cut off at the bridge, both ends keep carrier
//     (the router's hold timer has to expire);
//   - partition-bfd: the same with BFD 100ms x 3 on both sides;
//   - partition-all, partition-all-bfd: every node announces (announce
//     "all"), the router forwards to its best path only, and the node
//     it forwards to is cut off, without and with BFD;
//   - freeze-all, freeze-all-bfd: that node's vipd and HTTP server frozen
//     (SIGSTOP: a hung host whose kernel still answers), without and with
//     BFD;
//   - withdraw-all-bfd: vipctl withdraw of that node, with BFD.
var BGPScenarios = []string{"withdraw", "crash", "partition", "partition-bfd", "partition-all", "partition-all-bfd",
	"freeze-all", "freeze-all-bfd", "withdraw-all-bfd"}

// BGPScenarioTitle describes each BGP scenario for the report.
var BGPScenarioTitle = map[string]string{
	"withdraw":          "`vipctl withdraw` on the owner",
	"crash":             "owner vipd SIGKILL",
	"partition":         "owner cut off at the bridge (hold timer)",
	"partition-bfd":     "owner cut off at the bridge, BFD",
	"partition-all":     "`all`: node in use cut off (hold timer)",
	"partition-all-bfd": "`all`: node in use cut off, BFD",
	"freeze-all":        "`all`: node in use hung (vipd and service SIGSTOP; hold timer)",
	"freeze-all-bfd":    "`all`: node in use hung (vipd and service SIGSTOP), BFD",
	"withdraw-all-bfd":  "`all`: `vipctl withdraw` of the node in use, BFD",
}

// bgpGroup is one lab configuration: the scenarios measured with it.
type bgpGroup struct {
	name      string
	announce  string // "owner" or "all"
	bfd       bool
	scenarios []string
}

var bgpGroups = []bgpGroup{
	{"owner", "owner", false, []string{"withdraw", "crash", "partition"}},
	{"owner-bfd", "owner", true, []string{"partition-bfd"}},
	{"all", "all", false, []string{"partition-all", "freeze-all"}},
	{"all-bfd", "all", true, []string{"partition-all-bfd", "freeze-all-bfd", "withdraw-all-bfd"}},
}

const (
	routerASN = 64512
	nodeASN   = 64513
	bgpBound  = 20 * time.Second
	bgpQuiet  = 2 * time.Second
	// bgpProbe: the client's probe interval and timeout in the BGP lab.
	bgpProbeInterval = 20 * time.Millisecond
	bgpProbeTimeout  = 200 * time.Millisecond
)

// birdConfig is the router: passive sessions to every node, hold time 3,
// the best path exported to the kernel, and with bfd BFD 100ms x 3 on the
// sessions.
func birdConfig(l *netlab.Lab, bfd bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `router id %s;
protocol device { scan time 1; }
protocol kernel k4 { ipv4 { export where source = RTS_BGP; }; }
`, l.Client.IP)
	bfdOpt := ""
	if bfd {
		fmt.Fprintf(&b, "protocol bfd {\n\tinterface %q { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; };\n}\n", netlab.Iface)
		bfdOpt = "\tbfd yes;\n"
	}
	fmt.Fprintf(&b, `template bgp nodes {
	local %s as %d;
	passive on;
	error wait time 1, 5;
	hold time 3;
%s	ipv4 { import all; export none; };
}
`, l.Client.IP, routerASN, bfdOpt)
	for _, n := range l.Nodes {
		fmt.Fprintf(&b, "protocol bgp %s from nodes { neighbor %s as %d; }\n", n.Name, n.IP, nodeASN)
	}
	return b.String()
}

// bgpVipdConfig is node h's vipd configuration for the BGP lab: one VIP in
// bgp mode, graceful_shutdown 0s so a withdraw is a plain BGP withdraw.
func bgpVipdConfig(l *netlab.Lab, h *netlab.Host, g bgpGroup) string {
	var peers []string
	for _, n := range l.Nodes {
		if n != h {
			peers = append(peers, fmt.Sprintf("%q", n.IP))
		}
	}
	bfd := ""
	if g.bfd {
		bfd = "bfd = true\nbfd_min_interval = \"100ms\"\nbfd_multiplier = 3\n"
	}
	return fmt.Sprintf(`node_name = %q
state_dir = %q
log_level = "info"

[api]
socket = %q

[cluster]
bind_address = %q
peers = [%s]
rejoin_interval = "2s"
failure_detection = "fast"

[[vip]]
name = "apiserver"
address = %q
mode = "bgp"
announce = %q
interface = "lo"

[bgp]
asn = %d
router_id = %q
graceful_shutdown = "0s"

[[bgp.peer]]
address = %q
asn = %d
hold_time = "3s"
keepalive = "1s"
%s`, h.Name, h.StateDir(), h.Socket(), h.IP, strings.Join(peers, ", "), bgpVIP, g.announce, nodeASN, h.IP, l.Client.IP, routerASN, bfd)
}

// startBGPVipd starts vipd on h with the BGP configuration and waits
// (bounded) for its API.
func startBGPVipd(l *netlab.Lab, h *netlab.Host, g bgpGroup) (*netlab.Proc, error) {
	v, err := l.TryStartVipdConfig(h, bgpVipdConfig(l, h, g))
	if err != nil {
		return nil, err
	}
	return v.Proc, nil
}

// bgpPaths returns the next hops of BIRD's paths for the VIP prefix and
// the next hop of its best path (invalid when there is none).
func bgpPaths(b *routers.BIRD) (hops []netip.Addr, best netip.Addr, err error) {
	rs, err := b.Routes(bgpPrefix)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	for _, r := range rs {
		hops = append(hops, r.NextHops...)
		if r.Best && len(r.NextHops) > 0 {
			best = r.NextHops[0]
		}
	}
	return hops, best, nil
}

// bgpSteady waits until every session is established, BIRD has the paths
// g's announce mode gives (one, or one per node) and the kernel route
// follows its best path; it returns the node the router forwards to.
func bgpSteady(l *netlab.Lab, b *routers.BIRD, g bgpGroup) (*netlab.Host, error) {
	want := 1
	if g.announce == "all" {
		want = len(l.Nodes)
	}
	var via netip.Addr
	ok, detail := netlab.Eventually(30*time.Second, 100*time.Millisecond, func() (bool, string) {
		for _, n := range l.Nodes {
			if ok, out := b.Established(n.Name); !ok {
				return false, "session " + n.Name + " not established: " + strings.TrimSpace(out)
			}
		}
		if g.bfd {
			for _, n := range l.Nodes {
				if st, err := b.BFDState(n.IP); st != "Up" {
					return false, fmt.Sprintf("bfd with %s %q (%v)", n.Name, st, err)
				}
			}
		}
		hops, best, err := bgpPaths(b)
		if err != nil || len(hops) != want || !best.IsValid() {
			return false, fmt.Sprintf("paths via %v, best %v (%v)", hops, best, err)
		}
		k, err := routers.KernelNextHops(l.Client.NS, bgpPrefix)
		if err != nil || len(k) != 1 || k[0] != best {
			return false, fmt.Sprintf("kernel next hops %v, best %v (%v)", k, best, err)
		}
		via = best
		return true, ""
	})
	if !ok {
		return nil, fmt.Errorf("BGP lab not steady after 30s: %s", detail)
	}
	for _, n := range l.Nodes {
		if n.IP == via {
			return n, nil
		}
	}
	return nil, fmt.Errorf("path via %s, not a lab node", via)
}

// bgpBench runs every group of BGP scenarios, each in a lab of its own.
func bgpBench(t *T, runs int, log io.Writer, logDir string) []BGPTrial {
	var trials []BGPTrial
	for _, g := range bgpGroups {
		if t.Context().Err() != nil {
			break
		}
		err := Do(t.Context(), "bgp-"+g.name, log, func(gt *T) {
			trials = append(trials, bgpGroupBench(gt, g, runs, log, logDir)...)
		})
		if err != nil {
			t.Errorf("%v", err)
		}
	}
	return trials
}

// bgpGroupBench measures g's scenarios: at the router, when the path via
// the node it forwarded to is gone and when its best path is via another
// node; at the client, the longest run of failed probes.
func bgpGroupBench(t *T, g bgpGroup, runs int, log io.Writer, logDir string) []BGPTrial {
	l := netlab.New(t, netlab.Options{Nodes: 3})
	keepLogs(t, l, logDir, "bgp-"+g.name)
	bird := routers.StartBIRD(t, l.Client.NS, birdConfig(l, g.bfd))
	l.StartHTTPAll()
	procs := map[string]*netlab.Proc{}
	for _, n := range l.Nodes {
		p, err := startBGPVipd(l, n, g)
		if err != nil {
			t.Fatalf("%v", err)
		}
		procs[n.Name] = p
	}
	pr := l.StartProber(netlab.ProbeOptions{Target: netip.AddrPortFrom(bgpVIP, netlab.HTTPPort),
		Interval: bgpProbeInterval, Timeout: bgpProbeTimeout, Duration: 30 * time.Minute})
	var trials []BGPTrial
	for _, sc := range g.scenarios {
		for run := 1; run <= runs && t.Context().Err() == nil; run++ {
			tr := BGPTrial{Scenario: sc, Run: run}
			func() {
				owner, err := bgpSteady(l, bird, g)
				if err != nil {
					tr.Err = "before the event: " + err.Error()
					return
				}
				tr.From = owner.Name
				// Let the previous trial's restore or restart settle
				// (a node that just became eligible waits before claiming).
				time.Sleep(bgpQuiet)
				if err := pr.WaitServedBy(owner.Name, 5, time.Now(), 5*time.Second); err != nil {
					tr.Err = "client before the event: " + err.Error()
					return
				}
				t0 := time.Now()
				switch sc {
				case "withdraw", "withdraw-all-bfd":
					_, err = l.Vipctl(owner, "withdraw")
				case "crash":
					procs[owner.Name].Kill()
				case "freeze-all", "freeze-all-bfd":
					// The host hangs: vipd and the service.
					err = errors.Join(procs[owner.Name].Signal(syscall.SIGSTOP), l.HTTP(owner).Signal(syscall.SIGSTOP))
				default: // partitions
					l.Cut(owner)
				}
				if err != nil {
					tr.Err = err.Error()
					return
				}
				ok, detail := netlab.Eventually(bgpBound, 20*time.Millisecond, func() (bool, string) {
					hops, best, err := bgpPaths(bird)
					if err != nil {
						return false, err.Error()
					}
					gone := true
					for _, h := range hops {
						gone = gone && h != owner.IP
					}
					if gone && tr.RouteGone == 0 {
						tr.RouteGone = time.Since(t0)
					}
					if best.IsValid() && best != owner.IP && tr.NewRoute == 0 {
						tr.NewRoute = time.Since(t0)
					}
					return tr.RouteGone != 0 && tr.NewRoute != 0, fmt.Sprintf("paths via %v, best %v", hops, best)
				})
				if !ok && tr.RouteGone == 0 {
					tr.Err = fmt.Sprintf("route via %s still there after %v: %s", owner.Name, bgpBound, detail)
				}
				// The client: answered by another node, then the
				// longest run of failures since the event.
				if served := waitOtherServes(pr, owner.Name, t0, bgpBound); served.IsZero() {
					if tr.Err == "" {
						tr.Err = "client not answered by another node within " + bgpBound.String()
					}
				} else {
					time.Sleep(4 * bgpProbeTimeout) // the probes in flight finish
					var window []netlab.Probe
					for _, p := range pr.Probes() {
						if !p.Start.Before(t0) {
							window = append(window, p)
						}
					}
					tr.Lost, tr.ClientGap = netlab.LongestFailure(window, bgpProbeInterval)
				}
				switch sc {
				case "withdraw", "withdraw-all-bfd":
					if _, err := l.Vipctl(owner, "restore"); err != nil && tr.Err == "" {
						tr.Err = "restore: " + err.Error()
					}
				case "crash":
					p, err := startBGPVipd(l, owner, g)
					if err != nil {
						tr.Err = "restart: " + err.Error()
						return
					}
					procs[owner.Name] = p
				case "freeze-all", "freeze-all-bfd":
					err := errors.Join(procs[owner.Name].Signal(syscall.SIGCONT), l.HTTP(owner).Signal(syscall.SIGCONT))
					if err != nil && tr.Err == "" {
						tr.Err = "SIGCONT: " + err.Error()
					}
				default:
					l.Uncut(owner)
				}
			}()
			status := fmt.Sprintf("route via %s gone %v, best path elsewhere %v, client gap %v (%d lost)",
				tr.From, tr.RouteGone, tr.NewRoute, tr.ClientGap, tr.Lost)
			if tr.Err != "" {
				status = "ERROR " + tr.Err
			}
			fmt.Fprintf(log, "%s bgp %-17s run %d: %s\n", time.Now().Format("15:04:05"), sc, run, status)
			trials = append(trials, tr)
		}
	}
	pr.Stop()
	for _, p := range procs {
		p.Stop(syscall.SIGTERM, 10*time.Second)
	}
	return trials
}

// waitOtherServes waits up to bound for a probe started after since and
// answered by a node other than from, and returns its start (zero if none).
func waitOtherServes(pr *netlab.Prober, from string, since time.Time, bound time.Duration) time.Time {
	var at time.Time
	netlab.Eventually(bound, 20*time.Millisecond, func() (bool, string) {
		for _, p := range pr.Probes() {
			if !p.Start.Before(since) && p.OK && p.Server != from {
				at = p.Start
				return true, ""
			}
		}
		return false, ""
	})
	return at
}
