package bgp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// Graceful restart against real routers (RFC 4724): the router is each
// distribution's default helper (FRR 8.4: `bgp graceful-restart` helper
// mode is on by default; BIRD 2: `graceful restart aware` is the default),
// configured here only as in netns_test.go.

// grRestartTime is the restart time the speakers advertise: long enough
// that a fresh speaker's session (GoBGP's first connect waits 1-2s) is up
// well before it, short enough for a test.
const grRestartTime = 6 * time.Second

func grConfig(peer Peer) Config {
	c := speakerConfig(peer)
	c.VIPs = []netip.Addr{vip4.Addr()}
	c.GracefulRestart = GracefulRestart{RestartTime: grRestartTime}
	return c
}

// ribSample is one look at the router: its BGP paths for the VIP and the
// next hops of its kernel route.
type ribSample struct {
	at     time.Time
	paths  []routers.Route
	kernel []netip.Addr
	// helper: the router said it was keeping the speaker's routes for a
	// restart (graceful restart helper mode).
	helper bool
	err    error
}

// has reports whether the sample shows the VIP via nh in the BGP table and
// in the kernel.
func (s ribSample) has(nh netip.Addr) bool {
	if s.err != nil || !slices.Contains(s.kernel, nh) {
		return false
	}
	for _, p := range s.paths {
		if slices.Contains(p.NextHops, nh) {
			return true
		}
	}
	return false
}

func (s ribSample) String() string {
	if s.err != nil {
		return s.at.Format("15:04:05.000") + " error: " + s.err.Error()
	}
	return fmt.Sprintf("%s bgp %+v kernel %v helper %t", s.at.Format("15:04:05.000"), s.paths, s.kernel, s.helper)
}

// ribSampler reads the router's table for the VIP every 50ms until stopped
// (at most max).
type ribSampler struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples []ribSample
}

func sampleRIB(r grRouter, prefix netip.Prefix, max time.Duration) *ribSampler {
	s := &ribSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		end := time.After(max)
		for {
			sm := ribSample{at: time.Now()}
			sm.paths, sm.err = r.Routes(prefix)
			if sm.err == nil {
				sm.kernel, sm.err = routers.KernelNextHops(r.ns, prefix)
			}
			if sm.err == nil {
				sm.helper, sm.err = r.helper(sm.paths)
			}
			s.mu.Lock()
			s.samples = append(s.samples, sm)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-end:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// finish stops the sampler and returns its samples.
func (s *ribSampler) finish() []ribSample {
	close(s.stop)
	<-s.done
	return s.samples
}

// checkDense fails t when two samples are more than 250ms apart: a proof
// of "never missing" needs the samples it claims.
func checkDense(t *testing.T, ss []ribSample) {
	t.Helper()
	if len(ss) < 2 {
		t.Fatalf("%d samples", len(ss))
	}
	var worst time.Duration
	for i := 1; i < len(ss); i++ {
		worst = max(worst, ss[i].at.Sub(ss[i-1].at))
	}
	if worst > 250*time.Millisecond {
		t.Errorf("samples up to %v apart, want at most 250ms (50ms ticks)", worst)
	}
	t.Logf("%d samples over %v, at most %v apart", len(ss), ss[len(ss)-1].at.Sub(ss[0].at).Round(time.Millisecond), worst.Round(time.Millisecond))
}

// announcing starts a speaker in sns (ended with t), waits until its
// session is up and the router has the VIP's route via it.
func announcing(t *testing.T, r grRouter, sns string, cfg Config) *speakerProc {
	t.Helper()
	spk := startSpeakerProc(t, sns, cfg)
	netnstest.Eventually(t, 20*time.Second, 100*time.Millisecond, "session established", r.established)
	spk.do(t, "announce "+vip4.Addr().String())
	waitRoute(t, r, vip4, speakerV4, "router has the vip", noGshut)
	return spk
}

// waitNoVIPRoute polls r every interval until it has no route for the VIP
// (failing t after timeout) and returns when it first saw none.
func waitNoVIPRoute(t *testing.T, r grRouter, timeout, interval time.Duration, what string) time.Time {
	t.Helper()
	var gone time.Time
	netnstest.Eventually(t, timeout, interval, what, func() (bool, string) {
		rs, err := r.Routes(vip4)
		if err != nil {
			return false, err.Error()
		}
		if len(rs) == 0 {
			gone = time.Now()
			return true, ""
		}
		return false, fmt.Sprintf("routes %+v", rs)
	})
	return gone
}

// grRouter is a router under test with what the graceful restart proof
// needs of it.
type grRouter struct {
	routers.Router
	ns string
	// established reports whether the session with the speaker is up.
	established func() (bool, string)
	// capability reports whether the router says graceful restart was
	// negotiated with the speaker.
	capability func() (bool, string)
	// helper reports whether the router is keeping the speaker's routes
	// for a restart (paths are the VIP's, just read).
	helper func(paths []routers.Route) (bool, error)
}

// gracefulRestart runs the proof against r:
//
//   - restart: the speaker Detaches (no CEASE) and exits; a new speaker
//     Resumes with the VIP. Every sample, one every 50ms from before the
//     exit until the new session is up and the route fresh, has the route
//     via the speaker in the router's BGP table and in its kernel.
//   - crash, no return: after SIGKILL the router keeps the route until the
//     restart time and drops it within a second after.
//   - crash, fresh start: a speaker started (not resumed) after SIGKILL
//     makes the router drop the stale route as soon as its session is up,
//     before the restart time.
//   - crash, flush: FlushStale after SIGKILL makes the router drop the stale
//     route within a second, and leaves it no route from the speaker.
func gracefulRestart(t *testing.T, r grRouter, sns string, cfg Config) {
	spk := announcing(t, r, sns, cfg)
	if ok, detail := r.capability(); !ok {
		t.Fatalf("router does not report graceful restart negotiated: %s", detail)
	}
	if ps := spk.peers(t); len(ps) != 1 || !ps[0].GracefulRestart {
		t.Fatalf("speaker peers %+v, want graceful restart negotiated", ps)
	}
	waitKernelRoute(t, r.ns, vip4, speakerV4)

	t.Run("restart", func(t *testing.T) {
		smp := sampleRIB(r, vip4, 60*time.Second)
		time.Sleep(300 * time.Millisecond)
		exited := time.Now()
		spk.detach(t)
		spk = resumeSpeakerProc(t, sns, cfg, vip4.Addr())
		netnstest.Eventually(t, 20*time.Second, 50*time.Millisecond, "session back", r.established)
		// Fresh again: the new speaker's End-of-RIB ended the stale period.
		var fresh time.Time
		netnstest.Eventually(t, 10*time.Second, 50*time.Millisecond, "route fresh again", func() (bool, string) {
			rs, err := r.Routes(vip4)
			if err != nil {
				return false, err.Error()
			}
			if len(rs) == 1 && !rs[0].Stale && slices.Contains(rs[0].NextHops, speakerV4) {
				fresh = time.Now()
				return true, ""
			}
			return false, fmt.Sprintf("routes %+v", rs)
		})
		time.Sleep(500 * time.Millisecond)
		ss := smp.finish()
		checkDense(t, ss)
		var missing []string
		stale := 0
		for _, s := range ss {
			if !s.has(speakerV4) {
				missing = append(missing, s.String())
			}
			if s.helper {
				stale++
			}
		}
		if len(missing) > 0 {
			t.Errorf("%d of %d samples without the route via the speaker:\n%s", len(missing), len(ss), strings.Join(missing, "\n"))
		}
		// The session did end and the router kept the route for the
		// restart: not a session that never went down.
		if stale == 0 {
			t.Errorf("no sample saw the router in graceful restart helper mode: did the session end?")
		}
		t.Logf("restart: route in the router's table and kernel at %d of %d samples; fresh %v after the old speaker exited; the router kept it for the restart at %d samples",
			len(ss)-len(missing), len(ss), fresh.Sub(exited).Round(time.Millisecond), stale)
		if ps := spk.peers(t); len(ps) != 1 || ps[0].State != "established" || ps[0].Advertised < 1 {
			t.Errorf("resumed speaker peers %+v, want established with the held route advertised", ps)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("crash-no-return", func(t *testing.T) {
		// Each subtest's speakers end with it (t.Cleanup): a new one.
		spk = announcing(t, r, sns, cfg)
		smp := sampleRIB(r, vip4, grRestartTime+10*time.Second)
		killed := time.Now()
		spk.kill(t)
		gone := waitNoVIPRoute(t, r, grRestartTime+5*time.Second, 50*time.Millisecond, "route dropped after the restart time")
		ss := smp.finish()
		checkDense(t, ss)
		kept := gone.Sub(killed)
		// Present throughout the restart time (the router's timer starts
		// when it sees the TCP session end, a moment after the kill).
		for _, s := range ss {
			if s.at.Sub(killed) < grRestartTime-500*time.Millisecond && !s.has(speakerV4) {
				t.Errorf("route missing %v after SIGKILL, within the restart time %v: %s", s.at.Sub(killed).Round(time.Millisecond), grRestartTime, s)
				break
			}
		}
		if kept > grRestartTime+1500*time.Millisecond {
			t.Errorf("route kept %v after SIGKILL, want at most the restart time %v plus 1.5s", kept, grRestartTime)
		}
		t.Logf("crash, no return: stale route kept %v after SIGKILL (restart time %v)", kept.Round(time.Millisecond), grRestartTime)
	})
	if t.Failed() {
		return
	}

	t.Run("crash-fresh-start", func(t *testing.T) {
		spk = announcing(t, r, sns, cfg)
		killed := time.Now()
		spk.kill(t)
		spk = startSpeakerProc(t, sns, cfg) // Start: no forwarding state kept
		gone := waitNoVIPRoute(t, r, grRestartTime, 50*time.Millisecond, "stale route dropped")
		if up, detail := r.established(); !up {
			t.Errorf("stale route gone %v after SIGKILL but the new session is not up (so it was not the new session that dropped it): %s",
				gone.Sub(killed).Round(time.Millisecond), detail)
		}
		if gone.Sub(killed) >= grRestartTime-500*time.Millisecond {
			t.Errorf("stale route gone only %v after SIGKILL, want it dropped when the fresh session came up, before the restart time %v", gone.Sub(killed), grRestartTime)
		}
		t.Logf("crash, fresh start: stale route dropped %v after SIGKILL, when the new session came up (restart time %v)", gone.Sub(killed).Round(time.Millisecond), grRestartTime)
	})
	if t.Failed() {
		return
	}

	t.Run("crash-flush", func(t *testing.T) {
		spk = announcing(t, r, sns, cfg)
		spk.kill(t)
		// Stale now (the router keeps it for the restart time).
		netnstest.Eventually(t, 5*time.Second, 50*time.Millisecond, "router keeping the route for a restart", func() (bool, string) {
			rs, err := r.Routes(vip4)
			if err != nil {
				return false, err.Error()
			}
			helper, err := r.helper(rs)
			return err == nil && helper && len(rs) == 1, fmt.Sprintf("routes %+v helper %t err %v", rs, helper, err)
		})
		flushed := time.Now()
		flushStaleIn(t, sns, cfg)
		took := time.Since(flushed)
		gone := waitNoVIPRoute(t, r, 2*time.Second, 20*time.Millisecond, "stale route dropped after the flush")
		if up, _ := r.established(); up {
			t.Errorf("the flush session is still up after its CEASE")
		}
		if d := gone.Sub(flushed); d > time.Second {
			t.Errorf("stale route gone %v after the flush started, want within a second (the router would keep it for the restart time, %v)", d, grRestartTime)
		}
		t.Logf("crash, flush: FlushStale took %v; the stale route was gone %v after it started (restart time %v)",
			took.Round(time.Millisecond), gone.Sub(flushed).Round(time.Millisecond), grRestartTime)
	})
}

func TestFRRGracefulRestart(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "/usr/lib/frr/bgpd", "/usr/lib/frr/zebra", "vtysh")
	rns, sns := lab(t, "gf")
	frr := routers.StartFRR(t, rns, frrConf)
	nb := speakerV4.String()
	gracefulRestart(t, grRouter{
		Router:      frr,
		ns:          rns,
		established: func() (bool, string) { return frr.Established(speakerV4) },
		capability: func() (bool, string) {
			out, err := frr.Cmd("show bgp neighbors " + nb + " json")
			if err != nil {
				return false, err.Error()
			}
			var m map[string]struct {
				Caps struct {
					GR string `json:"gracefulRestart"`
				} `json:"neighborCapabilities"`
			}
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				return false, fmt.Sprintf("parse %q: %v", out, err)
			}
			return m[nb].Caps.GR == "advertisedAndReceived", out
		},
		helper: func(paths []routers.Route) (bool, error) {
			return slices.ContainsFunc(paths, func(p routers.Route) bool { return p.Stale }), nil
		},
	}, sns, grConfig(Peer{Address: routerV4, ASN: routerASN, Password: md5Secret, HoldTime: 3 * time.Second}))
}

func TestBIRDGracefulRestart(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc")
	rns, sns := lab(t, "gb")
	bird := routers.StartBIRD(t, rns, birdConf)
	gracefulRestart(t, grRouter{
		Router:      bird,
		ns:          rns,
		established: func() (bool, string) { return bird.Established("spk4") },
		capability: func() (bool, string) {
			out, err := bird.Cmd("show protocols all spk4")
			if err != nil {
				return false, err.Error()
			}
			// "Graceful restart" among the neighbor's capabilities
			// (BIRD lists its own first).
			_, nbr, _ := strings.Cut(out, "Neighbor capabilities")
			return strings.Contains(nbr, "Graceful restart"), out
		},
		helper: func([]routers.Route) (bool, error) {
			out, err := bird.Cmd("show protocols all spk4")
			return strings.Contains(out, "Neighbor graceful restart active"), err
		},
	}, sns, grConfig(Peer{Address: routerV4, ASN: routerASN, Password: md5Secret, HoldTime: 3 * time.Second}))
}
