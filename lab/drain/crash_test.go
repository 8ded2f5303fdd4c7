package drain

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// TestCrashCleanup SIGKILLs the owner's vipd, which leaves the VIP address
// on the interface, and runs `vipd cleanup` as systemd's ExecStopPost would:
// the address must be gone from that node, a peer must hold the VIP, and the
// restarted vipd must converge to exactly one holder.
func TestCrashCleanup(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	rest := l.Others(owner)
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 60 * time.Second})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before the kill: %v", err)
	}
	v := l.Vipd(owner)
	kill := pr.Mark("SIGKILL " + owner.Name)
	if err := v.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL vipd on %s: %v", owner.Name, err)
	}
	if err := v.Wait(5 * time.Second); v.Running() {
		t.Fatalf("vipd on %s after SIGKILL: %v", owner.Name, err)
	}
	if ok, err := l.HasAddr(owner, vip.Address); err != nil || !ok {
		// Not a failure of vipd, but then cleanup below proves nothing.
		t.Fatalf("after SIGKILL %s should still have %s (nothing removed it): has=%t err=%v", owner.Name, vip.Address, ok, err)
	}
	out, err := l.Exec(owner, l.Tools.Vipd, "cleanup", "--config", v.Config)
	if code := exitCode(err); code != exitOK {
		t.Fatalf("vipd cleanup on %s: exit %d: %s", owner.Name, code, out)
	}
	if ok, err := l.HasAddr(owner, vip.Address); err != nil || ok {
		t.Fatalf("after vipd cleanup %s still has %s (err %v)", owner.Name, vip.Address, err)
	}
	t.Logf("vipd cleanup on %s: address removed %v after the kill", owner.Name, time.Since(kill.Time).Round(time.Millisecond))
	next, err := l.WaitMoved(vip, owner.Name, l.Settle, rest...)
	if err != nil {
		t.Fatalf("after the kill of %s: want one other holder: %v", owner.Name, err)
	}
	if err := pr.WaitServedBy(next, 25, kill.Time, 5*time.Second); err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	g := pr.Gaps()[0]
	t.Logf("SIGKILL %s: %s took over, client first served by it %v after the kill, longest gap %v (%d probes)",
		owner.Name, next, g.ToNewNode.Round(time.Millisecond), g.Outage.Round(time.Millisecond), g.LongestRun)

	restart := pr.Mark("restart " + owner.Name)
	l.StartVipd(owner, netlab.VipdOptions{})
	if err := l.WaitAlive(owner, l.Nodes, l.Settle); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	holder, err := l.WaitOneHolder(vip, l.Settle)
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	converged := time.Now()
	rec := l.RecordHolders(vip.Address, sampleInterval, 10*time.Second)
	time.Sleep(2 * time.Second)
	samples, errs := rec.Stop()
	checkSamplingErrs(t, errs)
	t.Logf("restart of %s: one holder (%s) %v after the restart; next 2s: %s", owner.Name, holder,
		converged.Sub(restart.Time).Round(time.Millisecond), samples.Summary())
	if bad := samples.Where(func(s netlab.HolderSample) bool { return len(s.Holders) != 1 || s.Holders[0] != holder }); len(bad) > 0 {
		t.Errorf("after the restart %d of %d samples did not see %s as the only holder: %v", len(bad), len(samples), holder, samples.Transitions())
	}
	if holder != next {
		t.Errorf("after the restart of %s the VIP moved from %s to %s, want it to stay (preempt off)", owner.Name, next, holder)
	}
	n, servers := netlab.Served(netlab.ProbesBetween(pr.Probes(), restart.Time, time.Time{}))
	if n > 0 || servers[owner.Name] > 0 {
		t.Errorf("client after the restart: %d failed probes, servers %v; want none failed, all from %s", n, servers, holder)
	}
}

// TestSigtermHandoff stops the owner's vipd with SIGTERM (systemctl stop):
// a peer takes over make-before-break, so the client loses no probe, and
// the stop does not persist a withdraw: restarted, the node is eligible.
//
// As in TestPlannedDrain the client-observed gap must stay under
// maxPlannedGap: the stopping node keeps the address until the successor
// reports holding it.
func TestSigtermHandoff(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true})
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 60 * time.Second})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, 25, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before SIGTERM: %v", err)
	}
	ev := pr.Mark("SIGTERM " + owner.Name)
	if err := l.StopVipd(owner, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("stop vipd on %s: %v", owner.Name, err)
	}
	stopped := time.Since(ev.Time)
	if err := l.Vipd(owner).ExitErr(); err != nil {
		t.Errorf("vipd on %s exit after SIGTERM: %v, want 0", owner.Name, err)
	}
	if ok, err := l.HasAddr(owner, vip.Address); err != nil || ok {
		t.Errorf("after vipd on %s exited it still has %s (err %v)", owner.Name, vip.Address, err)
	}
	next, err := l.WaitMoved(vip, owner.Name, 2*time.Second, l.Others(owner)...)
	if err != nil {
		t.Fatalf("after vipd on %s exited (%v after SIGTERM): want one other holder at once: %v", owner.Name, stopped, err)
	}
	if err := pr.WaitServedBy(next, 25, ev.Time, 5*time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	window := netlab.ProbesBetween(pr.Probes(), ev.Time, time.Time{})
	n, servers := netlab.Served(window)
	first, _ := firstServedBy(window, owner.Name)
	t.Logf("SIGTERM %s: exited after %v, %s took over, client first served by it %v after the signal; %d probes, %d failed, servers %v",
		owner.Name, stopped.Round(time.Millisecond), next, first.Start.Sub(ev.Time).Round(time.Millisecond), len(window), n, servers)
	checkPlannedGap(t, "SIGTERM of "+owner.Name, window)
	if _, err := os.Stat(filepath.Join(owner.StateDir(), "withdrawn")); err == nil {
		t.Errorf("SIGTERM left a withdraw flag in %s", owner.StateDir())
	}

	l.StartVipd(owner, netlab.VipdOptions{})
	// Until it rejoins, the others remember it as leaving (withdrawn).
	if err := l.WaitMember(owner, l.Nodes, l.Settle, "alive and not withdrawn", func(m netlab.Member) bool {
		return m.State == "alive" && !m.Withdrawn
	}); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	st, err := l.Status(owner)
	if err != nil {
		t.Fatal(err)
	}
	if st.Withdrawn {
		t.Errorf("status of %s after SIGTERM and restart: withdrawn, want not withdrawn (SIGTERM must not persist it)", owner.Name)
	}
	out, err := l.Vipctl(owner, "status")
	if err != nil {
		t.Fatal(err)
	}
	// The first line carries the node's flags ("node n1 (vipd ...) WITHDRAWN").
	if head, _, _ := strings.Cut(out, "\n"); strings.Contains(head, "WITHDRAWN") {
		t.Errorf("vipctl status on %s after restart says WITHDRAWN:\n%s", owner.Name, out)
	}
	if h, err := l.WaitOneHolder(vip, l.Settle); err != nil || h != next {
		t.Errorf("after the restart: holder %q (%v), want %s to keep it", h, err, next)
	}
}
