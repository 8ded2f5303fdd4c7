package bench

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
	"github.com/vipd/vipd/lab/routers"
)

// The BGP lab: BIRD runs in the client namespace (192.0.2.100) and peers
// passively with the three nodes; vipd announces 203.0.113.10/32 from the
// owner with hold_time 3s.
var (
	bgpVIP    = netip.MustParseAddr("203.0.113.10")
	bgpPrefix = netip.PrefixFrom(bgpVIP, 32)
)

// BGPScenarios are the BGP events measured: a planned withdraw, the
// owner's vipd killed (the kernel closes its BGP session at once) and the
// owner cut off at the bridge (the router's hold timer has to expire).
var BGPScenarios = []string{"withdraw", "crash", "partition"}

const (
	routerASN = 64512
	nodeASN   = 64513
	bgpBound  = 20 * time.Second
	bgpQuiet  = 2 * time.Second
)

// birdConfig is the router: passive sessions to every node, hold time 3,
// routes kept in BIRD's table only (nothing exported to the kernel).
func birdConfig(l *netlab.Lab) string {
	var b strings.Builder
	fmt.Fprintf(&b, `router id %s;
protocol device { scan time 1; }
template bgp nodes {
	local %s as %d;
	passive on;
	error wait time 1, 5;
	hold time 3;
	ipv4 { import all; export none; };
}
`, l.Client.IP, l.Client.IP, routerASN)
	for _, n := range l.Nodes {
		fmt.Fprintf(&b, "protocol bgp %s from nodes { neighbor %s as %d; }\n", n.Name, n.IP, nodeASN)
	}
	return b.String()
}

// bgpVipdConfig is node h's vipd configuration for the BGP lab: one VIP in
// bgp mode, announce "owner", graceful_shutdown 0s so a withdraw is a plain
// BGP withdraw.
func bgpVipdConfig(l *netlab.Lab, h *netlab.Host) string {
	var peers []string
	for _, n := range l.Nodes {
		if n != h {
			peers = append(peers, fmt.Sprintf("%q", n.IP))
		}
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
announce = "owner"
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
`, h.Name, h.StateDir(), h.Socket(), h.IP, strings.Join(peers, ", "), bgpVIP, nodeASN, h.IP, l.Client.IP, routerASN)
}

// startBGPVipd starts vipd on h with the BGP configuration and waits
// (bounded) for its API.
func startBGPVipd(l *netlab.Lab, h *netlab.Host) (*netlab.Proc, error) {
	v, err := l.TryStartVipdConfig(h, bgpVipdConfig(l, h))
	if err != nil {
		return nil, err
	}
	return v.Proc, nil
}

// bgpVia returns the next hops BIRD has for the VIP prefix.
func bgpVia(b *routers.BIRD) ([]netip.Addr, error) {
	rs, err := b.Routes(bgpPrefix)
	if err != nil {
		return nil, err
	}
	var hops []netip.Addr
	for _, r := range rs {
		hops = append(hops, r.NextHops...)
	}
	return hops, nil
}

// bgpSteady waits until every session is established and BIRD has
// exactly one path for the VIP; it returns the announcing node.
func bgpSteady(l *netlab.Lab, b *routers.BIRD) (*netlab.Host, error) {
	var via netip.Addr
	ok, detail := netlab.Eventually(30*time.Second, 100*time.Millisecond, func() (bool, string) {
		for _, n := range l.Nodes {
			if ok, out := b.Established(n.Name); !ok {
				return false, "session " + n.Name + " not established: " + strings.TrimSpace(out)
			}
		}
		hops, err := bgpVia(b)
		if err != nil || len(hops) != 1 {
			return false, fmt.Sprintf("paths via %v (%v)", hops, err)
		}
		via = hops[0]
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

// bgpBench measures withdraw-to-route-gone and crash-to-route-gone.
func bgpBench(t *T, runs int, log io.Writer, logDir string) []BGPTrial {
	l := netlab.New(t, netlab.Options{Nodes: 3})
	keepLogs(t, l, logDir, "bgp")
	bird := routers.StartBIRD(t, l.Client.NS, birdConfig(l))
	procs := map[string]*netlab.Proc{}
	for _, n := range l.Nodes {
		p, err := startBGPVipd(l, n)
		if err != nil {
			t.Fatalf("%v", err)
		}
		procs[n.Name] = p
	}
	var trials []BGPTrial
	for _, sc := range BGPScenarios {
		for run := 1; run <= runs && t.Context().Err() == nil; run++ {
			tr := BGPTrial{Scenario: sc, Run: run}
			func() {
				owner, err := bgpSteady(l, bird)
				if err != nil {
					tr.Err = "before the event: " + err.Error()
					return
				}
				tr.From = owner.Name
				// Let the previous trial's restore or restart settle
				// (a node that just became eligible waits before claiming).
				time.Sleep(bgpQuiet)
				t0 := time.Now()
				switch sc {
				case "withdraw":
					_, err = l.Vipctl(owner, "withdraw")
				case "crash":
					procs[owner.Name].Kill()
				case "partition":
					l.Cut(owner)
				}
				if err != nil {
					tr.Err = err.Error()
					return
				}
				ok, detail := netlab.Eventually(bgpBound, 20*time.Millisecond, func() (bool, string) {
					hops, err := bgpVia(bird)
					if err != nil {
						return false, err.Error()
					}
					gone := true
					for _, h := range hops {
						if h == owner.IP {
							gone = false
						} else if tr.NewRoute == 0 {
							tr.NewRoute = time.Since(t0)
						}
					}
					if gone && tr.RouteGone == 0 {
						tr.RouteGone = time.Since(t0)
					}
					return tr.RouteGone != 0 && tr.NewRoute != 0, fmt.Sprintf("paths via %v", hops)
				})
				if !ok && tr.RouteGone == 0 {
					tr.Err = fmt.Sprintf("route via %s still there after %v: %s", owner.Name, bgpBound, detail)
				}
				switch sc {
				case "withdraw":
					if _, err := l.Vipctl(owner, "restore"); err != nil && tr.Err == "" {
						tr.Err = "restore: " + err.Error()
					}
				case "partition":
					l.Uncut(owner)
				case "crash":
					p, err := startBGPVipd(l, owner)
					if err != nil {
						tr.Err = "restart: " + err.Error()
						return
					}
					procs[owner.Name] = p
				}
			}()
			status := fmt.Sprintf("route via %s gone %v, new path %v", tr.From, tr.RouteGone, tr.NewRoute)
			if tr.Err != "" {
				status = "ERROR " + tr.Err
			}
			fmt.Fprintf(log, "%s bgp %-8s run %d: %s\n", time.Now().Format("15:04:05"), sc, run, status)
			trials = append(trials, tr)
		}
	}
	for _, p := range procs {
		p.Stop(syscall.SIGTERM, 10*time.Second)
	}
	return trials
}
