package faults

import (
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// TestApiserverDownWhileMembershipChurns runs every node with a health
// check that always fails (the URL is a closed port: the apiserver is down
// everywhere, as during cluster bootstrap) and restarts the nodes one at a
// time. The bootstrap fallback (no healthy node: alive and not withdrawn
// is enough) must keep exactly one holder at every sample outside the
// restart handoffs; the samples inside them are reported.
func TestApiserverDownWhileMembershipChurns(t *testing.T) {
	o := netlab.VipdOptions{}
	o.VIPs = []netlab.VIP{{Name: "apiserver", Address: netlab.VIP4,
		HealthURL: "http://127.0.0.1:1/readyz", HealthInterval: "250ms"}}
	l, vip, holder := netlab.StartCluster(t, spec(func(l *netlab.Lab, h *netlab.Host) string { return l.VipdConfig(h, o) }))
	for _, n := range l.Nodes {
		st, err := l.Status(n)
		if err != nil {
			t.Fatal(err)
		}
		vs, _ := st.VIP(vip.Name)
		if vs.Healthy {
			t.Fatalf("%s reports %s healthy with its health URL on a closed port; the test would not exercise the fallback", n.Name, vip.Name)
		}
		if n == holder {
			t.Logf("bootstrap fallback: %s holds %s, reason %q", n.Name, vip.Address, vs.Reason)
		}
	}
	s := startSampler(t, l, vip, 120*time.Second)
	var windows []window
	for _, n := range l.Nodes {
		time.Sleep(2 * time.Second) // a steady stretch between restarts
		before, _ := l.OneHolder(vip)
		t0 := time.Now()
		l.StopCleanly(t, n, l.StopTimeout)
		h1, err := l.WaitOneHolder(vip, maxRestartConverge, l.Others(n)...)
		afterStop := time.Since(t0)
		if err != nil {
			t.Fatalf("%s stopped, apiserver down everywhere: want one holder among the others within %v: %v", n.Name, maxRestartConverge, err)
		}
		t1 := time.Now()
		l.StartVipd(n, o)
		if err := l.WaitAlive(n, l.Nodes, l.Settle); err != nil {
			t.Fatalf("%s restarted: %v", n.Name, err)
		}
		h2, err := l.WaitOneHolder(vip, maxRestartConverge)
		windows = append(windows, window{"restart " + n.Name, t0, time.Now()})
		if err != nil {
			t.Fatalf("%s restarted, apiserver down everywhere: want one holder within %v: %v", n.Name, maxRestartConverge, err)
		}
		t.Logf("restart %s (held by %s): one holder (%s) %v after SIGTERM; one holder (%s) %v after start",
			n.Name, before, h1, afterStop.Round(time.Millisecond), h2, time.Since(t1).Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	ss := s.stop()
	in, out := split(ss, windows)
	t.Logf("during restart handoffs: %s", stats(in))
	st := stats(out)
	t.Logf("outside restart handoffs: %s", st)
	if st.samples < 200 {
		t.Errorf("only %d samples outside the restarts; want at least 200", st.samples)
	}
	if st.multi > 0 || st.none > 0 || len(st.errs) > 0 {
		t.Errorf("apiserver down, outside restart handoffs: want exactly one holder in every sample: %s", st)
	}
	for _, n := range l.Nodes {
		st, err := l.Status(n)
		if err != nil {
			t.Fatal(err)
		}
		if vs, _ := st.VIP(vip.Name); vs.Healthy {
			t.Errorf("%s reports %s healthy at the end; the health URL is a closed port", n.Name, vip.Name)
		}
	}
}
