package drain

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/agent"
	"github.com/vipd/vipd/lab/netlab"
)

const (
	healthInterval = 200 * time.Millisecond
	healthFall     = 3
	healthRise     = 2
)

// healthOpts checks the node's own lab HTTP server (netlab.HTTPPort on
// loopback) every 200 ms with fall 3, rise 2.
func healthOpts(t *testing.T) netlab.VipdOptions {
	t.Helper()
	o := netlab.VipdOptions{}
	o.VIPs = []netlab.VIP{{
		Name:           "apiserver",
		Address:        netlab.VIP4,
		HealthURL:      fmt.Sprintf("http://127.0.0.1:%d/readyz", netlab.HTTPPort),
		HealthInterval: healthInterval.String(),
	}}
	// netlab.VIP has no fields for these: Extra is appended after the
	// last table, which is this VIP's [vip.health].
	o.Extra = fmt.Sprintf("timeout = %q\nrise = %d\nfall = %d", healthInterval.String(), healthRise, healthFall)
	return o
}

// checkHealthConfig checks that the rendered configuration puts Extra into
// [vip.health], so the test runs with the fall and rise it claims.
func checkHealthConfig(t *testing.T, l *netlab.Lab, o netlab.VipdOptions) {
	t.Helper()
	cfg := l.VipdConfig(l.Nodes[0], o)
	health := strings.LastIndex(cfg, "[vip.health]")
	if health < 0 || strings.LastIndex(cfg, "[") > health || !strings.Contains(cfg[health:], fmt.Sprintf("fall = %d", healthFall)) {
		t.Fatalf("rise/fall did not land in [vip.health]:\n%s", cfg)
	}
}

// TestHealthFailureMovesVIP stops the owner's HTTP server, which its health
// check probes: the VIP must be on another node, and a client served by it,
// within fall x interval + 1 s of the stop.
func TestHealthFailureMovesVIP(t *testing.T) {
	o := healthOpts(t)
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true, Vipd: o})
	checkHealthConfig(t, l, o)
	for _, n := range l.Nodes {
		if err := l.WaitMember(n, l.Nodes, 5*time.Second, "healthy", func(m netlab.Member) bool { return m.Healthy }); err != nil {
			t.Fatal(err)
		}
	}
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 30 * time.Second})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before the health failure: %v", err)
	}
	rec := l.RecordHolders(vip.Address, 10*time.Millisecond, 20*time.Second)
	bound := healthFall*healthInterval + time.Second

	ev := pr.Mark("stop httpd " + owner.Name)
	if err := l.HTTP(owner).Stop(syscall.SIGTERM, 5*time.Second); err != nil {
		t.Fatalf("stop httpd on %s: %v", owner.Name, err)
	}
	stopped := time.Now()
	t.Logf("httpd on %s stopped in %v", owner.Name, stopped.Sub(ev.Time).Round(time.Millisecond))

	next, err := l.WaitMoved(vip, owner.Name, l.Settle)
	if err != nil {
		rec.Stop()
		t.Fatalf("after the health failure on %s: want the VIP on one other node: %v", owner.Name, err)
	}
	if err := pr.WaitServedBy(next, 10, ev.Time, 5*time.Second); err != nil {
		t.Errorf("after the health failure: %v", err)
	}
	samples, errs := rec.Stop()
	checkSamplingErrs(t, errs)
	t.Logf("holders: %s; %v", samples.Summary(), samples.Transitions())
	appeared, ok := samples.First(func(s netlab.HolderSample) bool { return s.At.After(ev.Time) && s.Has(next) })
	if !ok {
		t.Fatalf("no sample saw %s holding %s", next, vip.Address)
	}
	moved := appeared.At.Sub(ev.Time)
	released, _ := samples.First(func(s netlab.HolderSample) bool { return s.At.After(ev.Time) && !s.Has(owner.Name) })
	served, ok := firstServedBy(netlab.ProbesBetween(pr.Probes(), ev.Time, time.Time{}), owner.Name)
	if !ok {
		t.Fatalf("no probe was served by another node than %s", owner.Name)
	}
	toServed := served.Start.Sub(ev.Time)
	t.Logf("health failure on %s: VIP on %s %v after the stop, released by %s after %v, client first served by %s after %v (bound %v); timeline:\n%s",
		owner.Name, next, moved.Round(time.Millisecond), owner.Name, released.At.Sub(ev.Time).Round(time.Millisecond),
		served.Server, toServed.Round(time.Millisecond), bound, timeline(pr))
	if moved > bound {
		t.Errorf("VIP appeared on %s %v after the health endpoint of %s stopped, want within fall x interval + 1s = %v", next, moved, owner.Name, bound)
	}
	if toServed > bound {
		t.Errorf("client first served by %s %v after the health endpoint of %s stopped, want within %v", served.Server, toServed, owner.Name, bound)
	}
	st, err := l.Status(owner)
	if err != nil {
		t.Fatal(err)
	}
	if vs, _ := st.VIP(vip.Name); vs.Healthy || vs.Held {
		t.Errorf("status of %s with its health endpoint down: %+v, want unhealthy and not held", owner.Name, vs)
	}
}

// TestBootstrapAllUnhealthy starts the cluster with no HTTP server, so every
// health check fails from the start (connection refused): the bootstrap
// fallback must still give the VIP to exactly one node, at every sample.
func TestBootstrapAllUnhealthy(t *testing.T) {
	o := healthOpts(t)
	l, vip, holder := netlab.StartCluster(t, netlab.Spec{Vipd: o})
	checkHealthConfig(t, l, o)
	rec := l.RecordHolders(vip.Address, sampleInterval, 10*time.Second)
	time.Sleep(3 * time.Second)
	samples, errs := rec.Stop()
	checkSamplingErrs(t, errs)
	t.Logf("bootstrap, every health check failing: %s", samples.Summary())
	if len(samples) < 100 {
		t.Errorf("only %d samples in 3s, want at least 100", len(samples))
	}
	if bad := samples.Where(func(s netlab.HolderSample) bool { return len(s.Holders) != 1 }); len(bad) > 0 {
		t.Errorf("%d of %d samples did not see exactly one holder: %v", len(bad), len(samples), samples.Transitions())
	}
	if bad := samples.Where(func(s netlab.HolderSample) bool { return !s.Has(holder.Name) }); len(bad) > 0 {
		t.Errorf("the holder changed from %s: %v", holder.Name, samples.Transitions())
	}
	for _, n := range l.Nodes {
		st, err := l.Status(n)
		if err != nil {
			t.Fatal(err)
		}
		vs, _ := st.VIP(vip.Name)
		if vs.Healthy {
			t.Errorf("%s reports %s healthy with no HTTP server: the test does not test the fallback", n.Name, vip.Name)
		}
		if vs.Owner != holder.Name {
			t.Errorf("%s: owner %q, want %s", n.Name, vs.Owner, holder.Name)
		}
	}
	// Status shows the reason of the current election ("current holder
	// stays owner"); the claim itself happened through the fallback, which
	// the hold event records.
	out, err := l.Vipctl(holder, "events", "--json")
	if err != nil {
		t.Fatalf("vipctl events --json on %s: %v", holder.Name, err)
	}
	var holds []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e struct{ Kind, VIP, Node, Reason string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("vipctl events --json line %q: %v", line, err)
		}
		if e.Kind == "hold" && e.VIP == vip.Name {
			holds = append(holds, e.Reason)
		}
	}
	if len(holds) != 1 || holds[0] != agent.ReasonBootstrap {
		t.Errorf("hold events of %s on %s: reasons %q, want exactly one, %q", vip.Name, holder.Name, holds, agent.ReasonBootstrap)
	}
}
