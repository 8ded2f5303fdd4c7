package lifecycle

import (
	"fmt"
	"slices"
	"time"
)

// ClaimSettle is how long a node that has just become eligible (start,
// restore, health recovered) waits before claiming a VIP by rank. Gossip
// reaches every node within a few gossip intervals; waiting lets the node
// see that another node already holds the VIP, so it does not take it away
// (a second interruption) when preempt is off. Failover is not delayed:
// the successor of a failed owner has been eligible all along.
const ClaimSettle = time.Second

// StaleHolderSettle replaces ClaimSettle, for a node that has just regained
// quorum, when a member it last saw holding the VIP is dead in its view:
// after a partition heals, the returning side's view of the other side is
// stale until the rejoin's state exchange and the refutations arrive, and
// the "dead" holder may well be alive and serving.
const StaleHolderSettle = 3 * time.Second

// MaxSettle bounds how long restarts can stretch one settle period.
const MaxSettle = 3 * ClaimSettle

// Action is what the agent does next for one VIP.
type Action int

const (
	// None: nothing to do (not held and not wanted, or waiting).
	None Action = iota
	// Claim: announce the VIP (this node should hold it and does not).
	Claim
	// Keep: this node holds the VIP and should.
	Keep
	// Reassert: keep, and announce again: a contest ended in this
	// node's favour and the loser's advertisements may have moved clients.
	Reassert
	// Drain: announce the BGP route with GRACEFUL_SHUTDOWN before the
	// handoff completes (planned departures only).
	Drain
	// Handoff: hand the VIP off make-before-break: keep it until the
	// successor holds it.
	Handoff
	// Release: withdraw the VIP now.
	Release
	// Quiesce: the successor holds the VIP and forwards this node's
	// connections to it: release the VIP by lingering on it (the address
	// goes, the connections stay until they end: chain.go).
	Quiesce
)

func (a Action) String() string {
	return [...]string{"none", "claim", "keep", "reassert", "drain", "handoff", "release", "linger"}[a]
}

// Input is everything Decide needs to know about one VIP on this node:
// the election's result over the current view, cluster facts, and what this
// node remembers of the VIP from its earlier passes.
type Input struct {
	Now  time.Time
	Self string
	// AnnounceAll is announce = "all" (every eligible node announces).
	AnnounceAll bool
	// L2: the VIP is announced by L2 (a contest won is re-announced).
	L2 bool
	// Election is the election's answer over the view; View is every
	// member (self too) as this pass sees it, for this VIP.
	Election Election
	View     []Peer
	// Quorum: this node sees a majority of the known members (or quorum is
	// not required); Alive and Known are the counts behind it.
	Quorum       bool
	Alive, Known int
	// QuorumRegained is when this node last regained quorum (zero: never
	// lost it).
	QuorumRegained time.Time
	// Planned: this node is withdrawn (by the operator or its Node) or
	// shutting down.
	Planned bool
	// Fenced: this node's lease lost its majority evidence (agent/lease): it
	// may not hold the VIP (unless AnnounceAll) and is not eligible.
	Fenced bool
	// AwaitFence: this node has no fresh majority evidence yet (it just
	// started driving lease rounds): it may not claim until it has.
	AwaitFence bool
	// Drain is how long a planned departure announces the BGP route with
	// GRACEFUL_SHUTDOWN first (0: no drain for this VIP).
	Drain time.Duration
	// HandoffTimeout bounds a make-before-break handoff.
	HandoffTimeout time.Duration
	// CanQuiesce: this node can end a handoff by lingering (its announcer
	// is a Lingerer, [connections] reset is on, the host's connections
	// can be read and closed); it does when the successor forwards.
	CanQuiesce bool

	// What this node did and saw at its earlier passes.
	Held           bool
	Down           bool // the VIP's interface is down
	DownIface      string
	EligibleSince  time.Time
	HandoffStarted time.Time
	DrainStarted   time.Time
	RetryAt        time.Time
	// Contested: at the last pass another alive node reported holding it.
	Contested bool
	// Bootstrap: the last pass's election used the bootstrap fallback.
	Bootstrap bool
	// LastEligible is the eligible list of the last pass; SettleStarted
	// when the current settle began.
	LastEligible  []string
	SettleStarted time.Time
}

// Decision is Decide's answer: the action, why, and the memory the next
// pass needs.
type Decision struct {
	Do     Action
	Reason string
	// StartedHandoff: this pass began a handoff (for logging).
	StartedHandoff bool

	EligibleSince  time.Time
	HandoffStarted time.Time
	DrainStarted   time.Time
	// WantsFence: this node is about to claim the VIP (or waits to): its
	// lease must drive rounds so a fresh majority evidence is there.
	WantsFence bool
	// CloseClients: the release completes a handoff (the successor holds
	// the VIP): close this node's client connections on it first, so the
	// clients reconnect to the successor at once.
	CloseClients bool
	// Settling: this node waits out a settle period before claiming.
	Settling      bool
	SettleStarted time.Time
	Contested     bool
	Bootstrap     bool
}

// Decide answers "should this node hold this VIP now, and what does it do
// about it": a pure function of its input, table-tested over
// the real election in the agent (agent/decide_test.go).
//
// The rules, in order:
//   - a VIP on a dead interface is released at once (nobody can reach it
//     there, and the successor cannot tell this node it holds it);
//   - a fenced node (no recent majority evidence, agent/lease) releases at
//     once and claims nothing, except announce = "all" VIPs;
//   - without quorum a held VIP is released at once;
//   - this node wants the VIP when it is the elected owner (or, with
//     announce = "all", when it is eligible) and it has quorum;
//   - a node that has just become eligible settles (ClaimSettle, or
//     StaleHolderSettle just after regaining quorum while a holder it saw is
//     dead in its view) before claiming, so gossip can show it who holds
//     the VIP already;
//   - a claim waits out the backoff after a failed announce;
//   - a VIP this node holds but should not is handed off make-before-break:
//     kept until the successor reports holding it or handoff_timeout, with a
//     BGP graceful-shutdown period first on planned departures, and released
//     at once when there is no successor (or with announce = "all").
func Decide(in Input) Decision {
	res := in.Election
	d := Decision{
		EligibleSince:  in.EligibleSince,
		HandoffStarted: in.HandoffStarted,
		DrainStarted:   in.DrainStarted,
		Bootstrap:      res.Bootstrap,
	}
	othersHold := HeldElsewhere(in.Self, in.View)
	d.Contested = othersHold

	fenced := in.Fenced && !in.AnnounceAll
	eligible := slices.Contains(res.Eligible, in.Self) && !fenced
	settle := ClaimSettle
	if staleHolder(in.View) && !in.QuorumRegained.IsZero() && in.Now.Sub(in.QuorumRegained) < StaleHolderSettle {
		settle = StaleHolderSettle
	}
	d.SettleStarted = in.SettleStarted
	switch {
	case !eligible || !in.Quorum:
		d.EligibleSince, d.SettleStarted = time.Time{}, time.Time{}
	case d.EligibleSince.IsZero():
		d.EligibleSince, d.SettleStarted = in.Now, in.Now
	case in.Held:
	case in.Bootstrap && !res.Bootstrap:
		// Leaving the bootstrap fallback (health returned somewhere, as
		// when etcd recovers and every apiserver turns ready at once):
		// every node that now sees itself healthy would otherwise claim
		// at once. Settle, so the holder's own recovery and the others'
		// reach this node first.
		d.EligibleSince, d.SettleStarted = in.Now, in.Now
	case in.Now.Sub(d.EligibleSince) < settle && !slices.Equal(in.LastEligible, res.Eligible) &&
		in.Now.Sub(in.SettleStarted) < MaxSettle:
		// Still settling and the field changed (another node became
		// eligible or went): start the settle again, so the claim rests
		// on a view that has been still for a settle period (bounded by
		// MaxSettle, so a flapping peer cannot hold a claim off forever).
		d.EligibleSince = in.Now
	}

	if in.Down {
		if in.Held {
			return d.release("interface " + in.DownIface + " is down")
		}
		return d
	}
	if fenced {
		// No majority confirmed hearing this node: the others may take the
		// VIP over at any moment. Release at once, before they can.
		if in.Held {
			return d.release("fenced: no majority of the known members confirmed hearing this node")
		}
		return d
	}

	want := res.Owner == in.Self
	if in.AnnounceAll {
		want = eligible
	}
	if !in.Quorum {
		want = false
	}
	if want && !in.Held && !d.EligibleSince.IsZero() {
		// Even a node that sees itself alone waits: at cluster start its
		// peers may be a moment from joining, and claiming every VIP first
		// would leave them all on it (preempt is off).
		if in.Now.Sub(d.EligibleSince) < settle {
			d.Settling = true
			want = false
		}
	}

	if want && !in.Held && !in.AnnounceAll {
		d.WantsFence = true
	}
	if d.Settling && res.Owner == in.Self && !in.AnnounceAll {
		d.WantsFence = true // ready by the end of the settle
	}
	switch {
	case want && !in.Held:
		if in.Now.Before(in.RetryAt) {
			return d
		}
		if in.AwaitFence && !in.AnnounceAll {
			return d // the lease's next answer makes it fresh
		}
		d.HandoffStarted, d.DrainStarted = time.Time{}, time.Time{}
		d.Do, d.Reason = Claim, res.Reason
		return d
	case want && in.Held:
		d.HandoffStarted, d.DrainStarted = time.Time{}, time.Time{}
		d.Do = Keep
		if in.Contested && !othersHold && in.L2 {
			d.Do, d.Reason = Reassert, "duplicate holder released it"
		}
		return d
	case !in.Held:
		return d
	case !in.Quorum:
		return d.release(fmt.Sprintf("lost quorum: %d of %d known members alive", in.Alive, in.Known))
	}
	return d.handoff(in)
}

func (d Decision) release(reason string) Decision {
	d.Do, d.Reason = Release, reason
	d.HandoffStarted, d.DrainStarted = time.Time{}, time.Time{}
	return d
}

// handoff decides the next step of handing a held VIP off.
func (d Decision) handoff(in Input) Decision {
	res := in.Election
	if d.HandoffStarted.IsZero() {
		d.HandoffStarted = in.Now
		d.StartedHandoff = true
	}
	if in.Drain > 0 && in.Planned {
		if d.DrainStarted.IsZero() {
			d.DrainStarted = in.Now
			d.Do, d.Reason = Drain, "graceful shutdown before handoff"
			return d
		}
		if in.Now.Sub(d.DrainStarted) < in.Drain {
			d.Do = Handoff
			return d
		}
	}
	successorHolds, successorForwards := false, false
	for _, m := range in.View {
		if m.Name != in.Self && m.Name == res.Owner && m.Held {
			successorHolds, successorForwards = true, m.Forwarding
		}
	}
	switch {
	case in.AnnounceAll:
		return d.release("not eligible")
	case res.Owner == "":
		return d.release("no eligible node")
	case successorHolds && in.CanQuiesce && successorForwards:
		// The daisy chain: the successor passes this node's connections
		// on to it, so they keep working after it released the VIP,
		// until they end.
		d = d.release("successor " + res.Owner + " holds it and forwards this node's connections")
		d.Do = Quiesce
		return d
	case successorHolds:
		d = d.release("successor " + res.Owner + " holds it")
		d.CloseClients = true
		return d
	case in.Now.Sub(d.HandoffStarted) >= in.HandoffTimeout:
		return d.release("handoff timeout; successor " + orNone(res.Owner) + " did not confirm")
	}
	d.Do = Handoff
	return d
}

// HeldElsewhere reports whether an alive (or suspect) member other than
// self reports holding the VIP.
func HeldElsewhere(self string, view []Peer) bool {
	for _, m := range view {
		if m.Name != self && m.State.Up() && m.Held {
			return true
		}
	}
	return false
}

// staleHolder reports whether a member that is dead in this view last
// reported holding the VIP.
func staleHolder(view []Peer) bool {
	for _, m := range view {
		if m.State == Dead && m.Held {
			return true
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
