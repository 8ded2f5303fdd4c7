package lease

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// leaseSim simulates the lease of three nodes, each with its own clock
// rate, over a network whose links the test controls: nodes tick when their
// tracker asks, and answer heartbeats as they arrive, as Runner does.
// Time advances in steps of a millisecond of real time.
type leaseSim struct {
	cfg   Timers
	names []string
	rate  map[string]float64 // local seconds per real second
	tr    map[string]*tracker
	next  map[string]time.Duration // real time of the next tick (-1: none)
	delay time.Duration
	drop  func(from, to string, now time.Duration) bool
	queue []simMsg
	now   time.Duration // real time since start
	epoch time.Time
	sent  int            // heartbeats sent, all nodes
	ticks map[string]int // ticks run, per node
}

type simMsg struct {
	at   time.Duration
	from string
	to   string
	hb   heartbeat
}

func newLeaseSim(cfg Timers, rates map[string]float64, delay time.Duration) *leaseSim {
	s := &leaseSim{cfg: cfg, rate: rates, tr: map[string]*tracker{}, next: map[string]time.Duration{},
		delay: delay, epoch: time.Unix(1_000_000, 0), ticks: map[string]int{}}
	for n := range rates {
		s.names = append(s.names, n)
	}
	slices.Sort(s.names)
	for i, n := range s.names {
		s.tr[n] = newTracker(n, cfg, s.local(n), uint64(i+1))
		s.next[n] = time.Duration(i) * 7 * time.Millisecond
	}
	return s
}

// local is node n's clock now.
func (s *leaseSim) local(n string) time.Time {
	return s.epoch.Add(time.Duration(float64(s.now) * s.rate[n]))
}

// real converts node n's clock reading back to real time.
func (s *leaseSim) real(n string, t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(s.epoch)) / s.rate[n])
}

func (s *leaseSim) deliver(from, to string, hb heartbeat) {
	s.sent++
	if s.drop == nil || !s.drop(from, to, s.now) {
		s.queue = append(s.queue, simMsg{at: s.now + s.delay, from: from, to: to, hb: hb})
	}
}

func (s *leaseSim) schedule(n string, next time.Time) {
	if next.IsZero() {
		s.next[n] = -1
		return
	}
	s.next[n] = max(s.real(n, next), s.now)
}

// step advances real time by a millisecond: ticks due run, heartbeats
// arriving are received (and answered).
func (s *leaseSim) step() {
	s.now += time.Millisecond
	for _, n := range s.names {
		if s.next[n] < 0 || s.now < s.next[n] {
			continue
		}
		s.ticks[n]++
		sends, next := s.tr[n].tick(s.names, s.local(n))
		for _, snd := range sends {
			for _, to := range s.names {
				if to != n {
					s.deliver(n, to, snd.HB)
				}
			}
		}
		s.schedule(n, next)
	}
	keep := s.queue[:0]
	var due []simMsg
	for _, m := range s.queue {
		if m.at <= s.now {
			due = append(due, m)
		} else {
			keep = append(keep, m)
		}
	}
	s.queue = keep
	for _, m := range due {
		reply, ok := s.tr[m.to].receive(m.hb, s.names, s.local(m.to))
		if ok {
			s.deliver(m.to, m.from, reply)
		}
		s.schedule(m.to, s.tr[m.to].next(s.names, s.local(m.to)))
	}
}

func (s *leaseSim) fenced(n string) bool {
	ok, _ := s.tr[n].fence(s.names, true, s.local(n))
	return !ok
}

// drive makes n the holder: it drives rounds from now on.
func (s *leaseSim) drive(n string) {
	s.tr[n].setDriver(true)
	s.next[n] = s.now
}

func (s *leaseSim) expired(by, who string) bool {
	return s.tr[by].expired(who, s.names, true, s.local(by))
}

// fastTracker returns self's tracker with the fast timers, started at a
// fixed time (epoch 1), with those timers and that time.
func fastTracker(self string) (*tracker, Timers, time.Time) {
	t0 := time.Unix(1000, 0)
	return newTracker(self, FastTimers(), t0, 1), FastTimers(), t0
}

// holderReaction bounds how long after its fence expires a holder has
// withdrawn the address: the lease goroutine notices within an interval,
// the loop's pass and the netlink call follow (generous for a loaded host).
const holderReaction = 80 * time.Millisecond

// TestLeaseFenceBeforeClaim: the holder x loses membership traffic (both
// ways, only its outgoing, only its incoming) while clocks run up to 1%
// fast or slow and packets take up to 5 ms. In every case x's fence expires
// (and x releases) before either peer may treat x as gone, by at least the
// holder's reaction time; and when only x's incoming traffic is lost, the
// peers, who still hear x, never do.
func TestLeaseFenceBeforeClaim(t *testing.T) {
	cfg := FastTimers()
	cut := 2 * time.Second
	links := map[string]func(from, to string, now time.Duration) bool{
		"both ways": func(from, to string, now time.Duration) bool { return now >= cut && (from == "x" || to == "x") },
		"x sends nothing": func(from, to string, now time.Duration) bool {
			return now >= cut && from == "x"
		},
		"x hears nothing": func(from, to string, now time.Duration) bool {
			return now >= cut && to == "x"
		},
	}
	for linkName, drop := range links {
		for _, rx := range []float64{0.99, 1, 1.01} {
			for _, rp := range []float64{0.99, 1, 1.01} {
				for _, delay := range []time.Duration{0, 5 * time.Millisecond} {
					name := fmt.Sprintf("%s/x clock %.2f/peer clocks %.2f/delay %v", linkName, rx, rp, delay)
					t.Run(name, func(t *testing.T) {
						s := newLeaseSim(cfg, map[string]float64{"x": rx, "w": rp, "y": 2 - rp}, delay)
						s.drop = drop
						s.drive("x")
						for s.now < cut {
							s.step()
						}
						if s.fenced("x") {
							t.Fatalf("x fenced before the cut (at %v)", s.now)
						}
						var released, claimed time.Duration
						for s.now < cut+3*time.Second && (released == 0 || claimed == 0) {
							s.step()
							if released == 0 && s.fenced("x") {
								released = s.now
							}
							if claimed == 0 && (s.expired("w", "x") || s.expired("y", "x")) {
								claimed = s.now
							}
						}
						if released == 0 {
							t.Fatalf("x never fenced itself after losing its traffic")
						}
						if linkName == "x hears nothing" {
							if claimed != 0 {
								t.Errorf("peers that still hear x took it for gone at %v", claimed-cut)
							}
							return
						}
						if claimed == 0 {
							t.Fatalf("no peer took x for gone within 3 s of the cut")
						}
						if released+holderReaction >= claimed {
							t.Errorf("x released %v after the cut (+%v reaction), a peer took it for gone %v after: overlap", released-cut, holderReaction, claimed-cut)
						}
						t.Logf("x released %v after the cut, taken for gone %v after", released-cut, claimed-cut)
						if claimed-cut > 500*time.Millisecond {
							t.Errorf("x taken for gone %v after the cut, want under 500ms", claimed-cut)
						}
					})
				}
			}
		}
	}
}

// TestLeaseLossTolerated: 30% of the holder's incoming packets lost for 60
// simulated seconds (seeded, so the run is repeatable): its fence never
// expires and no peer takes it for gone.
func TestLeaseLossTolerated(t *testing.T) {
	s := newLeaseSim(FastTimers(), map[string]float64{"x": 1, "w": 1, "y": 1}, 2*time.Millisecond)
	rng := rand.New(rand.NewPCG(7, 11))
	s.drop = func(from, to string, now time.Duration) bool { return to == "x" && rng.Float64() < 0.3 }
	s.drive("x")
	for s.now < time.Second {
		s.step()
	}
	for s.now < 61*time.Second {
		s.step()
		if s.fenced("x") {
			t.Fatalf("x fenced itself at %v with 30%% loss", s.now)
		}
		if s.expired("w", "x") || s.expired("y", "x") {
			t.Fatalf("x taken for gone at %v with 30%% loss", s.now)
		}
	}
}

// TestLeaseHolderHearsEveryMember: a holder hears every other member within
// Claim, all the time, in both failure_detection modes and with clocks 1%
// apart: CountQuorum counts members the runner RecentlyHeard as alive, so a member that
// gossip declares dead for a moment (a node back from a partition spreads
// the deaths it concluded) does not cost the holder its quorum.
func TestLeaseHolderHearsEveryMember(t *testing.T) {
	for mode, cfg := range map[string]Timers{"fast": FastTimers(), "lan": LANTimers()} {
		s := newLeaseSim(cfg, map[string]float64{"x": 1.01, "w": 0.99, "y": 1}, 2*time.Millisecond)
		s.drive("x")
		for s.now < time.Second {
			s.step()
		}
		for s.now < 20*time.Second {
			s.step()
			if got := s.tr["x"].heardWithin(cfg.Claim, s.local("x")); !slices.Equal(got, []string{"w", "y"}) {
				t.Fatalf("%s: holder x heard %v within Claim (%v) at %v, want [w y]", mode, got, cfg.Claim, s.now)
			}
		}
		// A member silent for Claim is no longer heard.
		s.drop = func(from, to string, now time.Duration) bool { return from == "y" }
		cut := s.now
		for s.now < cut+cfg.Claim+cfg.Interval {
			s.step()
		}
		if got := s.tr["x"].heardWithin(cfg.Claim, s.local("x")); !slices.Equal(got, []string{"w"}) {
			t.Errorf("%s: %v after y fell silent, x heard %v within Claim, want [w]", mode, s.now-cut, got)
		}
	}
}

// TestLeaseRefusedIsGone: a refused connection to a silent member's
// membership port (its vipd is gone) is positive evidence at once; a member
// heard from again is not gone.
func TestLeaseRefusedIsGone(t *testing.T) {
	l, _, t0 := fastTracker("a")
	base := []string{"a", "b", "c"}
	l.receive(heartbeat{From: "b", Seq: 1, Driver: true}, base, t0.Add(100*time.Millisecond))
	now := t0.Add(200 * time.Millisecond)
	if l.expired("b", base, true, now) {
		t.Fatal("b gone 100ms after its heartbeat, without evidence")
	}
	l.refused("b", now)
	if !l.expired("b", base, true, now) {
		t.Error("b not gone after its port refused a connection")
	}
	l.receive(heartbeat{From: "b", Seq: 2, Driver: true}, base, now.Add(time.Millisecond))
	if l.expired("b", base, true, now.Add(time.Millisecond)) {
		t.Error("b still gone after it was heard again")
	}
}

// TestLeaseNewNodeHasNoVote: a node that just started has heard nobody, but
// it votes only once it has been silent-listening for Claim: a restarting
// node cannot help expire a live holder.
func TestLeaseNewNodeHasNoVote(t *testing.T) {
	l, cfg, t0 := fastTracker("c")
	base := []string{"a", "b", "c"}
	// a and b drive rounds; c (just started) expects them from their first
	// heartbeat, and votes only after Claim without one.
	l.receive(heartbeat{From: "a", Epoch: 1, Seq: 1, Driver: true}, base, t0)
	hb := l.heartbeat(base, "", false, false, t0.Add(cfg.Interval))
	for _, e := range hb.Entries {
		if e.Silent {
			t.Errorf("a node %v after start votes %s silent", cfg.Interval, e.Name)
		}
	}
	hb = l.heartbeat(base, "", false, false, t0.Add(cfg.Claim))
	for _, e := range hb.Entries {
		switch {
		case e.Name == "a" && !e.Silent:
			t.Errorf("driver a not voted silent after %v without a heartbeat", cfg.Claim)
		case e.Name == "b" && e.Silent:
			t.Errorf("b, which drives nothing and was never expected, voted silent")
		}
	}
}

// TestLeaseWithoutQuorum: with quorum not required there is no fence and
// this node's own vote is enough (one or two nodes).
func TestLeaseWithoutQuorum(t *testing.T) {
	l, cfg, t0 := fastTracker("a")
	base := []string{"a", "b"}
	if ok, _ := l.fence(base, false, t0.Add(time.Hour)); !ok {
		t.Error("fenced without quorum required")
	}
	l.receive(heartbeat{From: "b", Epoch: 1, Seq: 1, Driver: true}, base, t0)
	if l.expired("b", base, true, t0.Add(cfg.Claim)) {
		t.Error("b gone on one vote of two with quorum required")
	}
	if !l.expired("b", base, false, t0.Add(cfg.Claim)) {
		t.Error("b not gone on this node's own vote in a two-node cluster")
	}
}

// TestLeaseRestartedPeer: a peer that restarts numbers its heartbeats from 1
// again under a new epoch: it is heard at once, and an ack for this node's
// previous epoch does not count as evidence.
func TestLeaseRestartedPeer(t *testing.T) {
	l, cfg, t0 := fastTracker("a")
	base := []string{"a", "b", "c"}
	l.receive(heartbeat{From: "b", Epoch: 7, Seq: 500, Driver: true}, base, t0)
	l.receive(heartbeat{From: "b", Epoch: 8, Seq: 1, Driver: true}, base, t0.Add(cfg.Claim))
	if l.silentFor("b", t0.Add(cfg.Claim)) != 0 {
		t.Errorf("a restarted peer's heartbeat (new epoch, seq 1) was ignored")
	}
	hb := l.heartbeat(base, "", false, false, t0.Add(cfg.Claim))
	// b acks this seq, but for another epoch of a: no evidence.
	l.receive(heartbeat{From: "b", Epoch: 8, Seq: 2, Entries: []heartbeatEntry{{Name: "a", Epoch: 9, Seq: hb.Seq}}}, base, t0.Add(cfg.Claim+time.Millisecond))
	if ok, _ := l.fence(base, true, t0.Add(cfg.Claim+time.Millisecond)); ok {
		t.Errorf("an ack for another epoch counted as evidence")
	}
	l.receive(heartbeat{From: "b", Epoch: 8, Seq: 3, Entries: []heartbeatEntry{{Name: "a", Epoch: 1, Seq: hb.Seq}}}, base, t0.Add(cfg.Claim+2*time.Millisecond))
	if ok, _ := l.fence(base, true, t0.Add(cfg.Claim+2*time.Millisecond)); !ok {
		t.Errorf("an ack for this epoch did not count as evidence")
	}
}

// TestLeaseQuiet: an idle cluster sends little, which is what keeps an idle
// node's CPU down (each wake-up costs): with one holder, a round every
// interval asking one member, and its answer; with no holder, nothing but
// the hello each node says when it starts.
func TestLeaseQuiet(t *testing.T) {
	cfg := FastTimers()
	s := newLeaseSim(cfg, map[string]float64{"x": 1, "w": 1, "y": 1}, time.Millisecond)
	for s.now < 10*time.Second {
		s.step()
	}
	// Only the hello each node says to each other one when it starts.
	if want := len(s.names) * (len(s.names) - 1); s.sent != want {
		t.Errorf("no holder: %d heartbeats in 10 s, want the %d hellos at start", s.sent, want)
	}
	s.drive("x")
	for s.now < 11*time.Second {
		s.step()
	}
	before := s.sent
	for s.now < 21*time.Second {
		s.step()
	}
	// Per round: x to w and y (2), one answer (1).
	perRound := 3
	rounds := int(10 * time.Second / cfg.Interval)
	if got := s.sent - before; got > perRound*rounds*11/10 || got < perRound*rounds*9/10 {
		t.Errorf("one holder: %d heartbeats in 10 s, want about %d (%d rounds of %d)", got, perRound*rounds, rounds, perRound)
	}
}

// TestLeaseSilentDriverNoBusyLoop: while a driver is silent and not yet
// gone (its alarm deadline passed, the alarm is up), the others tick on the
// alarm's half-interval rounds, not at once again and again. The simulator
// runs a tick as soon as the tracker says one is due, in steps of a
// millisecond, so a deadline left in the past shows as a tick every step.
func TestLeaseSilentDriverNoBusyLoop(t *testing.T) {
	cfg := FastTimers()
	s := newLeaseSim(cfg, map[string]float64{"x": 1, "w": 1, "y": 1}, time.Millisecond)
	s.drive("x")
	for s.now < time.Second {
		s.step()
	}
	cut := s.now
	s.drop = func(from, to string, now time.Duration) bool { return from == "x" || to == "x" }
	before := s.ticks["w"]
	gone := time.Duration(0)
	for s.now < cut+2*time.Second {
		s.step()
		if gone == 0 && s.expired("w", "x") {
			gone = s.now - cut
		}
	}
	if gone == 0 {
		t.Fatalf("w never took the silent x for gone")
	}
	// The alarm asks everyone every half interval while a driver is
	// silent, and stays up for Claim after; a few more ticks for the
	// deadlines in between.
	ticks := s.ticks["w"] - before
	if limit := int(2*time.Second/(cfg.Interval/2)) + 10; ticks > limit {
		t.Errorf("w ticked %d times in the 2 s after x fell silent (x gone for w after %v), want at most %d: a busy loop", ticks, gone, limit)
	}
}

// TestLeaseRunnerGraceWhenFenceStarts: a holder in a cluster of two (no
// fence) that grows to three has one interval for its first answers before
// it counts as fenced, and is fenced after that without them; a new base
// makes it send its first round at once (a kick).
func TestLeaseRunnerGraceWhenFenceStarts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	cfg := FastTimers()
	r := newTestRunner(cfg, t0, func() time.Time { return now })
	defer r.alarm.Close()
	addrs := testAddrs()
	r.SetBase([]string{"a", "b"}, false, map[string]netip.AddrPort{"b": addrs["b"]}, true)
	if !r.takeKick() {
		t.Fatal("driving did not kick the runner")
	}
	if st := r.State(); !st.canHold {
		t.Fatal("fenced without quorum required")
	}
	now = now.Add(time.Second)
	r.SetBase([]string{"a", "b", "c"}, true, addrs, true)
	if !r.takeKick() {
		t.Error("a new base did not kick the runner")
	}
	if st := r.State(); !st.canHold {
		t.Error("fenced the moment the fence started to apply")
	}
	now = now.Add(cfg.Interval)
	if st := r.State(); st.canHold {
		t.Errorf("still may hold %v after the fence started, without an answer", cfg.Interval)
	}
}

// newTestRunner returns node a's runner on a clock of the test's, sending
// nothing.
func newTestRunner(cfg Timers, t0 time.Time, now func() time.Time) *Runner {
	return NewRunner(Config{Self: "a", Timers: cfg, Grid: Grid{Base: t0}, Now: now,
		Send: func([]byte, netip.AddrPort) {}, Wake: func() {}, ValidName: plainName})
}

// testAddrs are the membership addresses of b and c.
func testAddrs() map[string]netip.AddrPort {
	return map[string]netip.AddrPort{"b": netip.MustParseAddrPort("192.0.2.12:7946"), "c": netip.MustParseAddrPort("192.0.2.13:7946")}
}

// takeKick reports whether a kick is pending and takes it, as Run does.
func (r *Runner) takeKick() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.kicked
	r.kicked = false
	return k
}

// TestLeaseRunnerKeepsKick: a heartbeat that arrives after a kick (a new
// base) and before the runner took it does not move its alarm to the
// heartbeat's later deadline: the tick the kick asked for still runs at
// once.
func TestLeaseRunnerKeepsKick(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := newTestRunner(FastTimers(), t0, func() time.Time { return t0 })
	k, ok := r.alarm.(*kernelAlarm)
	if !ok {
		t.Skip("no timerfd: the runner uses a time.Timer")
	}
	defer k.Close()
	addrs := testAddrs()
	r.SetBase([]string{"a", "b"}, false, addrs, false)
	r.takeKick()
	r.tr.tick(r.base, t0)                                  // as run would: the hello to b
	r.SetBase([]string{"a", "b", "c"}, true, addrs, false) // a new base: kick
	p, err := heartbeat{From: "b", Epoch: 1, Seq: 1, Driver: true}.encode()
	if err != nil {
		t.Fatal(err)
	}
	r.Receive(p, addrs["b"]) // its silence deadline: 2 intervals on
	if d, err := k.remaining(); err != nil || d != 0 {
		t.Errorf("the heartbeat moved the kicked alarm to %v (%v)", d, err)
	}
	if !r.takeKick() {
		t.Error("the kick is gone")
	}
}

// countingAlarm is an alarm that counts how often it is set or stopped.
type countingAlarm struct{ sets, stops int }

func (c *countingAlarm) Set(time.Duration) { c.sets++ }
func (c *countingAlarm) Stop()             { c.stops++ }
func (c *countingAlarm) Wait() bool        { return false }
func (c *countingAlarm) Close()            {}

// TestLeaseRunnerArmsOnlyOnChange: a driver's answers arrive between its
// rounds and leave its next deadline (the next round) where it was; they
// do not set the alarm again. With many members every node receives many
// heartbeats per round, and each re-arm is a system call.
func TestLeaseRunnerArmsOnlyOnChange(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	cfg := FastTimers()
	r := newTestRunner(cfg, t0, func() time.Time { return now })
	r.alarm.Close()
	ca := &countingAlarm{}
	r.alarm = ca
	addrs := testAddrs()
	r.SetBase([]string{"a", "b", "c"}, true, addrs, true)
	// What run does when the kick fires: the hello and the first round.
	r.mu.Lock()
	r.kicked, r.armed = false, time.Time{}
	sends, next := r.tr.tick(r.base, now)
	r.resetLocked(next, now)
	r.mu.Unlock()
	if len(sends) == 0 || ca.sets != 2 { // the kick, then the retry deadline
		t.Fatalf("first round: %d heartbeats, alarm set %d times; want some, and 2", len(sends), ca.sets)
	}
	round := sends[len(sends)-1].HB
	unchanged := 0
	for i, from := range []string{"b", "c", "b", "c"} {
		now = now.Add(time.Millisecond)
		hb := heartbeat{From: from, Epoch: uint64(7 + i%2), Seq: uint64(1 + i/2), Reply: true,
			Entries: []heartbeatEntry{{Name: "a", Epoch: r.tr.epoch, Seq: round.Seq}}}
		p, err := hb.encode()
		if err != nil {
			t.Fatal(err)
		}
		armed, sets := r.armed, ca.sets
		r.Receive(p, addrs[from])
		if want := r.tr.next(r.base, now); !r.armed.Equal(want) {
			t.Fatalf("heartbeat %d from %s: armed for %v, the tracker's next is %v", i, from, r.armed.Sub(t0), want.Sub(t0))
		}
		switch {
		case r.armed.Equal(armed) && ca.sets != sets:
			t.Errorf("heartbeat %d from %s left the deadline at %v and set the alarm again", i, from, armed.Sub(t0))
		case r.armed.Equal(armed):
			unchanged++
		case ca.sets != sets+1:
			t.Errorf("heartbeat %d from %s moved the deadline %v -> %v with %d sets", i, from, armed.Sub(t0), r.armed.Sub(t0), ca.sets-sets)
		}
	}
	if unchanged == 0 {
		t.Fatal("every heartbeat moved the deadline: the test shows nothing")
	}
	if ok, _ := r.tr.fence(r.base, true, now); !ok {
		t.Error("fence not held after both answers")
	}
}
