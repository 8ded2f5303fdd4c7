package fence

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// burnersPerCore is how many busy loops per CPU load the machine.
	burnersPerCore = 3
	// lossWindow is how long 30 % of the owner's incoming packets are
	// dropped; lossPercent how many.
	lossWindow  = 30 * time.Second
	lossPercent = 30
	lossTable   = "fenceloss"
	// statusEvery is how often `vipctl status` is read on every node.
	statusEvery = 500 * time.Millisecond
)

// TestNoFalseFailoverUnderLoad settles a 3-node cluster, then saturates the
// machine with CPU burners (burnersPerCore per core, plain busy loops
// bounded to 60 s) and drops 30 % of every packet arriving at the owner
// (nftables, netdev ingress in its namespace) for 30 s. The VIP must never
// move: every holder sample (netlink, every 10 ms; samples the loaded
// sampler missed are missed, not failures) shows exactly the owner. No
// member may be declared dead or gone: not in `vipctl status` read on every
// node every 0.5 s during and after the load, not in vipd's logs ("member
// state ... state=dead", "member gone (lease expired)"), not in the event
// stream; and the owner must not fence itself. Counts are logged.
func TestNoFalseFailoverUnderLoad(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, spec())
	start := time.Now()
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 3 * time.Minute})
	defer pr.Stop()
	rec := l.RecordHolders(vip.Address, sampleEvery, 2*time.Minute)
	defer rec.Stop()
	ss := startStatusSampler(l, statusEvery, 2*time.Minute)
	defer ss.stop()

	n := burnersPerCore * runtime.NumCPU()
	burners, err := l.StartBurners(n, 60*time.Second)
	if err != nil {
		t.Fatalf("start %d CPU burners: %v", n, err)
	}
	killBurners := func() {
		for _, b := range burners {
			b.Kill()
		}
	}
	t.Cleanup(killBurners)
	time.Sleep(2 * time.Second) // the load is on before the loss
	lossFrom := pr.Mark("loss")
	if err := l.DropIngressPercent(owner, lossTable, lossPercent); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lossWindow)
	if err := l.RemoveTable(owner, "netdev", lossTable); err != nil {
		t.Fatal(err)
	}
	lossTo := pr.Mark("loss over")
	time.Sleep(5 * time.Second) // still loaded, no loss
	killBurners()
	time.Sleep(3 * time.Second) // unloaded: anything that was pending shows now
	end := time.Now()
	samples, sampleErrs := rec.Stop()
	statuses := ss.stop()
	pr.Stop()

	// The VIP never moved.
	var maxStep time.Duration
	for i := 1; i < len(samples); i++ {
		maxStep = max(maxStep, samples[i].At.Sub(samples[i-1].At))
	}
	t.Logf("%d CPU burners on %d CPUs; %d%% of %s's incoming packets dropped for %v", n, runtime.NumCPU(), lossPercent, owner.Name, lossWindow)
	t.Logf("holders: %s; longest sampling step %s; %d sampling errors", samples.Summary(), ms(maxStep), len(sampleErrs))
	if len(samples) < int(lossWindow/sampleEvery)/10 {
		t.Errorf("only %d holder samples; want at least %d to trust them", len(samples), int(lossWindow/sampleEvery)/10)
	}
	if ok, first := onlyHolder(samples, owner.Name); !ok {
		t.Errorf("FALSE FAILOVER: the VIP did not stay on %s alone; first other sample %s; transitions: %s",
			owner.Name, first, strings.Join(samples.Transitions(), "; "))
	}
	gs := netlab.Analyze(pr.Probes(), []netlab.Event{lossFrom, lossTo}, probeInterval)
	for _, g := range gs {
		t.Logf("client, %s: %d of %d probes failed, longest gap %s, after: %q", g.Event.Label, g.Failed, g.Probes, ms(g.Outage), g.After)
	}

	// Nobody declared dead or gone, in status.
	bad, errs := 0, 0
	states := map[string]int{}
	for _, s := range statuses {
		if s.err != nil {
			errs++
			continue
		}
		for _, m := range s.st.Members {
			states[m.State]++
			if m.State != "alive" && m.State != "suspect" {
				if bad < 10 {
					t.Errorf("%s %s's status says %s is %s", s.at.Format("15:04:05.000"), s.node, m.Name, m.State)
				}
				bad++
			}
		}
		if s.st.Fence.State == "expired" && s.node == owner.Name {
			t.Errorf("%s %s's status shows its fence expired", s.at.Format("15:04:05.000"), s.node)
		}
	}
	t.Logf("vipctl status: %d reads (%d failed), member states seen %v, %d not alive or suspect", len(statuses), errs, states, bad)
	if len(statuses)-errs < 3*10 {
		t.Errorf("only %d status reads answered; want at least 30 to trust them", len(statuses)-errs)
	}

	// Nor in the logs.
	for _, nd := range l.Nodes {
		dead := nd.VipdLogBetween(t, start, end, "state=dead")
		gone := nd.VipdLogBetween(t, start, end, "member gone (lease expired)")
		fenced := nd.VipdLogBetween(t, start, end, "fenced:")
		suspect := nd.VipdLogBetween(t, start, end, "state=suspect")
		quorum := nd.VipdLogBetween(t, start, end, "no quorum")
		moves := nd.VipdLogBetween(t, start, end, "ownership change", "released VIP")
		t.Logf("%s log: %d dead, %d gone (lease expired), %d fenced, %d suspect, %d no quorum, %d ownership changes or releases",
			nd.Name, len(dead), len(gone), len(fenced), len(suspect), len(quorum), len(moves))
		for _, line := range append(append(append(append(dead, gone...), fenced...), quorum...), moves...) {
			t.Errorf("%s: %s", nd.Name, line)
		}
	}

	// Nor in the event stream.
	for _, nd := range l.Nodes {
		kinds := map[string]int{}
		for _, e := range l.VipdEvents(t, nd, "") {
			if e.Time.Before(start) {
				continue
			}
			kinds[e.Kind]++
			switch {
			case e.Kind == "fence", e.Kind == "ownership", e.Kind == "release",
				e.Kind == "membership" && (strings.Contains(e.Message, "lease expired") || strings.Contains(e.Message, "no quorum")):
				t.Errorf("%s event: %s %s node=%s %s %s", nd.Name, e.Time.Format("15:04:05.000"), e.Kind, e.Node, e.Reason, e.Message)
			}
		}
		t.Logf("%s events since the start: %v", nd.Name, kinds)
	}
}

// statusSample is one `vipctl status --json` of one node.
type statusSample struct {
	at   time.Time
	node string
	st   netlab.Status
	err  error
}

// statusSampler reads every node's status until stopped.
type statusSampler struct {
	quit chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	samples []statusSample
}

func startStatusSampler(l *netlab.Lab, every, bound time.Duration) *statusSampler {
	s := &statusSampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		deadline := time.Now().Add(bound)
		for time.Now().Before(deadline) {
			for _, n := range l.Nodes {
				st, err := l.Status(n)
				s.mu.Lock()
				s.samples = append(s.samples, statusSample{at: time.Now(), node: n.Name, st: st, err: err})
				s.mu.Unlock()
			}
			select {
			case <-s.quit:
				return
			case <-time.After(every):
			}
		}
	}()
	return s
}

func (s *statusSampler) stop() []statusSample {
	s.once.Do(func() { close(s.quit) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]statusSample(nil), s.samples...)
}
