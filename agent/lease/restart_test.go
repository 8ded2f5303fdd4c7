package lease

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// TestLeaseRestartGrace: b, the holder, says it is restarting in place with
// a 3 s grace and falls silent. Until the grace ends a is silent about it
// in its heartbeats (no vote), does not raise the alarm, does not probe it,
// takes a refused connection for nothing, and b is not gone even with c's
// votes; once the grace has run out b is a silent driver like any other:
// votes or a refusal make it gone.
func TestLeaseRestartGrace(t *testing.T) {
	l, cfg, t0 := fastTracker("a")
	base := []string{"a", "b", "c"}
	grace := 3 * time.Second
	l.receive(heartbeat{From: "b", Epoch: 5, Seq: 10, Driver: true, Restart: grace}, base, t0)
	for _, d := range []time.Duration{cfg.Claim, time.Second, grace - time.Millisecond} {
		now := t0.Add(d)
		l.receive(heartbeat{From: "c", Epoch: 1, Seq: uint64(d), Entries: []heartbeatEntry{{Name: "b", Silent: true}}}, base, now)
		l.refused("b", now)
		if l.expired("b", base, true, now) {
			t.Fatalf("b gone %v into its restart grace", d)
		}
		for _, e := range l.heartbeat(base, "", false, false, now).Entries {
			if e.Name == "b" && e.Silent {
				t.Errorf("a votes b silent %v into its restart grace", d)
			}
		}
		if slices.Contains(l.silent(base, now), "b") {
			t.Errorf("a would probe b %v into its restart grace", d)
		}
		if l.tick(base, now); !l.alarmSince.IsZero() {
			t.Errorf("a raised the alarm about b %v into its restart grace", d)
		}
		if got := l.restartingPeers(now); !slices.Equal(got, []string{"b"}) {
			t.Errorf("restarting peers %v, want [b]", got)
		}
	}
	// The grace wakes a at its end.
	if next := l.next(base, t0.Add(time.Second)); !next.Equal(t0.Add(grace)) {
		t.Errorf("next tick %v after the start, want at the end of the grace (%v)", next.Sub(t0), grace)
	}
	end := t0.Add(grace)
	l.receive(heartbeat{From: "c", Epoch: 1, Seq: 99, Entries: []heartbeatEntry{{Name: "b", Silent: true}}}, base, end)
	if !l.expired("b", base, true, end) {
		t.Error("b not gone when its grace ran out, silent since and voted silent by c")
	}
}

// TestLeaseRestartRefusedAfterGrace: a refusal after the grace is evidence
// again; a new process (another epoch) ends the grace early; a repeat of
// the old process's word does not stretch it.
func TestLeaseRestartRefusedAfterGrace(t *testing.T) {
	l, _, t0 := fastTracker("a")
	base := []string{"a", "b", "c"}
	grace := 2 * time.Second
	l.receive(heartbeat{From: "b", Epoch: 5, Seq: 1, Driver: true, Restart: grace}, base, t0)
	l.receive(heartbeat{From: "b", Epoch: 5, Seq: 2, Driver: true, Restart: grace}, base, t0.Add(time.Second))
	after := t0.Add(grace)
	l.refused("b", after)
	if !l.expired("b", base, true, after) {
		t.Error("the old process's repeat stretched the grace, or a refusal after it is no evidence")
	}
	l.receive(heartbeat{From: "b", Epoch: 6, Seq: 1, Driver: true}, base, after.Add(time.Millisecond))
	if l.expired("b", base, true, after.Add(time.Millisecond)) || len(l.restartingPeers(after)) > 0 {
		t.Error("b's next process heard: still gone or restarting")
	}

	m, _, t1 := fastTracker("a")
	m.receive(heartbeat{From: "b", Epoch: 5, Seq: 1, Driver: true, Restart: time.Hour}, base, t1)
	m.receive(heartbeat{From: "b", Epoch: 6, Seq: 1, Driver: true}, base, t1.Add(time.Second))
	if len(m.restartingPeers(t1.Add(time.Second))) > 0 {
		t.Error("the next process (another epoch) did not end the grace")
	}
}

// TestLeaseMarkRestarting: the word from b's metadata counts as its
// heartbeat's would, from the moment this node learnt it.
func TestLeaseMarkRestarting(t *testing.T) {
	l, cfg, t0 := fastTracker("a")
	base := []string{"a", "b", "c"}
	l.receive(heartbeat{From: "b", Epoch: 5, Seq: 1, Driver: true}, base, t0)
	l.markRestarting("b", time.Second, t0.Add(cfg.Interval))
	l.markRestarting("b", time.Second, t0.Add(500*time.Millisecond)) // a repeat: no stretch
	now := t0.Add(cfg.Interval + time.Second - time.Millisecond)
	l.refused("b", now)
	if l.expired("b", base, true, now) {
		t.Error("b gone within the grace its metadata announced")
	}
	if got := l.restartingPeers(t0.Add(cfg.Interval + time.Second)); len(got) > 0 {
		t.Errorf("still restarting after the grace: %v", got)
	}
}

// TestLeaseRestartTwice: b restarts in place, its next process (epoch 6)
// is heard, and b's metadata still says restarting for a while (the
// predecessor's, gossip not yet replaced; the loop marks it every pass):
// that does not make the next process restarting. When that process
// restarts in place in turn, its announcement starts a new grace: a does
// not take b for gone. (systemd-test h3 then h4: a restart, then a package
// upgrade, of the same owner 5 s apart; the second moved the VIP.)
func TestLeaseRestartTwice(t *testing.T) {
	l, cfg, t0 := fastTracker("a")
	base := []string{"a", "b", "c"}
	grace := 3 * time.Second
	l.receive(heartbeat{From: "b", Epoch: 5, Seq: 1, Driver: true, Restart: grace}, base, t0)
	back := t0.Add(100 * time.Millisecond)
	l.receive(heartbeat{From: "b", Epoch: 6, Seq: 1, Driver: true}, base, back)
	for _, d := range []time.Duration{0, cfg.Interval, time.Second} {
		l.markRestarting("b", grace, back.Add(d))
		if got := l.restartingPeers(back.Add(d)); len(got) > 0 {
			t.Fatalf("%v after b's next process was heard, its predecessor's metadata made it restarting: %v", d, got)
		}
	}
	// Heard all along; then the next process restarts in place.
	at := back.Add(5 * time.Second)
	for d := time.Duration(0); d < 5*time.Second; d += cfg.Interval {
		l.receive(heartbeat{From: "b", Epoch: 6, Seq: uint64(2 + d/cfg.Interval), Driver: true}, base, back.Add(d))
	}
	l.receive(heartbeat{From: "b", Epoch: 6, Seq: 1000, Driver: true, Restart: grace}, base, at)
	now := at.Add(grace - time.Millisecond)
	l.receive(heartbeat{From: "c", Epoch: 1, Seq: 1, Entries: []heartbeatEntry{{Name: "b", Silent: true}}}, base, now)
	l.refused("b", now)
	if l.expired("b", base, true, now) || !slices.Equal(l.restartingPeers(now), []string{"b"}) {
		t.Errorf("b's second restart in place: gone %t, restarting %v; want not gone, restarting", l.expired("b", base, true, now), l.restartingPeers(now))
	}
}

// TestLeaseRestartOverThenAgain: a grace that ran out while the same
// process kept speaking (it did not exit) is over at its next plain
// heartbeat; a later announcement of that process starts a new grace.
func TestLeaseRestartOverThenAgain(t *testing.T) {
	l, cfg, t0 := fastTracker("a")
	base := []string{"a", "b", "c"}
	grace := time.Second
	l.receive(heartbeat{From: "b", Epoch: 5, Seq: 1, Driver: true}, base, t0)
	l.markRestarting("b", grace, t0)
	after := t0.Add(grace + cfg.Interval)
	l.receive(heartbeat{From: "b", Epoch: 5, Seq: 2, Driver: true}, base, after)
	later := after.Add(time.Second)
	l.receive(heartbeat{From: "b", Epoch: 5, Seq: 3, Driver: true, Restart: grace}, base, later)
	if got := l.restartingPeers(later.Add(grace / 2)); !slices.Equal(got, []string{"b"}) {
		t.Errorf("b's announcement after its earlier grace ran out: restarting %v, want [b]", got)
	}
}

// TestRunnerAnnounceRestart: a's announcement reaches b and c through their
// runners; each answers, so a has no one missing, and b and c take a for
// restarting in place. A member that never answers is reported missing
// when the context ends.
func TestRunnerAnnounceRestart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := func() time.Time { return t0 }
	addrs := map[string]netip.AddrPort{
		"a": netip.MustParseAddrPort("192.0.2.11:7946"),
		"b": netip.MustParseAddrPort("192.0.2.12:7946"),
		"c": netip.MustParseAddrPort("192.0.2.13:7946"),
	}
	byAddr := map[netip.AddrPort]string{}
	for n, a := range addrs {
		byAddr[a] = n
	}
	var mu sync.Mutex
	runners := map[string]*Runner{}
	deaf := map[string]bool{}
	for _, n := range []string{"a", "b", "c"} {
		r := NewRunner(Config{Self: n, Timers: FastTimers(), Grid: Grid{Base: t0}, Now: now, ValidName: plainName, Wake: func() {},
			Send: func(p []byte, to netip.AddrPort) {
				mu.Lock()
				dst, off := runners[byAddr[to]], deaf[byAddr[to]]
				mu.Unlock()
				if dst != nil && !off {
					dst.Receive(p, addrs[n])
				}
			}})
		r.SetBase([]string{"a", "b", "c"}, true, addrs, n == "a")
		runners[n] = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if missing := runners["a"].AnnounceRestart(ctx, 3*time.Second, []string{"b", "c"}); len(missing) > 0 {
		t.Fatalf("missing %v, want every member's answer", missing)
	}
	for _, n := range []string{"b", "c"} {
		if st := runners[n].State(); !st.Restarting("a") {
			t.Errorf("%s does not take a for restarting", n)
		}
		if v := runners[n].State().View(Member{Name: "a", Dead: true}); !v.Alive || v.Dead {
			t.Errorf("%s's verdict on a restarting a that membership calls dead: %+v, want alive", n, v)
		}
	}

	mu.Lock()
	deaf["c"] = true
	mu.Unlock()
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if missing := runners["b"].AnnounceRestart(short, 3*time.Second, []string{"a", "c"}); !slices.Equal(missing, []string{"c"}) {
		t.Errorf("missing %v, want [c] (c hears nothing)", missing)
	}
}

// TestRunnerHoldUntil: without evidence this node may hold until the time
// HoldUntil set, and not after.
func TestRunnerHoldUntil(t *testing.T) {
	cfg := FastTimers()
	t0 := time.Unix(1000, 0)
	now := t0
	r := newTestRunner(cfg, t0, func() time.Time { return now })
	r.SetBase([]string{"a", "b", "c"}, true, testAddrs(), true)
	now = now.Add(time.Second) // past the fence's start-up interval
	if r.State().CanHold() {
		t.Fatal("may hold without evidence")
	}
	r.HoldUntil(now.Add(2 * time.Second))
	if !r.State().CanHold() {
		t.Error("may not hold within HoldUntil")
	}
	now = now.Add(2 * time.Second)
	if r.State().CanHold() {
		t.Error("may still hold once HoldUntil has passed, without evidence")
	}
}

// TestLeaseRestartGraceCapped: a peer's restart grace, from its heartbeat
// or its metadata, counts for at most MaxRestartGrace (cluster.restart_grace
// allows no more): a buggy or later peer that claims a longer one (a
// heartbeat carries up to about 49 days) is a silent driver like any other
// once MaxRestartGrace has passed, not "alive and holding" for days.
func TestLeaseRestartGraceCapped(t *testing.T) {
	base := []string{"a", "b", "c"}
	for _, tt := range []struct {
		name  string
		grace time.Duration
		meta  bool // learnt from the metadata (MarkRestarting), not a heartbeat
		want  time.Duration
	}{
		{"heartbeat, within the bound", 3 * time.Second, false, 3 * time.Second},
		{"heartbeat, the bound", MaxRestartGrace, false, MaxRestartGrace},
		{"heartbeat, an hour", time.Hour, false, MaxRestartGrace},
		{"heartbeat, the wire's longest", maxRestart, false, MaxRestartGrace},
		{"metadata, within the bound", 3 * time.Second, true, 3 * time.Second},
		{"metadata, an hour", time.Hour, true, MaxRestartGrace},
		{"metadata, the wire's longest", maxRestart, true, MaxRestartGrace},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, _, t0 := fastTracker("a")
			l.receive(heartbeat{From: "b", Epoch: 5, Seq: 1, Driver: true}, base, t0)
			if tt.meta {
				l.markRestarting("b", tt.grace, t0)
			} else {
				// Through the wire, as a peer sends it.
				p, err := heartbeat{From: "b", Epoch: 5, Seq: 2, Driver: true, Restart: tt.grace}.encode()
				if err != nil {
					t.Fatal(err)
				}
				hb, err := decodeHeartbeat(p, func(string) bool { return true })
				if err != nil {
					t.Fatal(err)
				}
				l.receive(hb, base, t0)
			}
			if !l.peers["b"].restarting(t0.Add(tt.want - time.Millisecond)) {
				t.Errorf("b not restarting %v after it said so with a grace of %v", tt.want-time.Millisecond, tt.grace)
			}
			if l.peers["b"].restarting(t0.Add(tt.want)) {
				t.Errorf("b still restarting %v after it said so with a grace of %v (until %v)", tt.want, tt.grace, l.peers["b"].restartUntil.Sub(t0))
			}
		})
	}
}

// TestRunnerHoldUntilEndsWithEvidence: a process that adopted VIPs
// (HoldUntil) and then had a majority answer its heartbeats holds, from
// then on, only with evidence, even before the HoldUntil deadline: the
// peers that answered heard its new epoch, which ended their restart
// grace, and take the VIP over on their votes once it is cut off.
func TestRunnerHoldUntilEndsWithEvidence(t *testing.T) {
	cfg := FastTimers()
	t0 := time.Unix(1000, 0)
	now := t0
	r := newTestRunner(cfg, t0, func() time.Time { return now })
	addrs := testAddrs()
	r.SetBase([]string{"a", "b", "c"}, true, addrs, true)
	r.HoldUntil(now.Add(5 * time.Second))
	r.mu.Lock()
	sends, _ := r.tr.tick(r.base, now)
	r.mu.Unlock()
	if len(sends) == 0 {
		t.Fatal("no round sent")
	}
	round := sends[len(sends)-1].HB
	for i, from := range []string{"b", "c"} {
		hb := heartbeat{From: from, Epoch: uint64(7 + i), Seq: 1, Reply: true,
			Entries: []heartbeatEntry{{Name: "a", Epoch: r.tr.epoch, Seq: round.Seq}}}
		p, err := hb.encode()
		if err != nil {
			t.Fatal(err)
		}
		r.Receive(p, addrs[from])
	}
	if st := r.State(); !st.CanHold() || st.Adopting() {
		t.Fatalf("after a majority's answers: may hold %v, adopting %v; want true, false", st.CanHold(), st.Adopting())
	}
	now = now.Add(2 * cfg.Release) // cut off since; HoldUntil still 4 s away
	if r.State().CanHold() {
		t.Error("may hold without evidence within HoldUntil after its own evidence came and went")
	}
}

// restartingPeers returns the members whose restart grace runs at now,
// sorted (the set Runner's State reports as restarting).
func (l *tracker) restartingPeers(now time.Time) []string {
	var out []string
	for n, p := range l.peers {
		if p.restarting(now) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
