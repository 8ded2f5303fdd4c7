package bench

import (
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// ColdSizes are the cluster sizes of the cold-start part.
var ColdSizes = []int{3, 5}

// ColdDelays are when the first apiserver turns ready, counted from the
// moment every vipd was started: at once (it was ready when the power came
// back, the others were not), and after the cluster has formed and elected
// a holder by the bootstrap fallback (the usual order: etcd and the
// apiservers take longer to boot than vipd).
var ColdDelays = []time.Duration{0, 5 * time.Second}

// coldTarget is the goal: the VIP answered by the first healthy apiserver
// within 2 s of it turning ready.
const coldTarget = 2 * time.Second

// ColdTrial is one cold start: every vipd of a cluster started at once with
// every apiserver unready (its /readyz failing), then one apiserver turning
// ready.
type ColdTrial struct {
	// Nodes in the cluster.
	Nodes int
	// Delay from starting every vipd to the first apiserver turning ready
	// (the one asked for; the measured one is Ready).
	Delay time.Duration
	// Run number, from 1.
	Run int
	// Ready is from starting the vipds to the apiserver turning ready.
	Ready time.Duration
	// First is the node whose apiserver turned ready; Bootstrap is the
	// node that held the VIP (by the bootstrap fallback) at that moment,
	// "" when none did yet.
	First, Bootstrap string
	// Answered is from the apiserver turning ready to the first of
	// servedRun probes in a row answered through the VIP by its node.
	Answered time.Duration
	// Err says why the trial did not complete.
	Err string `json:",omitempty"`
}

// coldStart measures a cluster of n nodes at every delay, runs times each.
func coldStart(t *T, n, runs int, log io.Writer, logDir string) []ColdTrial {
	var out []ColdTrial
	l := netlab.New(t, netlab.Options{Nodes: n})
	keepLogs(t, l, logDir, fmt.Sprintf("coldstart-%d", n))
	l.StartHTTPAll()
	o := netlab.VipdOptions{VIPs: []netlab.VIP{{Name: "apiserver", Address: netlab.VIP4, HealthURL: healthURL}}, LogLevel: "info"}
	for _, d := range ColdDelays {
		for run := 1; run <= runs; run++ {
			tr := coldTrial(l, o, d, run)
			if tr.Err != "" {
				fmt.Fprintf(log, "    coldstart %d nodes, ready after %v, run %d: failed: %s\n", n, d, run, tr.Err)
			} else {
				fmt.Fprintf(log, "    coldstart %d nodes, ready after %v, run %d: %s ready %v after start (holder %q): answered %v later\n",
					n, d, run, tr.First, tr.Ready.Round(time.Millisecond), tr.Bootstrap, tr.Answered.Round(time.Millisecond))
			}
			out = append(out, tr)
		}
	}
	return out
}

// coldTrial runs one cold start in l: every apiserver unready, every vipd
// started at once, one apiserver ready after delay (one not holding the
// VIP if a node holds it by then), and the time until the client is
// answered by it. It stops every vipd before it returns.
func coldTrial(l *netlab.Lab, o netlab.VipdOptions, delay time.Duration, run int) (tr ColdTrial) {
	tr = ColdTrial{Nodes: len(l.Nodes), Delay: delay, Run: run}
	defer func() {
		for _, n := range l.Nodes {
			if v := l.Vipd(n); v != nil && v.Running() {
				v.Stop(syscall.SIGTERM, 20*time.Second)
			}
		}
	}()
	for _, n := range l.Nodes {
		if err := l.SetReadyz(n, "d"); err != nil {
			tr.Err = err.Error()
			return tr
		}
	}
	// The first apiserver: rotate over the nodes from run to run.
	first := l.Nodes[(run-1)%len(l.Nodes)]
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Timeout: probeTimeout, Duration: time.Minute})
	defer pr.Stop()
	t0 := time.Now()
	var ready time.Time
	if delay == 0 {
		if err := l.SetReadyz(first, ""); err != nil {
			tr.Err = err.Error()
			return tr
		}
		ready = time.Now()
	}
	errs := make([]error, len(l.Nodes))
	var wg sync.WaitGroup
	for i, n := range l.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.TryStartVipdConfig(n, l.VipdConfig(n, o))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tr.Err = err.Error()
			return tr
		}
	}
	if delay > 0 {
		// Unready everywhere, the bootstrap fallback elects a holder.
		h, err := l.WaitSteady(o.VIPs[0], steadyTimeout)
		if err != nil {
			tr.Err = "bootstrap holder: " + err.Error()
			return tr
		}
		tr.Bootstrap = h.Name
		if first == h {
			first = l.Nodes[(run)%len(l.Nodes)]
		}
		if w := delay - time.Since(t0); w > 0 {
			time.Sleep(w)
		}
		ready = time.Now()
		if err := l.SetReadyz(first, ""); err != nil {
			tr.Err = err.Error()
			return tr
		}
	}
	tr.First, tr.Ready = first.Name, ready.Sub(t0)
	if err := pr.WaitServedBy(first.Name, servedRun, ready, moveTimeout); err != nil {
		tr.Err = err.Error()
		return tr
	}
	tr.Answered = servedFrom(pr.Probes(), first.Name, ready)
	return tr
}

// servedFrom returns the time from since to the start of the first run of
// servedRun probes in a row answered by name (0 when there is none).
func servedFrom(ps []netlab.Probe, name string, since time.Time) time.Duration {
	var runStart time.Time
	n := 0
	for _, p := range ps {
		if p.Start.Before(since) {
			continue
		}
		if !p.OK || p.Server != name {
			n = 0
			continue
		}
		if n == 0 {
			runStart = p.Start
		}
		if n++; n >= servedRun {
			return runStart.Sub(since)
		}
	}
	return 0
}
