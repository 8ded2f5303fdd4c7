package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/agent/membership"
	"github.com/vipd/vipd/conns"
)

// holderSamples samples the wire's holders of c's VIP every 20 ms until
// stopped.
func holderSamples(c *testCluster) (stop func() [][]string) {
	done, out := make(chan struct{}), make(chan [][]string, 1)
	go func() {
		var ss [][]string
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			ss = append(ss, c.w.holdersOf(c.vip))
			select {
			case <-done:
				out <- ss
				return
			case <-t.C:
			}
		}
	}()
	return func() [][]string { close(done); return <-out }
}

// stopOwnerForRestart starts c steady and stops its owner for a restart in
// place, sampling the holders from before the stop: the owner, the claims
// so far, the samples' stop and when the stop began.
func (c *testCluster) stopOwnerForRestart() (owner string, claims0 int, samples func() [][]string, stopped time.Time) {
	owner = c.startSteady()
	claims0 = c.w.claimCount()
	samples = holderSamples(c)
	c.nodes[owner].restart.Store(true)
	stopped = time.Now()
	c.stop(owner)
	return owner, claims0, samples, stopped
}

// TestClusterRestartInPlace: the owner stops for a restart and its next
// process starts a second later: the VIP never leaves it (every 20 ms
// sample: exactly the owner), no node claims it, every node names the
// owner all along, and the new process holds it, its lifetime is forever
// again and it advertises it (the l2 refresh).
func TestClusterRestartInPlace(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner, c0, samples, _ := c.stopOwnerForRestart()
	if _, left, err := loadRestart(c.nodes[owner].cfg.StateDir); err != nil || left <= 0 {
		t.Fatalf("no restart record left: %v, %v", left, err)
	}
	time.Sleep(time.Second)
	for n := range c.nodes {
		if n != owner {
			c.waitOwner(n, owner)
		}
	}
	c.start(owner)
	c.waitStatus(owner, func(st *apipb.StatusResponse) bool { return len(st.Vips) == 1 && st.Vips[0].Held }, "held by the new process")
	// Past the grace: the new process holds on its own evidence now.
	time.Sleep(config.DefaultRestartGrace)
	ss := samples()
	for i, s := range ss {
		if !slices.Equal(s, []string{owner}) {
			t.Fatalf("sample %d of %d: holders %v, want [%s] throughout the restart", i, len(ss), s, owner)
		}
	}
	if claims := c.w.claimsSince(c0); len(claims) > 0 {
		t.Errorf("claims during the restart: %v (the VIP was never released)", claims)
	}
	c.w.mu.Lock()
	_, expiring := c.w.expires[c.vip][owner]
	c.w.mu.Unlock()
	if expiring {
		t.Error("the adopted address still has a lifetime")
	}
	if !c.w.advertises(owner, c.vip) {
		t.Error("the new process does not advertise the VIP it took over (the previous process's refresh ended with it)")
	}
	for n := range c.nodes {
		c.waitOwner(n, owner)
	}
	if _, left, err := loadRestart(c.nodes[owner].cfg.StateDir); err != nil || left > 0 {
		t.Error("the restart record is still there after the new process took it over")
	}
	t.Logf("%d samples over the restart: the owner %s held the VIP in every one", len(ss), owner)
}

// TestClusterRestartGraceRunsOut: the owner stops for a restart and no
// process comes back. Its address goes with its lifetime (before the
// grace ends), and the peers claim as for a crash once the grace has run
// out, not before: never two holders.
func TestClusterRestartGraceRunsOut(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner, c0, samples, stopped := c.stopOwnerForRestart()
	grace := config.DefaultRestartGrace
	h := c.waitHolders(grace+5*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, "a peer holding after the grace")
	claimed := time.Since(stopped)
	ss := samples()
	for i, s := range ss {
		if len(s) > 1 {
			t.Fatalf("sample %d: two holders %v", i, s)
		}
	}
	claims := c.w.claimsSince(c0)
	if len(claims) != 1 || claims[0] != h[0] {
		t.Errorf("claims %v, want one by %s", claims, h[0])
	}
	if claimed < grace {
		t.Errorf("a peer claimed %v after the owner stopped, before the grace (%v) ran out", claimed, grace)
	}
	t.Logf("no process came back: %s claimed %v after %s stopped (grace %v)", h[0], claimed.Round(10*time.Millisecond), owner, grace)
}

// TestClusterRestartNeedsAwarePeers: a member that does not say it
// understands restarts in place (the previous release) would take the
// owner's exit for a crash and claim at once: the owner hands off instead,
// and leaves no record.
func TestClusterRestartNeedsAwarePeers(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	old := ""
	c.beforeRun = func(name string, a *Agent) {
		if old == "" {
			old = name
			a.encodeMeta = func(m NodeMeta) ([]byte, error) {
				m.RestartAware = false
				return m.Encode()
			}
		}
	}
	owner := c.startSteady()
	if owner == old {
		// Let the old release's node be a follower: hand the VIP on.
		if _, err := c.client(owner).Withdraw(context.Background(), &apipb.WithdrawRequest{Wait: true, TimeoutMs: 10000}); err != nil {
			t.Fatal(err)
		}
		owner = c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != old }, "moved off the old node")[0]
	}
	c.nodes[owner].restart.Store(true)
	c.stop(owner)
	h := c.waitHolders(10*time.Second, exactlyOne, "after the owner stopped")
	if h[0] == owner {
		t.Fatalf("the owner kept the VIP with %s unaware of restarts", old)
	}
	if _, left, _ := loadRestart(c.nodes[owner].cfg.StateDir); left > 0 {
		t.Error("a restart record was left")
	}
	if c.log.count("member "+old+" runs a release without restarts in place") == 0 {
		t.Error("the log does not say why the owner handed off")
	}
}

// TestRestartRecord: the record is good only for this boot and before its
// deadline, and RestartLeft drops it when asked (cleanup after a failure).
func TestRestartRecord(t *testing.T) {
	dir := t.TempDir()
	id, now, err := bootClock()
	if err != nil {
		t.Skipf("no boot clock here: %v", err)
	}
	for _, tt := range []struct {
		name string
		rec  restartRecord
		good bool
	}{
		{"this boot, due", restartRecord{Version: 1, BootID: id, DeadlineNs: int64(now + time.Minute)}, true},
		{"past its deadline", restartRecord{Version: 1, BootID: id, DeadlineNs: int64(now - time.Second)}, false},
		{"another boot", restartRecord{Version: 1, BootID: "0d0a", DeadlineNs: int64(now + time.Minute)}, false},
		{"a newer protocol", restartRecord{Version: RestartProtocol + 1, BootID: id, DeadlineNs: int64(now + time.Minute)}, false},
	} {
		if err := saveRestart(dir, tt.rec); err != nil {
			t.Fatal(err)
		}
		left, err := RestartLeft(dir, false)
		if err != nil || (left > 0) != tt.good {
			t.Errorf("%s: left %v, %v; want good %t", tt.name, left, err, tt.good)
		}
	}
	if _, err := RestartLeft(dir, true); err != nil {
		t.Fatal(err)
	}
	if left, err := RestartLeft(dir, false); left != 0 || err != nil {
		t.Errorf("after a drop: left %v, %v; want no record", left, err)
	}
}

// TestRestartLifetime: an address left for a restart goes by the end of
// the grace (whole seconds, less the kernel's second of slack).
func TestRestartLifetime(t *testing.T) {
	for grace, want := range map[time.Duration]time.Duration{
		2 * time.Second: time.Second, 3 * time.Second: 2 * time.Second, 3500 * time.Millisecond: 2 * time.Second, time.Minute: 59 * time.Second,
	} {
		if got := restartLifetime(grace); got != want {
			t.Errorf("restartLifetime(%v) = %v, want %v", grace, got, want)
		}
	}
}

// TestRestartRecordDeadlineCapped: a record whose deadline lies further
// ahead than the grace (a record of a buggy or future release, a grace
// lowered in the configuration) is held on for no longer than what is
// left of this process's grace: the peers wait out no more (their wait is
// capped too). RestartLeft, for vipd cleanup, counts no more than the
// longest grace any configuration allows.
func TestRestartRecordDeadlineCapped(t *testing.T) {
	id, now, err := bootClock()
	if err != nil {
		t.Skipf("no boot clock here: %v", err)
	}
	c := newTestCluster(t, "a")
	cfg := c.nodes["a"].cfg
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		t.Fatal(err)
	}
	grace := cfg.Cluster.RestartGraceDuration()
	for _, ahead := range []time.Duration{time.Hour, grace + time.Second, grace} {
		rec := restartRecord{Version: RestartProtocol, Node: "a", BootID: id, DeadlineNs: int64(now + ahead),
			VIPs: []restartVIP{{Name: "apiserver", Address: c.vip.String(), Mode: config.ModeL2, Interface: "fake0", Healthy: true}}}
		if err := saveRestart(cfg.StateDir, rec); err != nil {
			t.Fatal(err)
		}
		left, err := RestartLeft(cfg.StateDir, false)
		if err != nil || left <= 0 || left > config.MaxRestartGrace {
			t.Errorf("deadline %v ahead: RestartLeft %v, %v; want at most %v", ahead, left, err, config.MaxRestartGrace)
		}
		a, err := New(cfg, Options{Backends: fakeBackendsFor(c.w, "a", false), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ad := a.readAdoption(cfg)
		t1 := a.now()
		if len(ad.vips) != 1 {
			t.Fatalf("deadline %v ahead: the record's VIP not adopted: %v", ahead, ad.vips)
		}
		if held := ad.until.Sub(t1); held > grace-grace/50 {
			t.Errorf("deadline %v ahead: held on the record's word for %v, want at most %v (the grace %v less 2%%)", ahead, held, grace-grace/50, grace)
		}
	}
}

// TestClusterRestartBindAddressLate: the owner stops for a restart in
// place and its next process starts with its bind address not (yet) on
// the host (cluster.bind_address changed, the address comes later), so it
// waits without membership or lease for longer than the grace. The
// address it adopted keeps the kernel lifetime the previous process gave
// it until this process's lease is live and a pass confirmed it holds the
// VIP: it goes by itself, the peers claim once the grace has run out, and
// there are never two holders, neither while the owner waits nor after
// its bind address comes and it joins again.
func TestClusterRestartBindAddressLate(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	grace := config.DefaultRestartGrace
	var bindAt time.Time
	c.beforeRun = func(name string, a *Agent) {
		if bindAt.IsZero() {
			return
		}
		a.probeBind = func(addr netip.Addr, port int) error {
			if time.Now().Before(bindAt) {
				return fmt.Errorf("membership port %s: %w", netip.AddrPortFrom(addr, uint16(port)), syscall.EADDRNOTAVAIL)
			}
			return membership.ProbeBind(addr, port)
		}
	}
	owner, _, samples, stopped := c.stopOwnerForRestart()
	bindAt = stopped.Add(grace + 2*time.Second)
	c.start(owner)
	// Waiting for its bind address: the adopted address must still go by
	// itself.
	time.Sleep(300 * time.Millisecond)
	if h := c.w.holdersOf(c.vip); slices.Contains(h, owner) && !c.w.expiring(owner, c.vip) {
		t.Errorf("holders %v: the process waiting for its bind address made the adopted address permanent", h)
	}
	// Past the owner's bind address and its return: it is a member again
	// and nobody holds the VIP twice.
	time.Sleep(time.Until(bindAt))
	for n := range c.nodes {
		if n != owner {
			c.waitMember(owner, n, StateAlive)
		}
	}
	time.Sleep(lifecycle.ClaimSettle + time.Second)
	ss := samples()
	two, first := 0, []string(nil)
	for _, s := range ss {
		if len(s) > 1 {
			two++
			if first == nil {
				first = s
			}
		}
	}
	if two > 0 {
		t.Errorf("two holders in %d of %d samples over the restart (first: %v)", two, len(ss), first)
	}
	h := c.w.holdersOf(c.vip)
	if len(h) != 1 {
		t.Fatalf("holders %v after the owner is back, want one", h)
	}
	for n := range c.nodes {
		c.waitOwner(n, h[0])
	}
	if c.log.count("node="+owner, "giving up a VIP taken over") == 0 {
		t.Error("the owner's log does not say it gave the VIP taken over up")
	}
	t.Logf("%d samples; %s holds; %s came back %v after it stopped", len(ss), h[0], owner, time.Since(stopped).Round(100*time.Millisecond))
}

// chainHandoffUnderway starts c with announcers that forward and linger,
// gives the owner two client connections that stay open, and busy until
// hold is closed, and withdraws the owner: it returns once the successor
// forwards the owner's connections to it and the owner lingers, with the
// claims before the withdraw.
func (c *testCluster) chainHandoffUnderway() (owner, succ string, hold chan struct{}, claims0 int) {
	c.t.Helper()
	c.chain = true
	owner = c.startSteady()
	conn := func(client string, port uint16) conns.Conn {
		return conns.Conn{Local: netip.AddrPortFrom(c.vip, 6443), Remote: netip.AddrPortFrom(netip.MustParseAddr(client), port)}
	}
	n := &c.nodes[owner].conns
	n.set(conn("198.51.100.7", 40000), conn("198.51.100.8", 40001))
	hold = make(chan struct{})
	n.mu.Lock()
	n.idleHold = hold
	n.mu.Unlock()
	claims0 = c.w.claimCount()
	mark := len(c.w.stepsSince(0))
	if _, err := c.client(owner).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		quiescing := false
		for _, s := range c.w.stepsSince(mark) {
			if name, _, ok := strings.Cut(s, " forward to "); ok {
				succ = name
			}
			quiescing = quiescing || s == owner+" linger"
		}
		if succ != "" && quiescing {
			return owner, succ, hold, claims0
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no daisy-chained handoff under way: steps %q", c.w.stepsSince(mark))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopWhileBusy stops node (for a restart in place) and, a second into
// the stop, lets the lingering owner's connections go idle (closes hold):
// it returns once the stop has returned.
func (c *testCluster) stopWhileBusy(node string, hold chan struct{}) {
	c.t.Helper()
	c.nodes[node].restart.Store(true)
	stopped := make(chan struct{})
	go func() { c.stop(node); close(stopped) }()
	time.Sleep(time.Second)
	close(hold)
	select {
	case <-stopped:
	case <-time.After(40 * time.Second):
		c.t.Fatalf("%s did not stop", node)
	}
}

// TestClusterRestartWhileLingering: the owner is restarted in place while
// it lingers for its successor (a daisy-chained handoff, its clients'
// connections open and busy). The restart ends the lingering first: the
// connections are closed at their idle moment, not busy; the record
// keeps no VIP; and the next process does not take the VIP back: it moved
// once.
func TestClusterRestartWhileLingering(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner, succ, hold, claims0 := c.chainHandoffUnderway()
	c.stopWhileBusy(owner, hold)
	if rec, left, err := loadRestart(c.nodes[owner].cfg.StateDir); err != nil || (left > 0 && len(rec.VIPs) > 0) {
		t.Errorf("the quiescing owner left a restart record of %v (%v): the VIP it was handing off recorded as held", rec.VIPs, err)
	}
	if h := c.w.holdersOf(c.vip); !slices.Equal(h, []string{succ}) {
		t.Errorf("holders %v after the quiescing owner stopped, want [%s]", h, succ)
	}
	if busy := c.nodes[owner].conns.busyClosedCount(); busy > 0 {
		t.Errorf("the restart closed %d busy connections of the quiescing owner", busy)
	}
	c.start(owner)
	c.waitMember(owner, succ, StateAlive)
	time.Sleep(lifecycle.ClaimSettle + time.Second)
	if got := c.w.claimsSince(claims0); !slices.Equal(got, []string{succ}) {
		t.Errorf("claims since the withdraw %v, want [%s]: the VIP moved more than once", got, succ)
	}
	if h := c.w.holdersOf(c.vip); !slices.Equal(h, []string{succ}) {
		t.Errorf("holders %v after the owner's next process started, want [%s]", h, succ)
	}
}

// TestClusterRestartWhileForwarding: the successor of a daisy-chained
// handoff is restarted in place while it forwards the lingering old
// owner's busy connections to it. The restart asks the old owner to end
// its lingering (VIPMeta.EndLinger): it closes its connections at their
// idle moment and stops lingering, the successor stops forwarding after
// that (its rules do not vanish under the old owner's clients), then
// exits leaving the VIP for its next process, which keeps it: the VIP
// moved once.
func TestClusterRestartWhileForwarding(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner, succ, hold, claims0 := c.chainHandoffUnderway()
	mark := len(c.w.stepsSince(0))
	c.stopWhileBusy(succ, hold)
	steps := c.w.stepsSince(mark)
	released, stopped := slices.Index(steps, owner+" stop linger"), slices.Index(steps, succ+" stop forward")
	if released < 0 || stopped < released {
		t.Errorf("steps during the successor's stop %q: want %q, then %q", steps, owner+" stop linger", succ+" stop forward")
	}
	if rec, left, err := loadRestart(c.nodes[succ].cfg.StateDir); err != nil || left <= 0 || len(rec.VIPs) != 1 {
		t.Errorf("the successor's restart record: %v, %v, %v; want the VIP kept for its next process", rec.VIPs, left, err)
	}
	if busy := c.nodes[owner].conns.busyClosedCount(); busy > 0 {
		t.Errorf("the old owner closed %d busy connections", busy)
	}
	c.start(succ)
	c.waitStatus(succ, func(st *apipb.StatusResponse) bool { return len(st.Vips) == 1 && st.Vips[0].Held }, "held by the new process")
	time.Sleep(config.DefaultRestartGrace)
	if got := c.w.claimsSince(claims0); !slices.Equal(got, []string{succ}) {
		t.Errorf("claims since the withdraw %v, want [%s]: the VIP moved more than once", got, succ)
	}
	if h := c.w.holdersOf(c.vip); !slices.Equal(h, []string{succ}) {
		t.Errorf("holders %v after the successor's next process started, want [%s]", h, succ)
	}
}
