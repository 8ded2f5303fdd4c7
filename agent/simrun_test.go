package agent

import (
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/lifecycle"
)

// TestSimSeeds runs the cluster simulator over many seeds: each a cluster
// of 3-7 nodes through a minute of faults and a quiet tail, with the
// checkers on (docs/design.md, "The cluster simulator"). VIPD_SIM_SEEDS
// sets how many, VIPD_SIM_FIRST the first; VIPD_SIM_SEED runs one seed
// and logs its whole story.
func TestSimSeeds(t *testing.T) {
	// A seed allocates fast and keeps little (the lease's state per
	// heartbeat): at the default GOGC of 100 the collector took a third
	// of the CPU. 400 costs some 70 MB more of heap (GOGC, when set,
	// decides).
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	if v := os.Getenv("VIPD_SIM_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("VIPD_SIM_SEED: %v", err)
		}
		s := newSim(simOptions{Seed: seed, Trace: 1 << 20})
		bad := s.run()
		t.Logf("story of seed %d:\n%s", seed, s.story())
		if len(bad) > 0 {
			t.Fatalf("seed %d: %s", seed, strings.Join(bad, "; "))
		}
		return
	}
	n, first := uint64(simSeedsDefault), uint64(1)
	if v := os.Getenv("VIPD_SIM_SEEDS"); v != "" {
		var err error
		if n, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("VIPD_SIM_SEEDS: %v", err)
		}
	}
	if v := os.Getenv("VIPD_SIM_FIRST"); v != "" {
		var err error
		if first, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("VIPD_SIM_FIRST: %v", err)
		}
	}
	type result struct {
		bad   []string
		story string
		gap   time.Duration
		moves int
	}
	// Seeds are independent: one worker per CPU, results in seed order.
	results := make([]result, n)
	var wg sync.WaitGroup
	next := make(chan uint64)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				s := newSim(simOptions{Seed: first + i})
				r := result{bad: s.run(), gap: s.maxNoHolder, moves: s.moves}
				if len(r.bad) > 0 {
					r.story = s.story()
				}
				results[i] = r
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	failed, moves := 0, 0
	var maxGap time.Duration
	var gapSeed uint64
	for i, r := range results {
		seed := first + uint64(i)
		if why, ok := simKnown[seed]; ok && len(r.bad) > 0 {
			t.Logf("seed %d: known finding (%s): %s", seed, why, strings.Join(r.bad, "; "))
			continue
		}
		if len(r.bad) > 0 {
			failed++
			if failed <= 3 {
				t.Errorf("seed %d (rerun: VIPD_SIM_SEED=%d go test -run 'TestSimSeeds$' -v ./agent/): %s\nlast events:\n%s",
					seed, seed, strings.Join(r.bad, "; "), r.story)
			} else {
				t.Errorf("seed %d: %s", seed, strings.Join(r.bad, "; "))
			}
		}
		if r.gap > maxGap {
			maxGap, gapSeed = r.gap, seed
		}
		moves += r.moves
	}
	t.Logf("%d seeds from %d: %d failed; longest time without a holder while a stable majority was up: %s (seed %d); %d moves",
		n, first, failed, maxGap.Round(time.Millisecond), gapSeed, moves)
}

// The checkers catch a broken decide or election: each test breaks one
// the way a real bug would and wants the simulator to fail, with the
// checker it names, within a few seeds.

// TestSimCatchesClaimWithoutLease: decide ignoring the lease (claiming
// without fresh majority evidence, holding while fenced) makes two
// holders.
func TestSimCatchesClaimWithoutLease(t *testing.T) {
	o := simOptions{Decide: func(in lifecycle.Input) lifecycle.Decision {
		in.Fenced, in.AwaitFence = false, false
		return lifecycle.Decide(in)
	}}
	simWantCaught(t, o, "two holders", 1)
}

// TestSimCatchesIgnoredHolder: an election that ignores who holds the VIP
// (a returning better-ranked node takes it with preempt off) moves it
// without a cause.
func TestSimCatchesIgnoredHolder(t *testing.T) {
	o := simOptions{Elect: func(ms []Member, v ElectionVIP) Result {
		out := make([]Member, len(ms))
		for i, m := range ms {
			m.Meta.VIPs = maps.Clone(m.Meta.VIPs)
			for k, vm := range m.Meta.VIPs {
				vm.Held = false
				m.Meta.VIPs[k] = vm
			}
			out[i] = m
		}
		return Elect(out, v)
	}, NoPreempt: true}
	simWantCaught(t, o, "needless move", 3)
}

// TestSimCatchesNoClaim: a decide that lets only n1 claim leaves the VIP
// on no host while n1 is down.
func TestSimCatchesNoClaim(t *testing.T) {
	o := simOptions{Decide: func(in lifecycle.Input) lifecycle.Decision {
		d := lifecycle.Decide(in)
		if d.Do == lifecycle.Claim && in.Self != "n1" {
			d.Do = lifecycle.None
		}
		return d
	}}
	simWantCaught(t, o, "no holder", 1)
}

// simCatchSeeds is the seed budget a search of the simWantCaught tests
// is meant to need at most.
const simCatchSeeds = 200

// simWantCaught wants seed to fail with o, with a violation naming want,
// and to pass with the code unbroken: the break is what the checker
// caught. seed is the first seed of a search that found it so (the known
// findings' seeds skipped); VIPD_SIM_CATCH_SEEDS=n searches seeds 1..n
// again instead (a change to the simulator moves what each seed does),
// and the test logs the first it finds.
func simWantCaught(t *testing.T, o simOptions, want string, seed uint64) {
	t.Helper()
	caught := func(seed uint64) ([]string, bool) {
		o.Seed = seed
		bad := newSim(o).run()
		if !strings.Contains(strings.Join(bad, "; "), want) {
			return bad, false
		}
		clean := o
		clean.Decide, clean.Elect, clean.Bug = nil, nil, simBugNone
		return bad, len(newSim(clean).run()) == 0
	}
	v := os.Getenv("VIPD_SIM_CATCH_SEEDS")
	if v == "" {
		bad, ok := caught(seed)
		if !ok {
			t.Fatalf("seed %d did not catch the broken code with %q (it found %q); search again with VIPD_SIM_CATCH_SEEDS=%d",
				seed, want, bad, simCatchSeeds)
		}
		t.Logf("seed %d caught it: %s", seed, strings.Join(bad, "; "))
		return
	}
	budget, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("VIPD_SIM_CATCH_SEEDS: %v", err)
	}
	for s := uint64(1); s <= budget; s++ {
		if _, known := simKnown[s]; known {
			continue
		}
		if bad, ok := caught(s); ok {
			t.Logf("seed %d caught it (the %d-th seed tried): %s", s, s, strings.Join(bad, "; "))
			return
		}
	}
	t.Fatalf("no seed of %d caught the broken code with %q", budget, want)
}

// TestSimDeterministic: a seed's run is the same, event for event, every
// time (the trace of all its events compared).
func TestSimDeterministic(t *testing.T) {
	run := func(seed uint64) string {
		s := newSim(simOptions{Seed: seed, Trace: 1 << 20})
		s.run()
		return s.story()
	}
	a, b := run(7), run(7)
	if a != b {
		t.Fatalf("seed 7 ran differently twice:\n%s\n---\n%s", a, b)
	}
	if c := run(8); c == a {
		t.Fatal("seeds 7 and 8 ran the same")
	}
	if n := strings.Count(a, "\n"); n < 50 {
		t.Fatalf("seed 7's story has %d events, want a run", n)
	}
}

// simKnown are seeds that fail on a finding of the simulator not fixed
// yet: TestSimSeeds reports them without failing, and TestSimKnownFindings
// wants them to fail still (a fix moves its seed to a regression test).
var simKnown = map[uint64]string{
	// Two nodes claim within 2 ms as a power-on and a cut link end, each
	// electing itself on a view of the other from before. Not looked
	// into yet.
	764: "two claims at once after a partial partition",
	// Found by the first run of seeds 1-10,000 (make sim-ci).
	// The same class as 764 (overlapping majorities, each claim on its
	// own evidence): two nodes claim within 1-3 ms as a partition heals
	// or powered-off nodes boot, each electing itself on a view of the
	// other from before.
	2256: "two claims at once as a partition heals (764's class)",
	8374: "two claims at once as every fault heals (764's class)",
	9513: "two claims at once on one side of a partition (764's class)",
	// A node the others could not hear keeps quorum in its own view, so
	// no settle (StaleHolderSettle needs a quorum regained), and claims
	// on its first fresh evidence once its packets flow: 4223, alone in
	// a partition for 4.7 s (under membership's 5 s), elects itself on
	// finding the old holder's vipd killed, 44 ms after the heal, before
	// it hears the holder that claimed meanwhile (1087's sibling, for a
	// holder it never knew); 2592, its outgoing packets lost 5.3 s, was
	// elected by a handoff, then taken for dead and replaced by n6, and
	// with preempt claims over n6 22 ms after its packets flow, before n6
	// hears it alive and starts a handoff. Not fixed yet.
	2592: "a node back from losing its outgoing packets claims over a holder it has not heard yet",
	4223: "a node back from a partition claims over a holder it has not heard yet",
	// A holder hands the VIP off again before its successor knows every
	// member it forwards to: the successor forwards only to the last
	// holder and the lingering members it has heard of, and the middle
	// node stops forwarding as it lingers. 3448: n5's Lingering not yet
	// gossiped to n2 (20% loss) 140 ms after n4 took over from it; 7984:
	// n4, deaf, still holds (handing off to n2), but n6 forwards only to
	// its last holder n2. Not fixed yet (the successor cannot tell).
	3448: "a second handoff before the successor heard of a lingering member",
	7984: "a second handoff while the first's old holder, deaf, still holds",
	// No holder for 8.01-8.05 s, just past the simulator's own bound
	// (vipd documents none; docs/design.md): an elected node the
	// majority cannot reach but still sees alive for membership's 5 s
	// (7307), or elections flipping with health flaps, the bootstrap
	// fallback and a fenced holder's return (8140, 8256, 10000), each
	// change restarting the settle up to MaxSettle. Liveness only.
	7307:  "no holder 8.04 s: the majority elected an unreachable node, then settles",
	8140:  "no holder 8.02 s: elections flip as a fenced holder returns, settles restart",
	8256:  "no holder 8.01 s: bootstrap-fallback elections flip with health flaps",
	10000: "no holder 8.05 s: bootstrap-fallback elections flip, then a settle",
}

// simRegressions are seeds that once failed on a finding since fixed:
// TestSimRegressions wants each to pass.
//
// Seeds found before the daisy chain was modelled replay with NoChain.
var simRegressions = map[uint64]string{
	// n3 loses all its incoming packets for 4.8 s; its membership calls
	// the holder n2 dead (not n1), so it keeps quorum; when its traffic
	// returns it elects itself and claims on its first fresh evidence,
	// before n2's next heartbeat: two holders. The lease had not taken
	// n2 for gone (n1 heard it): lease.State.View now keeps such a
	// driver alive.
	1087: "a node deaf for memberlist's suspicion timeout claimed over a live holder when its traffic returned",
}

// simChainRegressions are the same for findings of the simulator with
// the daisy chain modelled.
var simChainRegressions = map[uint64]string{
	// A holder forwarding to a lingering node hands the VIP off again:
	// its successor forwards to both and announces; the old holder, told
	// to linger, stopped its forwarding before Linger took its address
	// away (startLinger), and a segment of the lingering node's connection
	// from a client whose ARP cache still named the old holder reached it
	// in that millisecond: reset while the lingering node served it (n7
	// and n5 in seed 47, n2 and n1 in 862). startLinger now stops
	// forwarding after Linger.
	47:  "startLinger stopped forwarding before the address went",
	862: "startLinger stopped forwarding before the address went",
	// n3 claims, forwarding to n2, and hands the VIP back at once (every
	// apiserver unhealthy: n2, still holding, is elected again): release
	// stopped forwarding before the withdraw, and a segment of n2's
	// connection reached n3 in between (its announcer slow). release now
	// stops forwarding after the address goes.
	807: "release stopped forwarding before the address went",
	// A holder exits for a restart in place (its address kept, its
	// process gone); a peer elected meanwhile claimed while the address
	// was still on the restarting host, and two hosts answered until the
	// lifetime ended: preempt after a restore (877), or the holder's
	// metadata frozen unhealthy from an outage every apiserver had (945).
	// The election now keeps the VIP with a holder restarting in place
	// until it is back or its grace runs out.
	877: "a claim over a holder restarting in place (preempt)",
	945: "a claim over a holder restarting in place (its health frozen)",
	// A holder restarts in place; its next process adopts the VIP (the
	// lease's HoldUntil) and its lease confirms it; then it is cut off
	// (a partition, or its outgoing packets lost) before HoldUntil's
	// deadline. The peers had heard its new epoch (their restart grace
	// over) and took the VIP over on votes; it never fenced, HoldUntil
	// still letting it hold without evidence: two holders. The lease now
	// ends HoldUntil at the process's first majority evidence.
	3875: "an adopted VIP held on HoldUntil after the lease confirmed it (partition)",
	6409: "an adopted VIP held on HoldUntil after the lease confirmed it (partition)",
	9456: "an adopted VIP held on HoldUntil after the lease confirmed it (outgoing lost)",
	// The holder's vipd is killed; a peer claims on the refused probe
	// and pokes its clients before vipd cleanup (ExecStopPost) took the
	// address: connections lost anyway, which the checker took for
	// served (reachable now counts a killed vipd's host as the announcers
	// checker does).
	3498: "a poke of a killed vipd's clients before its cleanup ran",
}

// TestSimRegressions: the seeds of fixed findings pass.
func TestSimRegressions(t *testing.T) {
	for seed, why := range simRegressions {
		s := newSim(simOptions{Seed: seed, NoChain: true})
		if bad := s.run(); len(bad) > 0 {
			t.Errorf("seed %d (%s): %s\nlast events:\n%s", seed, why, strings.Join(bad, "; "), s.story())
		}
	}
	for seed, why := range simChainRegressions {
		s := newSim(simOptions{Seed: seed})
		if bad := s.run(); len(bad) > 0 {
			t.Errorf("seed %d (%s): %s\nlast events:\n%s", seed, why, strings.Join(bad, "; "), s.story())
		}
	}
}

// TestSimKnownFindings: every known finding's seed still fails the way it
// was found to.
func TestSimKnownFindings(t *testing.T) {
	for seed, why := range simKnown {
		s := newSim(simOptions{Seed: seed})
		if bad := s.run(); len(bad) == 0 {
			t.Errorf("seed %d (%s) passes now: move it to a regression test", seed, why)
		}
	}
}

// The chain's checkers catch a broken shell (simchain_test.go): each test
// reverts one fix of the daisy chain, the lingering or the client reset
// in the modelled shell and wants the simulator to fail with the checker
// it names.

// TestSimCatchesAnnounceBeforeForward: a successor that announces the VIP
// before it forwards the old holder's connections resets a client that
// moved at the gratuitous ARP (the order 189ad3c fixed).
func TestSimCatchesAnnounceBeforeForward(t *testing.T) {
	simWantCaught(t, simOptions{Bug: simBugAnnounceFirst}, "still serves it", 33)
}

// TestSimCatchesTakeoverOfLastHolderOnly: a takeover that resets only the
// last holder's clients leaves a successor's, dead mid-chain, hanging
// (finding 5).
func TestSimCatchesTakeoverOfLastHolderOnly(t *testing.T) {
	simWantCaught(t, simOptions{Bug: simBugTakeoverLastOnly}, "takeover did not reset it", 66)
}

// TestSimCatchesCalledOffClosing: a lingering node whose called-off
// closing destroys its busy connections cuts the requests of the clients
// it keeps (finding 7).
func TestSimCatchesCalledOffClosing(t *testing.T) {
	simWantCaught(t, simOptions{Bug: simBugCallOffCloses}, "closed with a request in flight", 11)
}

// TestSimCatchesRestartMidHandoff: a restart in place that does not let a
// handoff under way finish takes the forwarding away from the lingering
// old holder's clients (finding 8).
func TestSimCatchesRestartMidHandoff(t *testing.T) {
	simWantCaught(t, simOptions{Bug: simBugRestartMidHandoff}, "still serves it", 17)
}

// TestSimCatchesLingerForever: a lingering node that ignores linger_max
// lingers past it.
func TestSimCatchesLingerForever(t *testing.T) {
	simWantCaught(t, simOptions{Bug: simBugLingerForever}, "past linger_max", 38)
}
