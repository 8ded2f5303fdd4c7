package k8slab

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// requestBound is the longest a request through the VIP may spend
// outside the apiserver when the holder is lost (issue "After an
// unplanned failover, no request may hang"): the VIP's move, the client's
// SYN or data sent again, client-go's one-second wait before it sends a
// read again after a reset. The apiserver's own time (its etcd member
// waiting for a new leader, etcd's 7 s request timeout) is not the VIP's,
// and is left out through the apiservers' audit logs (audit.go).
const requestBound = 2 * time.Second

// LostRun is one event of TestNoRequestHangsWhenTheHolderIsLost, as the
// clients saw it from the event to the next one (the heal included).
type LostRun struct {
	Scenario string
	Run      int
	From     string
	// Event is when the holder was lost.
	Event   time.Time
	Clients ClientStats
}

// TestNoRequestHangsWhenTheHolderIsLost loses the VIP's holder
// ($VIPD_K8S_LOST_RUNS times, each of linkdown, nodedown and
// partition, in turn) under one control plane, one vipd cluster and one
// clients run, and checks that no request through the VIP spent more than
// requestBound outside the apiserver in any run. Each run: the lab
// steady, the clients live for a second and a second more, the event on the holder, the VIP on another node and every
// watch delivering again (bounded), the heal; a run's requests are those
// in flight at its event and those started after it, before the next. The
// slowest request per scenario, with and without the apiserver's own
// time, is logged, and the runs are written as JSON to
// $VIPD_K8S_LOST_RESULTS when set (docs/benchmarks.md, "Kubernetes
// clients").
//
// It runs only when $VIPD_K8S_LOST_RUNS is set: it has not passed on the
// loaded two-CPU machine it was written on yet (docs/benchmarks.md,
// "Slowest request when the holder is lost").
func TestNoRequestHangsWhenTheHolderIsLost(t *testing.T) {
	runs := 10
	if os.Getenv("VIPD_K8S_LOST_RUNS") == "" {
		t.Skip("set VIPD_K8S_LOST_RUNS (10: the bound's runs) to run it: not yet passing on a loaded machine (docs/benchmarks.md)")
	}
	if s := os.Getenv("VIPD_K8S_LOST_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("VIPD_K8S_LOST_RUNS=%q: want a positive number", s)
		}
		runs = n
	}
	scenarios := []string{"linkdown", "nodedown", "partition"}
	l := netlab.New(t, netlab.Options{})
	cp := Start(t, l)
	// The healed node rejoins within a second (the runs follow each other;
	// the event itself does not depend on it).
	a := cp.NewVipd(netlab.VipdOptions{RejoinInterval: "1s", LogLevel: "info"})
	if err := a.StartAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.WaitSteady(a, steadyTimeout); err != nil {
		t.Fatal(err)
	}
	// The tool ends itself after -duration (10 min by default): longer
	// than the runs can take, the test's timeout bounding them.
	cl, err := cp.StartClients("-duration", (time.Duration(runs*len(scenarios))*2*time.Minute + 10*time.Minute).String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Kill()
	if err := cl.WaitLive(liveTimeout); err != nil {
		t.Fatal(err)
	}
	// $VIPD_K8S_LOST_BUDGET (a duration) stops starting runs after it,
	// for a long measurement on a loaded machine: the runs done are
	// reported.
	var budget time.Duration
	if s := os.Getenv("VIPD_K8S_LOST_BUDGET"); s != "" {
		if budget, err = time.ParseDuration(s); err != nil {
			t.Fatalf("VIPD_K8S_LOST_BUDGET: %v", err)
		}
	}
	start := time.Now()
	var lost []LostRun
	var runErr error
	done := 0
runs:
	for i := 1; i <= runs; i++ {
		if budget > 0 && time.Since(start) > budget {
			t.Logf("stopped after %d runs of each scenario: $VIPD_K8S_LOST_BUDGET %v spent", done, budget)
			break
		}
		for _, sc := range scenarios {
			if err := cp.loseHolder(a, cl, sc, i, &lost, t.Logf); err != nil {
				// The runs before it are still reported.
				runErr = fmt.Errorf("%s, run %d: %w", sc, i, err)
				break runs
			}
		}
		done = i
	}
	if runErr == nil {
		if _, err := cp.WaitSteady(a, steadyTimeout); err != nil {
			runErr = fmt.Errorf("after the last run: %w", err)
		}
	}
	if len(lost) == 0 {
		t.Fatal(runErr)
	}
	// Every request started in the last run has ended (the tool bounds
	// each at 10 s) before the clients stop.
	time.Sleep(time.Until(lost[len(lost)-1].Event.Add(11 * time.Second)))
	end := time.Now()
	r, err := cl.Stop()
	if err != nil {
		t.Errorf("stop the clients: %v", err)
		if r, err = cl.Run(); err != nil {
			t.Fatal(err)
		}
	}
	if r.Audit, err = cp.Audit(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs of %v in %v", done, scenarios, end.Sub(start).Round(time.Second))
	slowest := map[string]*LostRun{}
	slowestOutside := map[string]*LostRun{}
	for i := range lost {
		lr := &lost[i]
		to := end
		if i+1 < len(lost) {
			to = lost[i+1].Event
		}
		lr.Clients = r.WithRequests(func(start, end time.Time) bool { return runOf(lost, start, end) == i }).Stats(lr.Event, to)
		c := lr.Clients
		t.Logf("%s run %d (%s lost): %d of %d requests failed, longest %v, longest outside the apiserver %v (%s), every watch delivering after %v",
			lr.Scenario, lr.Run, lr.From, c.Failed, c.Requests, c.LongestRequest.Round(time.Millisecond),
			c.LongestOutside.Round(time.Millisecond), c.OutsideRequest, c.Delivering.Round(time.Millisecond))
		if c.Requests == 0 {
			t.Errorf("%s run %d: no request in the run: the clients did not run", lr.Scenario, lr.Run)
		}
		if c.LongestOutside > requestBound {
			t.Errorf("%s run %d: a request spent %v outside the apiserver (%s), want at most %v",
				lr.Scenario, lr.Run, c.LongestOutside.Round(time.Millisecond), c.OutsideRequest, requestBound)
		}
		if s := slowest[lr.Scenario]; s == nil || c.LongestRequest > s.Clients.LongestRequest {
			slowest[lr.Scenario] = lr
		}
		if s := slowestOutside[lr.Scenario]; s == nil || c.LongestOutside > s.Clients.LongestOutside {
			slowestOutside[lr.Scenario] = lr
		}
	}
	for _, sc := range scenarios {
		s, o := slowest[sc], slowestOutside[sc]
		if s == nil {
			continue
		}
		t.Logf("%s over %d runs: slowest request %v (run %d), slowest outside the apiserver %v (run %d: %s)",
			sc, done, s.Clients.LongestRequest.Round(time.Millisecond), s.Run, o.Clients.LongestOutside.Round(time.Millisecond), o.Run, o.Clients.OutsideRequest)
	}
	if runErr != nil {
		t.Error(runErr)
	}
	if path := os.Getenv("VIPD_K8S_LOST_RESULTS"); path != "" {
		b, _ := json.MarshalIndent(lost, "", "  ")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// runOf is the run a request belongs to: the first whose event came while
// it was in flight, else the one in which it started (-1: before the
// first).
func runOf(lost []LostRun, start, end time.Time) int {
	i, _ := slices.BinarySearchFunc(lost, start, func(lr LostRun, t time.Time) int { return lr.Event.Compare(t) })
	if i < len(lost) && !lost[i].Event.After(end) {
		return i
	}
	return i - 1
}

// loseHolder is one run of TestNoRequestHangsWhenTheHolderIsLost: the
// lab steady, the clients live, a second, scenario on the holder, the VIP on another node and every
// watch of cl delivering an object created after the event (bounded),
// the heal. It appends the run to lost.
func (cp *ControlPlane) loseHolder(a Agent, cl *Clients, scenario string, run int, lost *[]LostRun, logf func(string, ...any)) error {
	holder, err := cp.WaitSteady(a, steadyTimeout)
	if err != nil {
		return fmt.Errorf("before the event: %w", err)
	}
	// The clients clean again for a second, and a second more: the
	// holder has published their reconnects (every second).
	if err := cl.WaitLive(liveTimeout); err != nil {
		return fmt.Errorf("before the event: %w", err)
	}
	time.Sleep(time.Second)
	ev := time.Now()
	*lost = append(*lost, LostRun{Scenario: scenario, Run: run, From: holder.Name, Event: ev})
	heal, actErr := cp.act(a, scenario, holder, logf)
	if actErr == nil {
		ok, detail := netlab.Eventually(backTimeout, 50*time.Millisecond, func() (bool, string) {
			hs, err := cp.Lab.AddrHolders(cp.VIP)
			if err != nil {
				return false, err.Error()
			}
			if !slices.ContainsFunc(hs, func(h string) bool { return h != holder.Name }) {
				return false, fmt.Sprintf("holders %v", hs)
			}
			r, err := cl.Run()
			if err != nil {
				return false, err.Error()
			}
			stale := r.Stale(ev, time.Now())
			return len(stale) == 0, fmt.Sprintf("not delivering: %v", stale)
		})
		if !ok {
			actErr = fmt.Errorf("the VIP not on another node, or watches not delivering, within %v: %s", backTimeout, detail)
		}
	}
	if heal != nil {
		if err := heal(); err != nil && actErr == nil {
			actErr = fmt.Errorf("heal: %w", err)
		}
	}
	if actErr != nil {
		return actErr
	}
	logf("%s run %d: %s lost, moved and healed in %v", scenario, run, holder.Name, time.Since(ev).Round(10*time.Millisecond))
	return nil
}
