package fence

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// flapWindow is how long each flapping pattern runs on the owner.
	flapWindow = 20 * time.Second
	// downMoves bounds the move once the owner's health is really down:
	// three failed checks at the default 250 ms, then the handoff.
	downMoves = 5 * time.Second
)

// TestFlappingHealthDoesNotBounce makes the owner's /readyz flap (the lab
// httpd answers 503 on a pattern; other paths, the client's, always
// answer) with vipd's default health settings (every 250 ms, rise 2, fall
// 3). Every other check failing, then two of every three, each for 20 s:
// never three failures in a row, so the owner stays healthy and the VIP
// must not move (holders sampled every 10 ms, all exactly the owner). Then
// three of every four fail: three in a row is down, one success does not
// make it healthy again (rise 2), and the VIP must move, which shows the
// test can fail.
func TestFlappingHealthDoesNotBounce(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, spec())
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 3 * time.Minute})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, 10, time.Now(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.SetReadyz(owner, "") })

	for _, f := range []struct{ pattern, what string }{
		{"ud", "every other check fails"},
		{"udd", "two of every three checks fail"},
	} {
		rec := l.RecordHolders(vip.Address, sampleEvery, flapWindow+time.Minute)
		from := time.Now()
		if err := l.SetReadyz(owner, f.pattern); err != nil {
			t.Fatalf("flap %s's /readyz: %v", owner.Name, err)
		}
		time.Sleep(flapWindow)
		stats, err := l.Readyz(owner)
		if err != nil {
			t.Fatalf("%s's /readyz counters: %v", owner.Name, err)
		}
		ss, errs := rec.Stop()
		st, _ := l.Status(owner)
		vs, _ := st.VIP(vip.Name)
		t.Logf("%q (%s) for %v on %s: httpd %s; holders %s; owner's health now %q",
			f.pattern, f.what, flapWindow, owner.Name, stats, ss.Summary(), vs.HealthDetail)
		// The check ran and failed as the pattern says: at the default
		// 250 ms, 80 checks in 20 s, half or two thirds failing.
		if failed := counter(stats, "failed"); failed < 20 {
			t.Errorf("%q: only %d failed /readyz answers in %v (%s); the check did not see the flapping", f.pattern, failed, flapWindow, stats)
		}
		if len(errs) > 0 {
			t.Errorf("%q: %d holder sampling errors, first: %s", f.pattern, len(errs), errs[0])
		}
		if len(ss) < int(flapWindow/sampleEvery)/2 {
			t.Errorf("%q: only %d holder samples in %v", f.pattern, len(ss), flapWindow)
		}
		if ok, first := onlyHolder(ss, owner.Name); !ok {
			t.Errorf("%q (%s): the VIP BOUNCED off %s: first other sample %s; transitions: %s",
				f.pattern, f.what, owner.Name, first, strings.Join(ss.Transitions(), "; "))
		}
		for _, n := range l.Nodes {
			for _, line := range n.VipdLogBetween(t, from, time.Time{}, "ownership change", "released VIP") {
				t.Errorf("%q: %s: %s", f.pattern, n.Name, line)
			}
		}
	}

	// Really down: three failures in a row.
	ev := pr.Mark("down")
	if err := l.SetReadyz(owner, "uddd"); err != nil {
		t.Fatal(err)
	}
	to, err := l.WaitMoved(vip, owner.Name, downMoves)
	if err != nil {
		stats, _ := l.Readyz(owner)
		t.Fatalf("\"uddd\" (three of every four checks fail) on %s: want the VIP moved within %v: %v (httpd %s)", owner.Name, downMoves, err, stats)
	}
	moved := time.Since(ev.Time)
	if err := pr.WaitServedBy(to, 10, ev.Time, 10*time.Second); err != nil {
		t.Errorf("after the move to %s: %v", to, err)
	}
	g := netlab.Analyze(pr.Probes(), []netlab.Event{ev}, probeInterval)[0]
	t.Logf("\"uddd\" (three of every four checks fail) on %s: the VIP moved to %s, settled %s after the pattern was set; client: first answer by %s after %s, longest gap %s",
		owner.Name, to, ms(moved), orDash(g.After), ms(g.ToNewNode), ms(g.Outage))
}

// counter returns the value of key in the httpd's "k=v k=v" counters (-1
// when absent).
func counter(stats, key string) int {
	for _, f := range strings.Fields(stats) {
		k, v, ok := strings.Cut(f, "=")
		if ok && k == key {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
			return -1
		}
	}
	return -1
}
