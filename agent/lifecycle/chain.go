package lifecycle

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// The daisy chain's decisions (the agent's chain.go tells the whole
// story): which members a new holder forwards the connections it does not
// know to, when it stops forwarding to each, and when a lingering node
// ends its linger.

// ForwardGrace is how long the holder keeps forwarding to a member after
// it stopped holding and lingering (its last packets, and its clients'
// answers to its resets, still on their way).
const ForwardGrace = 2 * time.Second

// Forward is a VIP this node forwards other members' connections for.
type Forward struct {
	Since time.Time
	// Targets are the members forwarded to, with their membership
	// addresses; Gone is when each was first seen neither holding nor
	// lingering (zero: it still does).
	Targets map[string]netip.Addr
	Gone    map[string]time.Time
}

// Chain is what the chain's steps know of one VIP at a pass.
type Chain struct {
	Now  time.Time
	Self string
	// LastHolder is the member this node last saw holding the VIP.
	LastHolder string
	// View is every member as this pass sees it, for this VIP.
	View []Peer
	// Held: this node holds the VIP (after this pass's claim or release).
	Held bool
	// CanForward: this node can forward the previous holders' connections
	// ([connections] reset on, an L2 VIP not announced by all, an
	// announcer that forwards); decided once by the agent.
	CanForward bool
	// CanReset: this node can reset a lost holder's clients
	// ([connections] reset on, a VIP not announced by all, the connections
	// backend there); decided once by the agent.
	CanReset bool
}

// ForwardTargets returns the members the VIP's packets of unknown
// connections go to: the last holder while it holds the VIP, and every
// member lingering on it, with their membership addresses; and, apart,
// those left out because their address is not known.
func ForwardTargets(in Chain) (targets map[string]netip.Addr, unknown []Effect) {
	targets = map[string]netip.Addr{}
	for _, m := range in.View {
		if m.Name == in.Self || !m.State.Up() {
			continue
		}
		if !(m.Lingering || (m.Held && m.Name == in.LastHolder)) {
			continue
		}
		if !m.Addr.IsValid() {
			unknown = append(unknown, Effect{Kind: NoAddress, Member: m.Name})
			continue
		}
		targets[m.Name] = m.Addr
	}
	return targets, unknown
}

// StartForward answers, for a node about to claim the VIP that does not
// forward yet (f nil), whom it forwards to before it announces (none: nil), so
// the previous holder lingers instead of closing its connections at
// once. Only members chosen here are ever forwarded to (Forward.Step
// drops them as they end): the node's own connections, accepted from
// now on, are all known to its conntrack, which tells the connections
// it does not know. The agent makes the Forward once the forwarding is
// installed.
func StartForward(f *Forward, in Chain) (targets map[string]netip.Addr, unknown []Effect) {
	if !in.CanForward || f != nil {
		return nil, nil
	}
	targets, unknown = ForwardTargets(in)
	if len(targets) == 0 {
		return nil, unknown
	}
	return targets, unknown
}

// Step moves f on at a pass and returns what the agent does about it: a
// member that is gone is dropped at once (its clients are then taken
// over), one that neither holds nor lingers ForwardGrace after it stopped
// (whatever it still listed is taken over too); a member that lingers and is not
// forwarded to yet is added (its metadata arrived after the claim); and
// the forwarding ends when no member is left, or when this node no longer
// holds the VIP (the agent then drops f). Adding one is safe only while
// the forwarding has run since the claim: every connection of this
// node's is known to its conntrack since then.
func (f *Forward) Step(in Chain) []Effect {
	if !in.Held {
		return []Effect{{Kind: StopForward, Reason: "this node no longer holds the VIP"}}
	}
	var out []Effect
	changed := false
	for _, name := range slices.Sorted(maps.Keys(f.Targets)) {
		m, found := peer(in.View, name)
		dropped, lost := dropTarget(f.Targets, f.Gone, name, in.Now, m, found)
		if !dropped {
			continue
		}
		changed = true
		out = append(out, Effect{Kind: DropTarget, Member: name, Lost: lost})
		if in.CanReset {
			// Whatever it still had on its list (a member that ended well
			// has none left) is reset, as after an unplanned failover.
			out = append(out, Effect{Kind: TakeOver, Member: name})
		}
	}
	targets, unknown := ForwardTargets(in)
	out = append(out, unknown...)
	for _, name := range slices.Sorted(maps.Keys(targets)) {
		m, _ := peer(in.View, name)
		if _, ok := f.Targets[name]; !ok && m.Lingering {
			f.Targets[name] = targets[name]
			changed = true
			out = append(out, Effect{Kind: AddTarget, Member: name})
		}
	}
	switch {
	case len(f.Targets) == 0:
		out = append(out, Effect{Kind: StopForward, Reason: "no member holds or lingers on the VIP any more"})
	case changed:
		out = append(out, Effect{Kind: InstallForward})
	}
	return out
}

// dropTarget is Step's rule for one member name it forwards to (m, found
// in the view), with targets and gone as Forward's: a member that holds or
// lingers stays; one that is gone (dead, left, forgotten) is dropped at
// once (lost); one that neither holds nor lingers is dropped ForwardGrace
// after it was first seen so. It reports whether name was dropped:
// whatever it still listed is then to be reset.
func dropTarget(targets map[string]netip.Addr, gone map[string]time.Time, name string, now time.Time, m Peer, found bool) (dropped, lost bool) {
	switch {
	case !found || m.State == Dead || m.State == Left:
		lost = true
	case m.State.Up() && (m.Held || m.Lingering):
		delete(gone, name)
		return false, false
	case gone[name].IsZero():
		gone[name] = now
		return false, false
	case now.Sub(gone[name]) < ForwardGrace:
		return false, false
	}
	delete(targets, name)
	delete(gone, name)
	return true, lost
}

// Linger is what StepLinger knows of a lingering node's VIP at a pass.
type Linger struct {
	Self string
	View []Peer
	// Finished: the linger's goroutine has ended; Hurried: it was told to
	// close what is left already.
	Finished, Hurried bool
	// Healthy: the VIP is healthy here and its interface is up.
	Healthy bool
	// Ending: this node shuts down or finishes its handoffs for a restart
	// in place.
	Ending bool
}

// StepLinger answers what a lingering node does about its linger at a
// pass (no effect: go on): end it when its goroutine is done, close its
// connections at once when the VIP is unhealthy here, and hurry it at a
// shutdown or a restart (this node's, or the restart in place of the
// holder that forwards: Peer.EndLinger).
func StepLinger(in Linger) []Effect {
	switch {
	case in.Finished:
		return []Effect{{Kind: EndLinger, Reason: "its connections ended"}}
	case !in.Healthy:
		return []Effect{{Kind: AbandonLinger, Reason: "the VIP is not healthy here: connections closed at once"}}
	case (in.Ending || HolderEndsLinger(in.Self, in.View)) && !in.Hurried:
		return []Effect{{Kind: HurryLinger}}
	}
	return nil
}

// HolderEndsLinger reports whether an alive member other than self holds
// the VIP and asks the lingering members to end (Peer.EndLinger).
func HolderEndsLinger(self string, view []Peer) bool {
	for _, m := range view {
		if m.Name != self && m.State.Up() && m.Held && m.EndLinger {
			return true
		}
	}
	return false
}
