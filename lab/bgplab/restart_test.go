package bgplab

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// restartGrace is cluster.restart_grace in the lab (the default), and
// gracefulRestart the nodes' bgp.graceful_restart_time.
const (
	restartGrace    = 3 * time.Second
	gracefulRestart = "5s"
)

// TestFRRRestartInPlace and TestBIRDRestartInPlace: with graceful restart
// on, the owner restarts in place (SIGUSR2, the next vipd started at once):
// the router has the VIP's path via the owner, in its BGP table and its
// kernel, at every 50 ms sample, and the client probing through the router
// loses nothing.
func TestFRRRestartInPlace(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "/usr/lib/frr/bgpd", "/usr/lib/frr/zebra", "vtysh")
	l := newLab(t, "rf")
	l.setRouter(frrRouter(routers.StartFRR(t, l.routerNS, frrConf)))
	restartInPlace(t, l)
}

func TestBIRDRestartInPlace(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc")
	l := newLab(t, "rb")
	l.setRouter(birdRouter(routers.StartBIRD(t, l.routerNS, birdConf)))
	restartInPlace(t, l)
}

func restartInPlace(t *testing.T, l *lab) {
	l.gracefulRestart = gracefulRestart
	for _, n := range l.nodes {
		l.startHTTP(n)
	}
	for _, n := range l.nodes {
		l.startVipd(n, "owner")
	}
	l.waitEstablished(l.nodes...)
	var owner *node
	l.waitView(20*time.Second, "one path via the owner", l.onePathVia(&owner, nil))

	type sample struct {
		at time.Time
		v  view
		ok bool
	}
	var samples []sample
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			v, err := l.view()
			_, via := v.pathVia(owner.ip)
			samples = append(samples, sample{at: time.Now(), v: v, ok: err == nil && via && slices.Contains(v.kernel, owner.ip)})
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	pr := l.startProber(20*time.Millisecond, 3000, time.Minute)
	warm := time.Now()
	netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "client answered by the owner through the router", func() (bool, string) {
		_, _, by, _ := countProbes(pr.snapshot(), warm, time.Now().Add(time.Hour))
		return by[owner.name] >= 10, fmt.Sprintf("answers %v", by)
	})

	start := time.Now()
	owner.vipd.signal(t, syscall.SIGUSR2)
	if err := owner.vipd.wait(10 * time.Second); err != nil && owner.vipd.running() {
		t.Fatalf("SIGUSR2: %v", err)
	}
	exited := time.Now()
	l.startVipd(owner, "owner")
	l.waitEstablished(owner)
	netnstest.Eventually(t, 10*time.Second, 100*time.Millisecond, "the new process holds the VIP", func() (bool, string) {
		st, err := l.status(owner)
		if err != nil {
			return false, err.Error()
		}
		return len(st.VIPs) == 1 && st.VIPs[0].Held && st.VIPs[0].Owner == owner.name, fmt.Sprintf("%+v", st.VIPs)
	})
	time.Sleep(restartGrace + time.Second)
	end := time.Now()
	close(stop)
	<-done
	results := pr.stop(t)

	var missing []string
	for _, s := range samples {
		if !s.at.Before(start) && !s.ok {
			missing = append(missing, s.at.Format("15:04:05.000")+" "+s.v.String())
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d samples without the path via %s:\n%s", len(missing), len(samples), owner.name, strings.Join(missing, "\n"))
	}
	total, failed, by, fails := countProbes(results, start, end)
	if failed > 0 {
		t.Errorf("%d of %d probes through the router failed during the restart: %v", failed, total, fails)
	}
	if by[owner.name] != total-failed {
		t.Errorf("probes answered by %v during the restart, want all by %s", by, owner.name)
	}
	log, _ := readFile(owner.dir + "/vipd.log")
	if !strings.Contains(log, "stopped for a restart in place") || !strings.Contains(log, "bgp speaker started") || !strings.Contains(log, "resumed=true") {
		t.Errorf("the owner's log does not show the restart in place and the resumed speaker")
	}
	t.Logf("%s (%s) restarted in place: exited %v after SIGUSR2; %d router samples, the path via it in each; %d probes, %d failed, answered by %s",
		owner.name, l.router.kind, exited.Sub(start).Round(time.Millisecond), len(samples), total, failed, fmtCounts(by))
}

// readFile returns a file's text ("" when it cannot be read).
func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
