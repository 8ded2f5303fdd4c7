package lease

import (
	"sort"
	"time"
)

// State is the lease's state at one moment, as the agent's loop reads it
// each pass (Runner.State): this node's fence, and the evidence the lease
// has about the other members. It is a value; the zero State has no fence
// (quorum not required) and no evidence.
type State struct {
	timers   Timers
	required bool
	canHold  bool                 // fence valid now (or not required)
	evidence time.Time            // the newest majority evidence (zero: none)
	expired  map[string]time.Time // members gone, on positive evidence, and since when
	// lastGone is, for every member ever taken for gone (heard again
	// since or not), when it last was: whatever it published before then
	// about holding VIPs is no longer true (its fence had expired).
	lastGone map[string]time.Time
	// heard are the members whose heartbeat arrived less than Claim ago
	// (Runner.RecentlyHeard). Not compared by sameAs: it changes with every
	// heartbeat, and only matters when membership changes, which wakes
	// the loop anyway.
	heard map[string]bool
	// adopting: this node may hold only because of Runner.HoldUntil (no
	// evidence yet): what it took over, not new claims.
	adopting bool
	// restarting are the members restarting in place whose grace runs
	// (Runner.MarkRestarting, or their heartbeat): alive and holding for
	// the election until their next process is heard or the grace ends.
	restarting map[string]bool
	// drivers are the members this node expects to hear because their
	// last heartbeat said they drive rounds (they hold a VIP or are about
	// to claim one), and that are not gone.
	drivers map[string]bool
}

func (s State) sameAs(o State) bool {
	if s.canHold != o.canHold || s.adopting != o.adopting || s.required != o.required || len(s.expired) != len(o.expired) || len(s.restarting) != len(o.restarting) {
		return false
	}
	for n := range s.restarting {
		if !o.restarting[n] {
			return false
		}
	}
	for n := range s.expired {
		if _, ok := o.expired[n]; !ok {
			return false
		}
	}
	return true
}

// Timers returns the timers the lease runs with.
func (s State) Timers() Timers { return s.timers }

// Required reports whether quorum is required, so the fence applies.
func (s State) Required() bool { return s.required }

// CanHold reports whether this node may hold VIPs now: the fence is valid
// (a majority acked one of its heartbeats sent less than Release ago), or
// does not apply.
func (s State) CanHold() bool { return s.canHold }

// Evidence returns when this node sent the newest heartbeat a majority
// acked (its own clock; zero: none).
func (s State) Evidence() time.Time { return s.evidence }

// Adopting reports whether this node may hold VIPs now only by
// Runner.HoldUntil (it took them over from its previous process and has no
// evidence yet): it keeps those, and claims nothing new.
func (s State) Adopting() bool { return s.adopting }

// Restarting reports whether name is restarting in place, its grace
// running.
func (s State) Restarting(name string) bool { return s.restarting[name] }

// RestartsSince returns the members whose restart grace began, and whose
// ended (they are back, or it ran out), since prev, sorted.
func (s State) RestartsSince(prev State) (began, ended []string) {
	for n := range s.restarting {
		if !prev.restarting[n] {
			began = append(began, n)
		}
	}
	for n := range prev.restarting {
		if !s.restarting[n] {
			ended = append(ended, n)
		}
	}
	sort.Strings(began)
	sort.Strings(ended)
	return began, ended
}

// GoneSince returns the members gone now, on positive evidence, that were
// not gone in prev, sorted: the ones to tell the operator about.
func (s State) GoneSince(prev State) []string {
	var out []string
	for n := range s.expired {
		if _, was := prev.expired[n]; !was {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Member is membership's view of one other member, as View takes it.
type Member struct {
	// Name is the member's name.
	Name string
	// Alive: membership says alive or suspect. Dead: it says dead (it
	// stopped answering; a member that left is neither).
	Alive, Dead bool
	// Since is when membership last saw its state or metadata change;
	// MetaSince when its metadata last changed (or was first seen).
	Since, MetaSince time.Time
}

// Verdict is how the lease's evidence changes membership's view of a
// member for the election.
type Verdict struct {
	// Alive: take it for alive (suspect) although membership says dead.
	// Dead: take it for dead although membership says alive or suspect.
	// Neither: membership's view stands.
	Alive, Dead bool
	// StaleHolds: what it published about holding VIPs is from before its
	// fence expired: take it as holding none.
	StaleHolds bool
}

// View returns what the lease's evidence makes of m:
//   - gone on positive evidence (its fence expired), unless membership saw
//     it change since (it restarted, or rejoined, and says so in its
//     metadata): dead;
//   - heard again after it was gone, but with metadata from before that:
//     holding nothing (StaleHolds). Its fence had expired, so it
//     released; what it said about holding before is stale until its
//     current metadata arrives. Believing it would make the node that took
//     over release to it ("the highest ranked holder wins") and leave the
//     VIP dark until it claims again, after a heal;
//   - restarting in place, its grace running: alive (suspect), whatever
//     membership says (its process exited without a leave, so membership
//     soon calls it dead), and holding what it said it holds;
//   - dead for membership, a driver (its last heartbeat said so) and not
//     gone for the lease: alive (suspect). Only a majority's votes or a
//     refused connection end a driver's fence; this node's membership
//     declaring it dead is one node's verdict: a node that lost only its
//     incoming traffic for memberlist's suspicion timeout calls the holder
//     dead while the majority hears it, and claimed the VIP the moment
//     its traffic returned, before the holder's next heartbeat: two
//     holders (the cluster simulator's seed 1087);
//   - dead for membership but heard less than Claim ago: alive (suspect).
//     A node back from a partition gossips the deaths it concluded while
//     cut off, and a holder whose incarnation did not change in the
//     meantime is dead for every node that believes it, until it refutes,
//     a few milliseconds later. Taken for dead, the others would elect a
//     new owner and claim at once (they have been eligible all along): two
//     holders, and a move with preempt off. Its heartbeat is direct
//     evidence; the gossip is hearsay. A member that left is not
//     overridden: it said so itself.
func (s State) View(m Member) Verdict {
	var v Verdict
	at, gone := s.expired[m.Name]
	switch {
	case s.restarting[m.Name]:
		v.Alive = true
		return v
	case m.Dead && (s.heard[m.Name] || s.drivers[m.Name]) && !gone:
		v.Alive = true
	case gone && m.Alive && !m.Since.After(at):
		v.Dead = true
	}
	if at, was := s.lastGone[m.Name]; was && !m.MetaSince.After(at) {
		v.StaleHolds = true
	}
	return v
}
