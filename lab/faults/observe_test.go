package faults

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// TestMetricsAndEvents checks what an operator sees: /metrics on every node
// (the VIP held on the holder only, 3 alive members, the ownership change
// counter going up on a withdraw) and `vipctl events --follow --json` on a
// non-owner streaming the ownership event of the owner's withdraw.
func TestMetricsAndEvents(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, spec(func(l *netlab.Lab, h *netlab.Host) string {
		return l.EditedVipdConfig(t, h, netlab.VipdOptions{}, `(?m)^(socket = .*)$`, fmt.Sprintf("$1\nmetrics_address = \"127.0.0.1:%d\"", metricsPort))
	}))
	rest := l.Others(owner)
	observer := rest[0]

	scrapeAll := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, n := range l.Nodes {
			text, err := l.Metrics(n, metricsPort)
			if err != nil {
				t.Fatalf("scrape %s: %v", n.Name, err)
			}
			out[n.Name] = text
		}
		return out
	}
	// Metrics follow the reconcile loop; give gossip a moment to settle.
	var before map[string]string
	ok, detail := netlab.Eventually(5*time.Second, 200*time.Millisecond, func() (bool, string) {
		before = scrapeAll()
		for _, n := range l.Nodes {
			want := 0.0
			if n == owner {
				want = 1
			}
			if v, found := netlab.Metric(before[n.Name], "vipd_vip_held", "vip="+vip.Name); !found || v != want {
				return false, fmt.Sprintf("%s: vipd_vip_held{vip=%q} = %v (found %t), want %v", n.Name, vip.Name, v, found, want)
			}
			if v, found := netlab.Metric(before[n.Name], "vipd_members", "state=alive"); !found || v != 3 {
				return false, fmt.Sprintf("%s: vipd_members{state=\"alive\"} = %v (found %t), want 3", n.Name, v, found)
			}
			if v, _ := netlab.Metric(before[n.Name], "vipd_quorum"); v != 1 {
				return false, fmt.Sprintf("%s: vipd_quorum = %v, want 1", n.Name, v)
			}
		}
		return true, ""
	})
	if !ok {
		t.Fatalf("metrics in steady state: %s", detail)
	}

	lines := &lineCollector{}
	ev, err := l.Start(observer, "events "+observer.Name, filepath.Join(observer.Dir, "events.log"), lines,
		l.Tools.Vipctl, "--socket", observer.Socket(), "events", "--follow", "--json")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Stop(syscall.SIGTERM, 5*time.Second)
	// The backlog (at least the initial ownership event) arrives at once:
	// once it has, the stream is connected.
	if ok, _ := netlab.Eventually(5*time.Second, 50*time.Millisecond, func() (bool, string) { return len(lines.Lines()) > 0, "" }); !ok {
		t.Fatalf("vipctl events --follow on %s: no line within 5s (running %t, exit %v)", observer.Name, ev.Running(), ev.ExitErr())
	}
	backlog := len(lines.Lines())

	withdrawAt := time.Now()
	if out, err := l.Vipctl(owner, "withdraw"); err != nil {
		t.Fatalf("vipctl withdraw on %s: %v %s", owner.Name, err, out)
	}
	next, err := l.WaitMoved(vip, owner.Name, l.Settle)
	if err != nil {
		t.Fatalf("after withdraw: %v", err)
	}
	var got netlab.VipdEvent
	ok, detail = netlab.Eventually(10*time.Second, 50*time.Millisecond, func() (bool, string) {
		ls := lines.Lines()
		for _, line := range ls[backlog:] {
			var e netlab.VipdEvent
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				return true, fmt.Sprintf("not JSON: %q: %v", line, err)
			}
			if e.Kind == "ownership" && e.VIP == vip.Name && e.From == owner.Name {
				got = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d lines after the backlog: %q", len(ls)-backlog, ls[backlog:])
	})
	if !ok || got.Kind == "" {
		t.Fatalf("vipctl events --follow on %s: want an ownership event from %s within 10s of the withdraw: %s", observer.Name, owner.Name, detail)
	}
	t.Logf("event on %s %v after the withdraw: %+v", observer.Name, got.Time.Sub(withdrawAt).Round(time.Millisecond), got)
	if got.To != next {
		t.Errorf("ownership event: to %q, want %s (the node now holding %s)", got.To, next, vip.Address)
	}
	if got.Time.Before(withdrawAt.Add(-time.Second)) {
		t.Errorf("ownership event time %v is before the withdraw at %v", got.Time, withdrawAt)
	}

	var after map[string]string
	ok, detail = netlab.Eventually(5*time.Second, 200*time.Millisecond, func() (bool, string) {
		after = scrapeAll()
		for _, n := range l.Nodes {
			b, _ := netlab.Metric(before[n.Name], "vipd_ownership_changes_total", "vip="+vip.Name)
			a, _ := netlab.Metric(after[n.Name], "vipd_ownership_changes_total", "vip="+vip.Name)
			if a <= b {
				return false, fmt.Sprintf("%s: vipd_ownership_changes_total{vip=%q} %v before the withdraw, %v after; want more", n.Name, vip.Name, b, a)
			}
			want := 0.0
			if n.Name == next {
				want = 1
			}
			if v, _ := netlab.Metric(after[n.Name], "vipd_vip_held", "vip="+vip.Name); v != want {
				return false, fmt.Sprintf("%s: vipd_vip_held = %v after the withdraw, want %v", n.Name, v, want)
			}
		}
		if v, _ := netlab.Metric(after[owner.Name], "vipd_withdrawn"); v != 1 {
			return false, fmt.Sprintf("%s: vipd_withdrawn = %v, want 1", owner.Name, v)
		}
		return true, ""
	})
	if !ok {
		t.Errorf("metrics after the withdraw: %s", detail)
	}
	for _, n := range l.Nodes {
		b, _ := netlab.Metric(before[n.Name], "vipd_ownership_changes_total", "vip="+vip.Name)
		a, _ := netlab.Metric(after[n.Name], "vipd_ownership_changes_total", "vip="+vip.Name)
		t.Logf("%s: vipd_ownership_changes_total{vip=%q} %v -> %v", n.Name, vip.Name, b, a)
	}
}
