package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/lifecycle"
)

// decideInput is lifecycle.Input with the view as the election's members
// (the election runs over them); decideOver converts it for vip.
type decideInput struct {
	lifecycle.Input
	View []Member
}

func decideOver(vip string, in decideInput) lifecycle.Decision {
	in.Input.View = peersOf(in.View, vip, nil)
	return lifecycle.Decide(in.Input)
}

// TestDecide covers decide's rules, one situation per case. Views are built
// with the election tests' helpers; "self" is node "a".
func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const vip = "api" // the VIP the election helpers set up
	// base: a 3-node cluster with quorum where self has been eligible long
	// enough to claim.
	base := func(view []Member) decideInput {
		return decideInput{View: view, Input: lifecycle.Input{
			Now: t0, Self: "a", L2: true,
			Election: electionOf(Elect(view, ElectionVIP{Name: vip})),
			Quorum:   true, Alive: 3, Known: 3,
			HandoffTimeout: 10 * time.Second,
			EligibleSince:  t0.Add(-time.Minute),
		}}
	}
	// loser is a node name that ranks below "a" for the VIP.
	loser := ""
	for _, n := range []string{"b", "c", "d", "e", "f", "g"} {
		if topRanked("a", n) == "a" {
			loser = n
			break
		}
	}
	if loser == "" {
		t.Fatal("no name ranks below a")
	}
	selfFirst := func() []Member {
		// Make self the owner: the only healthy node (b and c are alive
		// and unhealthy).
		return []Member{node("a"), node("b", unhealthy), node("c", unhealthy)}
	}
	selfNotOwner := func(mods ...nodeOpt) []Member {
		return []Member{node("a", append([]nodeOpt{unhealthy}, mods...)...), node("b"), node("c")}
	}

	tests := []struct {
		name   string
		in     func() decideInput
		do     lifecycle.Action
		reason string // substring
		check  func(t *testing.T, d lifecycle.Decision)
	}{
		{
			name: "owner not holding claims",
			in:   func() decideInput { return base(selfFirst()) },
			do:   lifecycle.Claim,
		},
		{
			name: "owner holding keeps",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node("b", unhealthy), node("c", unhealthy)})
				in.Held = true
				return in
			},
			do: lifecycle.Keep,
		},
		{
			name: "just became eligible: settles before claiming",
			in: func() decideInput {
				in := base(selfFirst())
				in.EligibleSince = time.Time{}
				return in
			},
			do:    lifecycle.None,
			check: func(t *testing.T, d lifecycle.Decision) { mustSettle(t, d, t0) },
		},
		{
			name: "eligible for less than lifecycle.ClaimSettle: still settling",
			in: func() decideInput {
				in := base(selfFirst())
				in.EligibleSince = t0.Add(-lifecycle.ClaimSettle / 2)
				return in
			},
			do:    lifecycle.None,
			check: func(t *testing.T, d lifecycle.Decision) { mustSettle(t, d, t0.Add(-lifecycle.ClaimSettle/2)) },
		},
		{
			name: "quorum regained with a dead holder in view: settles longer",
			in: func() decideInput {
				in := base([]Member{node("a"), node("b", unhealthy), node("c", holds, dead)})
				in.EligibleSince = t0.Add(-2 * lifecycle.ClaimSettle)
				in.QuorumRegained = t0.Add(-time.Second)
				return in
			},
			do: lifecycle.None,
			check: func(t *testing.T, d lifecycle.Decision) {
				if !d.Settling {
					t.Errorf("not settling %s after regaining quorum with a stale holder", 2*lifecycle.ClaimSettle)
				}
			},
		},
		{
			name: "leaving the bootstrap fallback (health returned): settle again before claiming",
			in: func() decideInput {
				in := base(selfFirst())
				in.Bootstrap = true // the last pass elected by the fallback
				return in
			},
			do:    lifecycle.None,
			check: func(t *testing.T, d lifecycle.Decision) { mustSettle(t, d, t0) },
		},
		{
			name: "leaving the bootstrap fallback while holding: keep",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node("b", unhealthy), node("c", unhealthy)})
				in.Held, in.Bootstrap = true, true
				return in
			},
			do: lifecycle.Keep,
		},
		{
			name: "settling and another node became eligible: settle again",
			in: func() decideInput {
				in := base(selfFirst())
				in.EligibleSince, in.SettleStarted = t0.Add(-lifecycle.ClaimSettle/2), t0.Add(-lifecycle.ClaimSettle/2)
				in.LastEligible = []string{"a", "x"}
				return in
			},
			do:    lifecycle.None,
			check: func(t *testing.T, d lifecycle.Decision) { mustSettle(t, d, t0) },
		},
		{
			name: "settle restarts are bounded: a flapping peer cannot hold a claim off",
			in: func() decideInput {
				in := base(selfFirst())
				in.EligibleSince, in.SettleStarted = t0.Add(-lifecycle.ClaimSettle/2), t0.Add(-lifecycle.MaxSettle)
				in.LastEligible = []string{"a", "x"}
				return in
			},
			do:    lifecycle.None,
			check: func(t *testing.T, d lifecycle.Decision) { mustSettle(t, d, t0.Add(-lifecycle.ClaimSettle/2)) },
		},
		{
			name: "failover: the successor, eligible all along, claims at once although the field changed",
			in: func() decideInput {
				in := base([]Member{node("a"), node("b", dead, holds), node("c", unhealthy)})
				in.LastEligible = []string{"b", "a"}
				return in
			},
			do: lifecycle.Claim,
		},
		{
			name: "fenced while holding: release at once (the others may claim soon)",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node("b"), node("c")})
				in.Held, in.Fenced = true, true
				return in
			},
			do:     lifecycle.Release,
			reason: "fenced",
		},
		{
			name: "fenced: never claims, not even as the elected owner",
			in: func() decideInput {
				in := base(selfFirst())
				in.Fenced = true
				return in
			},
			do: lifecycle.None,
			check: func(t *testing.T, d lifecycle.Decision) {
				if !d.EligibleSince.IsZero() {
					t.Errorf("a fenced node counts itself eligible")
				}
			},
		},
		{
			name: "fenced: announce=all VIPs are not fenced",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node("b", holds), node("c")})
				in.AnnounceAll, in.Held, in.Fenced = true, true, true
				return in
			},
			do: lifecycle.Keep,
		},
		{
			name: "failed announce: waits out the backoff",
			in: func() decideInput {
				in := base(selfFirst())
				in.RetryAt = t0.Add(time.Second)
				return in
			},
			do: lifecycle.None,
		},
		{
			name: "quorum lost while holding: release at once",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node("b", dead), node("c", dead)})
				in.Held, in.Quorum, in.Alive = true, false, 1
				return in
			},
			do:     lifecycle.Release,
			reason: "lost quorum: 1 of 3",
			check: func(t *testing.T, d lifecycle.Decision) {
				if !d.EligibleSince.IsZero() {
					t.Errorf("eligible without quorum")
				}
			},
		},
		{
			name: "no quorum and not holding: never claims",
			in: func() decideInput {
				in := base(selfFirst())
				in.Quorum = false
				return in
			},
			do: lifecycle.None,
		},
		{
			name: "interface down while holding: release at once, no handoff",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node("b"), node("c")})
				in.Held, in.Down, in.DownIface = true, true, "eth0"
				return in
			},
			do:     lifecycle.Release,
			reason: "interface eth0 is down",
		},
		{
			name: "not owner while holding: starts a handoff",
			in: func() decideInput {
				in := base(selfNotOwner(holds))
				in.Held = true
				return in
			},
			do: lifecycle.Handoff,
			check: func(t *testing.T, d lifecycle.Decision) {
				if !d.StartedHandoff || !d.HandoffStarted.Equal(t0) {
					t.Errorf("handoff not started now: %+v", d)
				}
			},
		},
		{
			name: "handoff in progress: keeps waiting for the successor",
			in: func() decideInput {
				in := base(selfNotOwner(holds))
				in.Held, in.HandoffStarted = true, t0.Add(-time.Second)
				return in
			},
			do: lifecycle.Handoff,
			check: func(t *testing.T, d lifecycle.Decision) {
				if d.StartedHandoff || !d.HandoffStarted.Equal(t0.Add(-time.Second)) {
					t.Errorf("handoff restarted: %+v", d)
				}
			},
		},
		{
			name: "handoff: successor holds, release",
			in: func() decideInput {
				in := base([]Member{node("a", unhealthy, holds), node("b", holds), node("c", unhealthy)})
				in.Held, in.HandoffStarted = true, t0.Add(-time.Second)
				in.Election = electionOf(Elect(in.View, ElectionVIP{Name: vip, Preempt: true}))
				return in
			},
			do:     lifecycle.Release,
			reason: "successor b holds it",
			check:  closesClients(true),
		},
		{
			name: "handoff: successor holds and forwards, this node can linger: release by lingering",
			in: func() decideInput {
				in := base([]Member{node("a", unhealthy, holds), node("b", holds, forwards), node("c", unhealthy)})
				in.Held, in.HandoffStarted, in.CanQuiesce = true, t0.Add(-time.Second), true
				in.Election = electionOf(Elect(in.View, ElectionVIP{Name: vip, Preempt: true}))
				return in
			},
			do:     lifecycle.Quiesce,
			reason: "forwards",
		},
		{
			name: "handoff: successor holds and forwards, this node cannot linger: release, closing at once",
			in: func() decideInput {
				in := base([]Member{node("a", unhealthy, holds), node("b", holds, forwards), node("c", unhealthy)})
				in.Held, in.HandoffStarted = true, t0.Add(-time.Second)
				in.Election = electionOf(Elect(in.View, ElectionVIP{Name: vip, Preempt: true}))
				return in
			},
			do:     lifecycle.Release,
			reason: "successor b holds it",
			check:  closesClients(true),
		},
		{
			name: "handoff: successor holds without forwarding (an older release): release, closing at once",
			in: func() decideInput {
				in := base([]Member{node("a", unhealthy, holds), node("b", holds), node("c", unhealthy)})
				in.Held, in.HandoffStarted, in.CanQuiesce = true, t0.Add(-time.Second), true
				in.Election = electionOf(Elect(in.View, ElectionVIP{Name: vip, Preempt: true}))
				return in
			},
			do:     lifecycle.Release,
			reason: "successor b holds it",
			check:  closesClients(true),
		},
		{
			name: "handoff: timeout passes, release",
			in: func() decideInput {
				in := base(selfNotOwner(holds))
				in.Held, in.HandoffStarted = true, t0.Add(-11*time.Second)
				return in
			},
			do:     lifecycle.Release,
			reason: "handoff timeout",
			// Nobody took over: the clients would reconnect to nothing.
			check: closesClients(false),
		},
		{
			name: "no eligible node at all: release at once",
			in: func() decideInput {
				in := base([]Member{node("a", holds, withdrawn), node("b", withdrawn), node("c", dead)})
				in.Held = true
				return in
			},
			do:     lifecycle.Release,
			reason: "no eligible node",
			check:  closesClients(false),
		},
		{
			name: "planned BGP departure: drain first",
			in: func() decideInput {
				in := base(selfNotOwner(holds, withdrawn))
				in.Held, in.Planned, in.Drain, in.L2 = true, true, 5*time.Second, false
				return in
			},
			do: lifecycle.Drain,
		},
		{
			name: "planned BGP departure: waits out the drain",
			in: func() decideInput {
				in := base(selfNotOwner(holds, withdrawn))
				in.Held, in.Planned, in.Drain = true, true, 5*time.Second
				in.DrainStarted, in.HandoffStarted = t0.Add(-time.Second), t0.Add(-time.Second)
				return in
			},
			do: lifecycle.Handoff,
		},
		{
			name: "announce=all: every eligible node claims",
			in: func() decideInput {
				in := base([]Member{node("a"), node("b", holds), node("c", holds)})
				in.AnnounceAll = true
				return in
			},
			do: lifecycle.Claim,
		},
		{
			name: "announce=all: not eligible releases without handoff",
			in: func() decideInput {
				in := base(selfNotOwner(holds))
				in.AnnounceAll, in.Held = true, true
				return in
			},
			do:     lifecycle.Release,
			reason: "not eligible",
		},
		{
			name: "two nodes claim: the higher ranked holder keeps",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node(loser, holds)})
				in.Held = true
				return in
			},
			do: lifecycle.Keep,
			check: func(t *testing.T, d lifecycle.Decision) {
				if !d.Contested {
					t.Errorf("contest not remembered")
				}
			},
		},
		{
			name: "two nodes claim: the lower ranked holder releases (the winner holds it)",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node(loser, holds)})
				in.Self, in.Held = loser, true
				return in
			},
			do:     lifecycle.Release,
			reason: "successor a holds it",
			check:  closesClients(true),
		},
		{
			name: "contest ended in self's favour: re-announce (L2)",
			in: func() decideInput {
				in := base([]Member{node("a", holds), node("b", unhealthy), node("c", unhealthy)})
				in.Held, in.Contested = true, true
				return in
			},
			do: lifecycle.Reassert,
		},
		{
			name: "bootstrap fallback: eligible without health",
			in: func() decideInput {
				in := base([]Member{node("a", unhealthy), node("b", unhealthy), node("c", unhealthy)})
				if in.Election.Owner != "a" {
					in.Self = in.Election.Owner
				}
				return in
			},
			do: lifecycle.Claim,
			check: func(t *testing.T, d lifecycle.Decision) {
				if !d.Bootstrap {
					t.Errorf("bootstrap not remembered")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decideOver(vip, tt.in())
			if d.Do != tt.do {
				t.Fatalf("decide = %s (%q), want %s", d.Do, d.Reason, tt.do)
			}
			if !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", d.Reason, tt.reason)
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

// closesClients checks that a release closes this node's client
// connections on the VIP (a handoff the successor completed) or not.
func closesClients(want bool) func(*testing.T, lifecycle.Decision) {
	return func(t *testing.T, d lifecycle.Decision) {
		if d.CloseClients != want {
			t.Errorf("CloseClients = %v, want %v", d.CloseClients, want)
		}
	}
}

func mustSettle(t *testing.T, d lifecycle.Decision, since time.Time) {
	t.Helper()
	if !d.Settling {
		t.Errorf("not settling")
	}
	if !d.EligibleSince.Equal(since) {
		t.Errorf("eligible since %v, want %v", d.EligibleSince, since)
	}
}
