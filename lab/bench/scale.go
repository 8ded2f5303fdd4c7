package bench

import (
	"fmt"
	"io"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	scaleNodes = 16
	scaleVIPs  = 100
	// stableFor: a placement counts as settled once it held this long; the
	// time reported is when it was first reached.
	stableFor = 3 * time.Second
	// scaleTarget is the goal: every run settled within it.
	scaleTarget = 10 * time.Second
)

// placement returns, per node name, the VIPs of vips on its interface.
func placement(l *netlab.Lab, vips []netlab.VIP) (map[string][]netip.Addr, error) {
	want := map[netip.Addr]bool{}
	for _, v := range vips {
		want[v.Address] = true
	}
	out := map[string][]netip.Addr{}
	for _, n := range l.Nodes {
		ps, err := l.Addrs(n)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if want[p.Addr()] {
				out[n.Name] = append(out[n.Name], p.Addr())
			}
		}
	}
	return out, nil
}

// settled reports whether every VIP is on exactly one node and none on
// exclude.
func settled(pl map[string][]netip.Addr, vips []netlab.VIP, exclude *netlab.Host) (bool, string) {
	count := map[netip.Addr]int{}
	for name, as := range pl {
		if exclude != nil && name == exclude.Name && len(as) > 0 {
			return false, fmt.Sprintf("%d VIPs still on %s", len(as), name)
		}
		for _, a := range as {
			count[a]++
		}
	}
	missing, dup := 0, 0
	for _, v := range vips {
		switch c := count[v.Address]; {
		case c == 0:
			missing++
		case c > 1:
			dup++
		}
	}
	return missing == 0 && dup == 0, fmt.Sprintf("%d VIPs on no node, %d on several", missing, dup)
}

// settleTime polls the placement until it is settled and stays so for
// hold, and returns the time from t0 to when it was first reached.
func settleTime(l *netlab.Lab, vips []netlab.VIP, exclude *netlab.Host, t0 time.Time, hold, timeout time.Duration) (time.Duration, error) {
	var first time.Time
	ok, detail := netlab.Eventually(timeout, 100*time.Millisecond, func() (bool, string) {
		pl, err := placement(l, vips)
		if err != nil {
			return false, err.Error()
		}
		ok, detail := settled(pl, vips, exclude)
		switch {
		case !ok:
			first = time.Time{}
			return false, detail
		case first.IsZero():
			first = time.Now()
		}
		return time.Since(first) >= hold, detail
	})
	if !ok {
		return 0, fmt.Errorf("VIPs not settled after %v: %s", timeout, detail)
	}
	return first.Sub(t0), nil
}

// scale measures one run in a new lab and appends it to sc.
func scale(t *T, sc *Scale, run int, log io.Writer, logDir string) {
	no := false
	l := netlab.New(t, netlab.Options{Nodes: scaleNodes, Client: &no})
	keepLogs(t, l, logDir, fmt.Sprintf("scale-%d", run))
	o := netlab.VipdOptions{VIPs: manyVIPs(scaleVIPs, false), RejoinInterval: "5s", FailureDetection: "fast", LogLevel: "info"}
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, n := range l.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); l.StartVipd(n, o) }()
	}
	wg.Wait()
	d, err := settleTime(l, o.VIPs, nil, t0, stableFor, 2*time.Minute)
	if err != nil {
		t.Fatalf("after start: %v", err)
	}
	if len(sc.Starts) == 0 {
		sc.Start = d
	}
	sc.Starts = append(sc.Starts, d)
	fmt.Fprintf(log, "    scale run %d: %d VIPs settled on %d nodes %v after start\n", run, scaleVIPs, scaleNodes, d)

	pl, err := placement(l, o.VIPs)
	if err != nil {
		t.Fatalf("%v", err)
	}
	var leaver *netlab.Host
	for _, n := range l.Nodes {
		if leaver == nil || len(pl[n.Name]) > len(pl[leaver.Name]) {
			leaver = n
		}
	}
	moved := len(pl[leaver.Name])
	t0 = time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- l.StopVipd(leaver, syscall.SIGTERM, time.Minute) }()
	d, err = settleTime(l, o.VIPs, leaver, t0, stableFor, 2*time.Minute)
	if err != nil {
		t.Fatalf("after %s left: %v", leaver.Name, err)
	}
	if len(sc.Leaves) == 0 {
		sc.Leave, sc.Moved = d, moved
	}
	sc.Leaves = append(sc.Leaves, d)
	fmt.Fprintf(log, "    scale run %d: %d VIPs of %s moved %v after SIGTERM\n", run, moved, leaver.Name, d)
	if err := <-stopped; err != nil {
		t.Errorf("stop vipd on %s: %v", leaver.Name, err)
	}
}
