package converge

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// reloadWatch is how long the client and the holders are watched after a
// reload: long enough for a health verdict reset by the reload to cost the
// owner its VIP (rise 2 checks at the 1 s default interval, then a
// handoff), with margin.
const reloadWatch = 4 * time.Second

// TestReloadKeepsOwner sends SIGHUP to the owner while the VIP has an HTTP
// health check and a client probes it every 20 ms: once with the file
// unchanged, once with only log_level changed (info to debug). Neither may
// move the VIP, drop it for a moment, or lose a probe; every node must
// stay healthy, and no node may record an ownership event. The new
// log_level must apply: a stream connection to the owner's membership port
// is logged at debug only after the second reload.
func TestReloadKeepsOwner(t *testing.T) {
	health := fmt.Sprintf("http://127.0.0.1:%d/readyz", netlab.HTTPPort)
	o := netlab.VipdOptions{}
	o.LogLevel = "info"
	o.VIPs = []netlab.VIP{{Name: "apiserver", Address: netlab.VIP4, HealthURL: health, HealthInterval: "1s"}}
	l, vip, owner := netlab.StartCluster(t, netlab.Spec{HTTP: true, Vipd: o})
	peer := l.Others(owner)[0]
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 60 * time.Second})
	defer pr.Stop()
	if err := pr.WaitServedBy(owner.Name, servedRun, time.Now(), 5*time.Second); err != nil {
		t.Fatalf("before: %v", err)
	}
	rec := l.RecordHolders(vip.Address, sampleEvery, 50*time.Second)
	defer rec.Stop()

	// streamLogged opens a TCP connection from peer to the owner's
	// membership port, sends two bytes (vipd's transport reads a stream's
	// first two bytes before it hands a stream that is not a client list
	// to memberlist) and closes it, and reports whether the owner logged
	// it (memberlist logs each stream connection at debug).
	streamLogged := func(t *testing.T) bool {
		t.Helper()
		from := len(owner.MustVipdLog(t))
		var local string
		err := l.InNamespace(peer, func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(owner.IP.String(), "7946"), 2*time.Second)
			if err != nil {
				return err
			}
			local = c.LocalAddr().String()
			if _, err := c.Write([]byte{0xff, 0xff}); err != nil {
				c.Close()
				return err
			}
			return c.Close()
		})
		if err != nil {
			t.Fatalf("connect from %s to %s:7946: %v", peer.Name, owner.Name, err)
		}
		_, ok := waitLog(t, owner, from, 2*time.Second, "Stream connection", local)
		return ok
	}
	if streamLogged(t) {
		t.Fatalf("%s logs stream connections at log_level info: the log_level check below would prove nothing", owner.Name)
	}

	cfgPath := l.Vipd(owner).Config
	for _, tc := range []struct {
		name  string
		edits []string
	}{
		{"unchanged file", nil},
		{"log_level changed", []string{`(?m)^log_level = "info"$`, `log_level = "debug"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.edits) > 0 {
				b, err := os.ReadFile(cfgPath)
				if err != nil {
					t.Fatal(err)
				}
				cfg, err := netlab.EditConfig(string(b), tc.edits...)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			logFrom := len(owner.MustVipdLog(t))
			ev := pr.Mark("SIGHUP " + tc.name)
			if err := l.Vipd(owner).Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			line, ok := waitLog(t, owner, logFrom, 5*time.Second, "configuration reloaded")
			if !ok {
				t.Fatalf("no \"configuration reloaded\" in %s's log within 5s of SIGHUP:\n%s", owner.Name, owner.MustVipdLog(t)[logFrom:])
			}
			reloaded := time.Now()
			time.Sleep(reloadWatch)
			end := time.Now()
			window := netlab.ProbesBetween(pr.Probes(), ev.Time, end)
			failed, by := netlab.Served(window)
			samples := rec.Samples().Between(ev.Time, end)
			t.Logf("%s: reloaded %v after SIGHUP (%s); over %v: %d of %d probes failed, served by %v; holders %s",
				tc.name, reloaded.Sub(ev.Time).Round(time.Millisecond), strings.TrimSpace(line), end.Sub(ev.Time).Round(time.Millisecond),
				failed, len(window), by, samples.Summary())
			if failed > 0 || by[owner.Name] != len(window) {
				t.Errorf("%s: %d failed probes, served by %v; want none failed, all by %s", tc.name, failed, by, owner.Name)
			}
			if len(window) < int(reloadWatch/probeInterval)/2 {
				t.Errorf("%s: only %d probes in %v", tc.name, len(window), end.Sub(ev.Time).Round(time.Millisecond))
			}
			if moved := samples.Where(func(s netlab.HolderSample) bool { return len(s.Holders) != 1 || !s.Has(owner.Name) }); len(moved) > 0 || len(samples) == 0 {
				t.Errorf("%s: %d of %d samples without %s as the only holder: %v", tc.name, len(moved), len(samples), owner.Name, samples.Transitions())
			}
			for _, n := range l.Nodes {
				if es := netlab.VipdEventsSince(l.VipdEvents(t, n, "ownership"), ev.Time); len(es) > 0 {
					t.Errorf("%s: ownership events on %s after the reload: %+v", tc.name, n.Name, es)
				}
				st, err := l.Status(n)
				if err != nil {
					t.Fatal(err)
				}
				if m, _ := st.Member(owner.Name); !m.Healthy {
					t.Errorf("%s: %s sees %s unhealthy after the reload", tc.name, n.Name, owner.Name)
				}
			}
			for _, bad := range netlab.LogLines(owner.MustVipdLog(t)[logFrom:], "level=") {
				if strings.Contains(bad, "released") || strings.Contains(bad, "handing off") || strings.Contains(bad, "health") {
					t.Errorf("%s: %s logged after SIGHUP: %s", tc.name, owner.Name, bad)
				}
			}
			if got, want := streamLogged(t), len(tc.edits) > 0; got != want {
				t.Errorf("%s: stream connection logged at debug: %t, want %t (log_level %s)", tc.name, got, want, map[bool]string{true: "debug", false: "info"}[want])
			}
		})
	}
}
