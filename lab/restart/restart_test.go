package restart

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/lab/netlab"
)

const (
	probeInterval  = 20 * time.Millisecond
	sampleInterval = 20 * time.Millisecond
	// grace is cluster.restart_grace (the default).
	grace = config.DefaultRestartGrace
	// crashFigure bounds how long after the grace the peers take over a
	// node whose vipd is gone (a refused connection: about 200 ms in
	// docs/benchmarks.md; generous for a loaded host).
	crashFigure = 1500 * time.Millisecond
)

// spec is a cluster of three nodes with the HTTP server and vipd (default
// restart_grace) managing the one VIP at addr (VIP4 or VIP6); convergence
// gets 20 s.
func spec(addr netip.Addr) netlab.Spec {
	return netlab.Spec{Options: netlab.Options{IPv6: addr.Is6(), Settle: 20 * time.Second}, HTTP: true,
		Vipd: options(netlab.VIP{Name: "apiserver", Address: addr})}
}

// options are the vipd options of a cluster managing vip alone; a restart
// starts the next vipd with the same (the lab's default VIPs differ in an
// IPv6 lab: apiserver is the IPv4 VIP there).
func options(vip netlab.VIP) netlab.VipdOptions {
	return netlab.VipdOptions{VIPs: []netlab.VIP{vip}}
}

// stopForRestart sends SIGUSR2 to h's vipd and waits for it to exit; it
// returns when it did.
func stopForRestart(t *testing.T, l *netlab.Lab, h *netlab.Host) time.Time {
	t.Helper()
	if err := l.StopVipd(h, syscall.SIGUSR2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// TestRestartInPlace: SIGUSR2 on the owner, the next vipd started at
// once: the VIP never leaves it. IPv4 and IPv6 (whose address keeps its
// attributes, deprecated, while it has a lifetime).
func TestRestartInPlace(t *testing.T) {
	for _, addr := range []netip.Addr{netlab.VIP4, netlab.VIP6} {
		name := "ipv4"
		if addr.Is6() {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) { restartInPlace(t, addr) })
	}
}

func restartInPlace(t *testing.T, addr netip.Addr) {
	l, vip, owner := netlab.StartCluster(t, spec(addr))
	target := netip.AddrPortFrom(addr, netlab.HTTPPort)
	rec := l.RecordHolders(vip.Address, sampleInterval, time.Minute)
	pr := l.StartProber(netlab.ProbeOptions{Target: target, Interval: probeInterval, Duration: time.Minute})
	held := l.StartProber(netlab.ProbeOptions{Target: target, Interval: probeInterval, Duration: time.Minute, Hold: true})
	for _, p := range []*netlab.Prober{pr, held} {
		if err := p.WaitServedBy(owner.Name, 10, time.Now(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	exited := stopForRestart(t, l, owner)
	l.StartVipd(owner, options(vip))
	back := time.Now()
	// The new process holds it, and every node names it.
	ok, detail := netlab.Eventually(10*time.Second, 50*time.Millisecond, func() (bool, string) {
		h, err := l.OneHolder(vip)
		return err == nil && h == owner.Name, fmt.Sprint(h, err)
	})
	if !ok {
		t.Fatalf("after the restart: %s", detail)
	}
	// Past the grace: the new process holds on its own evidence by now.
	time.Sleep(grace + time.Second)
	end := time.Now()
	probes := pr.Stop()
	heldProbes := held.Stop()
	samples, errs := rec.Stop()
	for _, e := range errs {
		t.Errorf("holder sampling: %s", e)
	}
	ss := samples.Between(start, end)
	if n := ss.Count(1); n != len(ss) || len(ss) < int(end.Sub(start)/sampleInterval)/2 {
		t.Errorf("%d of %d samples with exactly one holder: %v", n, len(ss), ss.Transitions())
	}
	for _, s := range ss {
		if !s.Has(owner.Name) {
			t.Fatalf("%s: the VIP left the owner: holders %v", s.At.Format("15:04:05.000"), s.Holders)
		}
	}
	failed, heldFailed := 0, 0
	for _, p := range probes {
		if !p.Start.Before(start) && p.Start.Before(end) && !p.OK {
			failed++
			t.Errorf("probe at %s failed: %s", p.Start.Format("15:04:05.000"), p.Detail)
		}
	}
	heldTotal := 0
	for _, p := range heldProbes {
		if p.Start.Before(start) || !p.Start.Before(end) {
			continue
		}
		heldTotal++
		if !p.OK || p.Server != owner.Name {
			heldFailed++
			t.Errorf("request on the held connection at %s: ok %t server %q %s", p.Start.Format("15:04:05.000"), p.OK, p.Server, p.Detail)
		}
	}
	log, _ := owner.VipdLog()
	if lines := netlab.LogLines(log, "stopped for a restart in place"); len(lines) != 1 {
		t.Errorf("the owner's log does not say it stopped for a restart in place: %q", lines)
	}
	if lines := netlab.LogLines(log, "taken over from the previous process"); len(lines) != 1 {
		t.Errorf("the new process's log does not say it took the VIP over: %q", lines)
	}
	t.Logf("restart in place of %s: exited %v after SIGUSR2, next vipd started %v later; %d holder samples all [%s]; %d probes, %d failed; %d requests on one held connection, %d failed",
		owner.Name, exited.Sub(start).Round(time.Millisecond), back.Sub(exited).Round(time.Millisecond), len(ss), owner.Name, len(probes), failed, heldTotal, heldFailed)
	if t.Failed() {
		l.DumpLogs()
	}
}

// TestRestartNotBack: SIGUSR2 on the owner and no vipd after it: the peers
// take over at the end of the grace, as for a crash, and never while the
// owner still has the address.
func TestRestartNotBack(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, spec(netlab.VIP4))
	rec := l.RecordHolders(vip.Address, sampleInterval, time.Minute)
	start := time.Now()
	exited := stopForRestart(t, l, owner)
	next, err := l.WaitMoved(vip, owner.Name, grace+crashFigure+5*time.Second, l.Others(owner)...)
	took := time.Since(exited)
	samples, _ := rec.Stop()
	ss := samples.Between(start, time.Now())
	if two := len(ss) - ss.Count(0) - ss.Count(1); two > 0 {
		t.Errorf("%d samples with two holders: %v", two, ss.Transitions())
	}
	gone, _ := ss.First(func(s netlab.HolderSample) bool { return !s.Has(owner.Name) })
	claimed, _ := ss.First(func(s netlab.HolderSample) bool { return len(s.Holders) == 1 && !s.Has(owner.Name) })
	if err != nil {
		t.Fatal(err)
	}
	if claimed.At.Sub(exited) < grace-200*time.Millisecond {
		t.Errorf("%s claimed %v after the owner exited, before the grace (%v) ran out", next, claimed.At.Sub(exited), grace)
	}
	if took > grace+crashFigure {
		t.Errorf("%s took over %v after the owner exited, want within the grace %v plus %v", next, took, grace, crashFigure)
	}
	t.Logf("no vipd after the restart of %s: its address gone %v after it exited (kernel lifetime), %s holding %v after (grace %v)",
		owner.Name, gone.At.Sub(exited).Round(time.Millisecond), next, claimed.At.Sub(exited).Round(time.Millisecond), grace)
}

// TestRestartFailedStart: the next vipd fails to start (its configuration
// refused) and cleanup runs as systemd's ExecStopPost does after a failed
// start: the address goes at once, and the peers take over at the end of
// the grace.
func TestRestartFailedStart(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, spec(netlab.VIP4))
	rec := l.RecordHolders(vip.Address, sampleInterval, time.Minute)
	start := time.Now()
	exited := stopForRestart(t, l, owner)
	bad := strings.Replace(l.VipdConfig(owner, options(vip)), "[cluster]", "[cluster]\nno_such_key = 1", 1)
	if v, err := l.TryStartVipdConfig(owner, bad); err == nil {
		v.Kill()
		t.Fatal("vipd started with a configuration it should refuse")
	}
	cfg := owner.Dir + "/vipd.toml"
	out, err := l.Exec(owner, "env", "SERVICE_RESULT=exit-code", l.Tools.Vipd, "cleanup", "--config", cfg)
	if err != nil {
		t.Fatalf("vipd cleanup: %v\n%s", err, out)
	}
	cleaned := time.Now()
	if has, err := l.HasAddr(owner, vip.Address); err != nil || has {
		t.Errorf("after cleanup the owner has the VIP: %t, %v\n%s", has, err, out)
	}
	next, err := l.WaitMoved(vip, owner.Name, grace+crashFigure+5*time.Second, l.Others(owner)...)
	took := time.Since(exited)
	samples, _ := rec.Stop()
	if err != nil {
		t.Fatal(err)
	}
	ss := samples.Between(start, time.Now())
	if two := len(ss) - ss.Count(0) - ss.Count(1); two > 0 {
		t.Errorf("%d samples with two holders: %v", two, ss.Transitions())
	}
	if took > grace+crashFigure {
		t.Errorf("%s took over %v after the owner exited, want within the grace %v plus %v", next, took, grace, crashFigure)
	}
	t.Logf("the next vipd of %s failed to start: cleanup %v after the exit removed the address, %s took over %v after the exit (grace %v)",
		owner.Name, cleaned.Sub(exited).Round(time.Millisecond), next, took.Round(time.Millisecond), grace)
}

// TestRestartBindAddressLate: SIGUSR2 on the owner, and its next vipd
// started while its bind address is not on the host (as when
// cluster.bind_address changed to an address configured later); the
// address comes 2 s after the grace. Never two holders: the adopted VIP
// keeps its kernel lifetime while the new vipd waits (no lease, no
// membership), so it goes before the peers claim at the end of the grace,
// and the new vipd gives it up instead of putting it back; once the owner
// is back, one node holds the VIP.
func TestRestartBindAddressLate(t *testing.T) {
	l, vip, owner := netlab.StartCluster(t, spec(netlab.VIP4))
	rec := l.RecordHolders(vip.Address, sampleInterval, time.Minute)
	start := time.Now()
	exited := stopForRestart(t, l, owner)
	prefix := owner.IP.String() + "/24"
	if out, err := l.Exec(owner, "ip", "addr", "del", prefix, "dev", owner.Iface()); err != nil {
		t.Fatalf("remove %s's address: %v %s", owner.Name, err, out)
	}
	if _, err := l.StartVipdNoWait(owner, l.VipdConfig(owner, options(vip))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(exited.Add(grace + 2*time.Second)))
	added := time.Now()
	if out, err := l.Exec(owner, "ip", "addr", "add", prefix, "dev", owner.Iface()); err != nil {
		t.Fatalf("add %s's address back: %v %s", owner.Name, err, out)
	}
	if err := l.WaitAlive(owner, l.Nodes, l.Settle); err != nil {
		t.Fatalf("%s after its address came: %v", owner.Name, err)
	}
	back := time.Since(added)
	// Watch past the owner's return (its settle included).
	time.Sleep(3 * time.Second)
	samples, errs := rec.Stop()
	for _, e := range errs {
		t.Errorf("holder sampling: %s", e)
	}
	ss := samples.Between(start, time.Now())
	if two := len(ss) - ss.Count(0) - ss.Count(1); two > 0 {
		t.Errorf("%d of %d samples with two holders: %v", two, len(ss), ss.Transitions())
	}
	h, err := l.OneHolder(vip)
	if err != nil {
		t.Errorf("after %s is back: %v", owner.Name, err)
	}
	log, _ := owner.VipdLog()
	if lines := netlab.LogLines(log, "giving up a VIP taken over"); len(lines) != 1 {
		t.Errorf("the new vipd's log does not say it gave the VIP up: %q", lines)
	}
	t.Logf("%s restarted with its bind address %v late: %d holder samples, transitions %v; %s holds; %s alive on every node %v after its address came",
		owner.Name, added.Sub(exited).Round(time.Millisecond), len(ss), ss.Transitions(), h, owner.Name, back.Round(time.Millisecond))
	if t.Failed() {
		l.DumpLogs()
	}
}
