package converge

import (
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// maxRepairGap is the proof's bound for an address removed behind vipd's
// back: the VIP answers again within 1 s.
const maxRepairGap = time.Second

// TestAddressRemovedBehindVipd removes the VIP's address on its owner the
// way an operator or a network manager would, while a client probes the VIP
// every 20 ms: vipd must put it back on the same node (no election, nothing
// moved), the client must see the VIP again within 1 s, the repair must be
// counted in vipd_vip_repairs_total and published as a "drift" event.
//
//   - ip addr del of the VIP's /32.
//   - ip addr flush dev eth0, then the node's own address put back at once:
//     flush removes every address, the node's own too, which is what a
//     network manager does when it reapplies an interface's configuration
//     (and then adds back only what it manages: not the VIP). Flushing only
//     the /32 would be the ip addr del case again.
func TestAddressRemovedBehindVipd(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true, Edits: withMetrics})
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 90 * time.Second})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, servedRun, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before: %v", err)
	}
	rec := l.RecordHolders(vip.Address, sampleEvery, 80*time.Second)
	defer rec.Stop()

	vipPrefix := vip.Address.String() + "/32"
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"ip addr del", func() error { return ip(owner, "addr", "del", vipPrefix, "dev", netlab.Iface) }},
		{"ip addr flush then node address back", func() error {
			if err := ip(owner, "addr", "flush", "dev", netlab.Iface); err != nil {
				return err
			}
			return ip(owner, "addr", "add", owner.IP.String()+"/24", "dev", netlab.Iface)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repairs := metricOf(t, l, owner, "vipd_vip_repairs_total", "vip="+vip.Name)
			logFrom := len(owner.MustVipdLog(t))
			ev := pr.Mark(tc.name)
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
			done := time.Now()
			if err := pr.WaitServedBy(owner.Name, servedRun, ev.Time, 5*time.Second); err != nil {
				t.Fatalf("after %s on %s: %v", tc.name, owner.Name, err)
			}
			window := netlab.ProbesBetween(pr.Probes(), ev.Time, time.Time{})
			failed, by := netlab.Served(window)
			run, gap := netlab.LongestFailure(window, probeInterval)
			again := answeredAgain(window, ev.Time)
			samples := rec.Samples().Between(ev.Time, time.Time{})
			gone, wasGone := samples.First(func(s netlab.HolderSample) bool { return !s.Has(owner.Name) })
			back := "never seen missing by the 20 ms sampler"
			if wasGone {
				if b, ok := samples.Between(gone.At, time.Time{}).First(func(s netlab.HolderSample) bool { return s.Has(owner.Name) }); ok {
					back = "back on " + owner.Name + " after " + b.At.Sub(ev.Time).Round(time.Millisecond).String()
				}
			}
			t.Logf("%s on %s (took %v): client: %d of %d probes failed, longest gap %v (%d in a row), answered again %v after the event; holders: %s; address %s",
				tc.name, owner.Name, done.Sub(ev.Time).Round(time.Millisecond), failed, len(window), gap.Round(time.Millisecond), run,
				again.Round(time.Millisecond), samples.Summary(), back)
			if gap >= maxRepairGap || again < 0 || again >= maxRepairGap+probeInterval {
				t.Errorf("%s: client gap %v (answered again %v after the event), want under %v", tc.name, gap, again, maxRepairGap)
			}
			for name := range by {
				if name != owner.Name {
					t.Errorf("%s: client answered by %s (%d probes); want only %s, the VIP repaired in place: %v", tc.name, name, by[name], owner.Name, by)
				}
			}
			if two := samples.Where(func(s netlab.HolderSample) bool { return len(s.Holders) > 1 }); len(two) > 0 {
				t.Errorf("%s: %d samples with two holders: %v", tc.name, len(two), samples.Transitions())
			}
			if h, err := l.WaitOneHolder(vip, 2*time.Second); err != nil || h != owner.Name {
				t.Errorf("after %s: holder %q (%v), want %s", tc.name, h, err, owner.Name)
			}
			// The repair is visible to an operator: the counter, the event
			// and the log line.
			// ip addr flush deletes in rounds until nothing is left, so it
			// can remove the VIP again right after vipd put it back: one
			// repair per removal, at least one.
			var now float64
			ok, _ := netlab.Eventually(3*time.Second, 100*time.Millisecond, func() (bool, string) {
				now = metricOf(t, l, owner, "vipd_vip_repairs_total", "vip="+vip.Name)
				return now > repairs, ""
			})
			if !ok {
				t.Errorf("%s: vipd_vip_repairs_total{vip=%q} on %s stayed %v, want more", tc.name, vip.Name, owner.Name, repairs)
			}
			drift := netlab.VipdEventsSince(l.VipdEvents(t, owner, "drift"), ev.Time)
			t.Logf("%s: %v repairs counted, %d drift events", tc.name, now-repairs, len(drift))
			if len(drift) == 0 || float64(len(drift)) != now-repairs {
				t.Errorf("%s: %d drift events on %s since the event, %v repairs counted; want as many events as repairs, at least one: %+v", tc.name, len(drift), owner.Name, now-repairs, drift)
			}
			if tc.name == "ip addr del" && now-repairs != 1 {
				t.Errorf("%s: %v repairs counted, want 1 for one removal", tc.name, now-repairs)
			}
			for _, e := range drift {
				if e.VIP != vip.Name || e.Node != owner.Name {
					t.Errorf("%s: drift event %+v, want VIP %s on %s", tc.name, e, vip.Name, owner.Name)
				}
			}
			if line, ok := waitLog(t, owner, logFrom, time.Second, "held VIP missing from the network", "vip="+vip.Name); !ok {
				t.Errorf("%s: no \"held VIP missing\" line in %s's log:\n%s", tc.name, owner.Name, owner.MustVipdLog(t)[logFrom:])
			} else {
				t.Logf("%s log: %s", owner.Name, strings.TrimSpace(line))
			}
		})
	}
	if _, errs := rec.Stop(); len(errs) > 0 {
		t.Errorf("sampling holders: %d errors, first: %s", len(errs), errs[0])
	}
}

// maxRecreateGap is the proof's bound for the owner's interface deleted and
// created again: the VIP answers again within 2 s.
const maxRecreateGap = 2 * time.Second

// TestInterfaceRecreated deletes the owner's interface (a veth: its bridge
// port goes with it) and creates it again at once with the same name, MAC
// and node address, as a network manager would after a driver reload: the
// VIP is gone with the interface, and the client must see it again within
// 2 s, after which exactly one node holds it (every status agreeing) and no
// sample ever shows two holders.
//
// "Deleted for 3 s" leaves the interface away long enough for the others to
// declare the owner dead and take the VIP over; when it is back, the old
// owner must rejoin without taking the VIP back or holding it alongside.
func TestInterfaceRecreated(t *testing.T) {
	l, vip, _ := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 90 * time.Second})
	defer pr.Stop()
	rec := l.RecordHolders(vip.Address, sampleEvery, 80*time.Second)
	defer rec.Stop()

	for _, tc := range []struct {
		name string
		away time.Duration
	}{
		{"recreated at once", 0},
		{"deleted for 3s", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder, err := l.WaitOneHolder(vip, l.Settle)
			if err != nil {
				t.Fatalf("before: %v", err)
			}
			x := l.Node(holder)
			if err := pr.WaitServedBy(x.Name, servedRun, time.Now(), 5*time.Second); err != nil {
				t.Fatalf("before: %v", err)
			}
			logFrom := len(x.MustVipdLog(t))
			ev := pr.Mark(tc.name)
			if err := l.DeleteLink(x); err != nil {
				t.Fatal(err)
			}
			deleted := time.Now()
			time.Sleep(tc.away)
			recreated := time.Now()
			if err := l.RecreateLink(x); err != nil {
				t.Fatalf("recreate %s on %s: %v", netlab.Iface, x.Name, err)
			}
			up := time.Now()
			// Answered again: servedRun probes in a row by one node.
			var by string
			ok, _ := netlab.Eventually(l.Settle, 20*time.Millisecond, func() (bool, string) {
				w := netlab.ProbesBetween(pr.Probes(), ev.Time, time.Time{})
				run, cur := 0, ""
				for _, p := range w {
					switch {
					case !p.OK:
						run, cur = 0, ""
					case p.Server == cur:
						run++
					default:
						run, cur = 1, p.Server
					}
				}
				by = cur
				return run >= servedRun, ""
			})
			if !ok {
				t.Fatalf("%s: the client was not answered %d times in a row within %v", tc.name, servedRun, l.Settle)
			}
			final, err := l.WaitOneHolder(vip, l.Settle)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			converged := time.Now()
			time.Sleep(2 * time.Second) // and it stays so
			if h, err := l.OneHolder(vip); err != nil || h != final {
				t.Errorf("%s: 2s after converging: holder %q (%v), want %s", tc.name, h, err, final)
			}
			if err := l.WaitAlive(x, l.Nodes, netlab.RejoinInterval+5*time.Second); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			window := netlab.ProbesBetween(pr.Probes(), ev.Time, time.Time{})
			failed, servers := netlab.Served(window)
			run, gap := netlab.LongestFailure(window, probeInterval)
			again := answeredAgain(window, ev.Time)
			samples := rec.Samples().Between(ev.Time, time.Time{})
			t.Logf("%s on %s (deleted in %v, away %v, recreated in %v): client: %d of %d probes failed, longest gap %v (%d in a row), answered again %v after the delete, by %s (servers %v); one holder (%s) agreed by every node %v after the delete; holders: %s; transitions %v",
				tc.name, x.Name, deleted.Sub(ev.Time).Round(time.Millisecond), recreated.Sub(deleted).Round(time.Millisecond),
				up.Sub(recreated).Round(time.Millisecond), failed, len(window), gap.Round(time.Millisecond), run,
				again.Round(time.Millisecond), by, servers, final, converged.Sub(ev.Time).Round(time.Millisecond), samples.Summary(), samples.Transitions())
			for _, line := range netlab.LogLines(x.MustVipdLog(t)[logFrom:], "level=") {
				if !strings.Contains(line, "level=DEBUG") {
					t.Logf("%s: %s", x.Name, line)
				}
			}
			if tc.away == 0 && (gap >= maxRecreateGap || again < 0 || again >= maxRecreateGap+probeInterval) {
				t.Errorf("%s: client gap %v (answered again %v after the delete), want under %v", tc.name, gap, again, maxRecreateGap)
			}
			if tc.away > 0 && (again < 0 || again >= maxRecreateGap) {
				t.Errorf("%s: answered again %v after the delete, want under %v: the others take over while the interface is away", tc.name, again, maxRecreateGap)
			}
			if two := samples.Where(func(s netlab.HolderSample) bool { return len(s.Holders) > 1 }); len(two) > 0 {
				t.Errorf("%s: %d samples with two holders: %v", tc.name, len(two), samples.Transitions())
			}
			if by != final {
				t.Errorf("%s: client settled on %s, but %s holds the VIP", tc.name, by, final)
			}
		})
	}
	if _, errs := rec.Stop(); len(errs) > 0 {
		t.Errorf("sampling holders: %d errors, first: %s", len(errs), errs[0])
	}
}
