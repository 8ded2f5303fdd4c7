package lifecycle

import (
	"maps"
	"slices"
	"time"
)

// The client reset after an unplanned failover (the agent's clients.go
// tells the story): whose clients a new holder takes over, and when it
// resets them.

// TakeoverHorizon bounds how long a new holder waits for the previous one
// to release before it gives its clients up: later, they have found out
// by themselves.
const TakeoverHorizon = 30 * time.Second

// LastHolder returns another member that reports holding the VIP in view
// (an alive one first), or "".
func LastHolder(self string, view []Peer) string {
	holder := ""
	for _, m := range view {
		if m.Name == self || !m.Held {
			continue
		}
		if m.State.Up() {
			return m.Name
		}
		holder = m.Name
	}
	return holder
}

// NoteHolders returns seen (member name to when it was last seen holding
// the VIP) with every other member that view reports holding it seen at
// now, and without those not seen for TakeoverHorizon.
func NoteHolders(seen map[string]time.Time, self string, view []Peer, now time.Time) map[string]time.Time {
	for _, m := range view {
		if m.Name != self && m.Held {
			if seen == nil {
				seen = map[string]time.Time{}
			}
			seen[m.Name] = now
		}
	}
	for name, at := range seen {
		if now.Sub(at) > TakeoverHorizon {
			delete(seen, name)
		}
	}
	return seen
}

// StartTakeovers answers, when this node has just claimed the VIP, whose
// clients it may have to reset, in name order: every other member seen
// holding it lately (seen, as NoteHolders keeps it). One is not enough:
// in a planned handoff whose successor died, the old holder (alive,
// releasing) and the dead successor both had clients. None when this
// node cannot reset clients ([connections] reset off, or announce =
// "all": every eligible node holds the VIP, no holder's clients are
// lost).
func StartTakeovers(self string, seen map[string]time.Time, canReset bool) []string {
	if !canReset {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(seen)) {
		if name != self {
			out = append(out, name)
		}
	}
	return out
}

// TakeoverStep decides, at a pass, the takeover of from's clients that
// began at since (no effect: wait). view is this pass's (lease verdicts
// applied: from is dead once its fence expired, holding nothing once
// what it said is stale).
//
// Clients are reset only while this node holds the VIP, and only once
// from does not hold it any more: it said it released it, or it is dead,
// left or forgotten. A holder cut off from the others but still serving
// its clients is never disturbed: until its fence expires it is alive
// and holding for the view. Nor is one lingering on its connections (the
// daisy chain): they still work.
func TakeoverStep(now time.Time, from string, since time.Time, held, canReset bool, view []Peer) []Effect {
	prev, found := peer(view, from)
	switch {
	case !canReset:
		return []Effect{{Kind: ForgetClients, Member: from, Reason: "[connections] reset is off"}}
	case !held || now.Sub(since) > TakeoverHorizon:
		return []Effect{{Kind: ForgetClients, Member: from, Reason: "no longer holding the VIP, or it did not release it in time"}}
	case found && prev.State.Up() && (prev.Held || prev.Lingering):
		return nil
	}
	// Lost, not handed over: a holder that handed the VIP over on purpose
	// (withdrawn, leaving) closed its connections itself, those opened
	// after its list included.
	return []Effect{{Kind: ResetClients, Member: from, Lost: !found || !prev.Departing}}
}
