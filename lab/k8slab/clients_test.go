package k8slab

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// maxMoves is how often the VIP may change holder in each scenario with
// vipd (heal included): once, away from the node the event hit
// (preempt = false keeps it where it went); a rolling restart moves it at
// most once per node.
var maxMoves = map[string]int{"rolling": 3}

// TestClientsThroughFailovers runs every scenario once with vipd and real
// client-go clients through the VIP, and checks what must hold whatever
// the figures: the clients were clean before the event; every watch works
// again after it and again after the heal (no watch left blind: client-go
// recovers through the VIP); the VIP left the node the event hit, and
// moved no more than it had to; the cluster is steady afterwards. The
// figures (failed requests, watch stall, time until every watch is back,
// relists) are logged, and written as JSON to $VIPD_K8S_RESULTS when set;
// make bench compares them with keepalived's (docs/benchmarks.md).
func TestClientsThroughFailovers(t *testing.T) {
	l := netlab.New(t, netlab.Options{})
	cp := Start(t, l)
	a := cp.NewVipd(netlab.VipdOptions{RejoinInterval: "5s", LogLevel: "info"})
	if err := a.StartAll(); err != nil {
		t.Fatal(err)
	}
	scenarios := Scenarios
	if s := os.Getenv("VIPD_K8S_SCENARIOS"); s != "" {
		scenarios = splitList(s)
	}
	var trials []Trial
	for _, sc := range scenarios {
		t.Run(sc, func(t *testing.T) {
			start := time.Now()
			tr := cp.RunTrial(a, sc, 1, t.Logf)
			trials = append(trials, tr)
			c := tr.Clients
			t.Logf("%s (%v): %s -> %s, %d moves; clients: %d of %d requests failed (%v), longest %v; watch stall %v (%s; %d informers over %v), all back after %v, %d relists, %d watch errors; baseline: %d failed, stall %v",
				sc, time.Since(start).Round(time.Second), tr.From, tr.To, tr.Moves, c.Failed, c.Requests, c.FailedBy,
				c.LongestRequest.Round(time.Millisecond), c.Stall.Round(time.Millisecond), c.StallWatch, c.Stalled, LagLimit,
				c.Back.Round(time.Millisecond), c.Relists, c.WatchErrors, tr.Baseline.Failed, tr.Baseline.Stall.Round(time.Millisecond))
			if c.FirstError != "" {
				t.Logf("%s: first failed request: %s", sc, c.FirstError)
			}
			if tr.Err != "" {
				t.Fatalf("%s: %s", sc, tr.Err)
			}
			if tr.Baseline.Failed > 0 || tr.Baseline.Stall > time.Second || tr.Baseline.Requests == 0 {
				t.Errorf("%s: before the event the clients were not clean: %+v", sc, tr.Baseline)
			}
			if c.Watches != 20 || c.Requests == 0 {
				t.Errorf("%s: %d informers, %d requests: the clients did not run as configured", sc, c.Watches, c.Requests)
			}
			if len(c.NotBack) > 0 {
				t.Errorf("%s: watches never back: %v", sc, c.NotBack)
			}
			if sc != "rolling" && tr.Moves < 1 {
				t.Errorf("%s: the VIP never left %s", sc, tr.From)
			}
			if limit := max(1, maxMoves[sc]); tr.Moves > limit {
				t.Errorf("%s: the VIP changed holder %d times, want at most %d", sc, tr.Moves, limit)
			}
		})
	}
	if path := os.Getenv("VIPD_K8S_RESULTS"); path != "" {
		b, _ := json.MarshalIndent(trials, "", "  ")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Error(err)
		}
	}
}
