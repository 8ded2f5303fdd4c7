package lifecycle

import "net/netip"

// State is a member's liveness in this node's view (membership's, with
// the lease's verdicts applied).
type State int

// Member states.
const (
	Alive State = iota
	Suspect
	Dead
	Left
)

// Up reports whether a member in state s is alive for the view: alive or
// suspect.
func (s State) Up() bool { return s == Alive || s == Suspect }

// Peer is one member as a VIP's lifecycle sees it: its liveness and what
// it says about this VIP.
type Peer struct {
	Name  string
	State State
	// Held: it reports holding the VIP; Forwarding: it holds it and passes
	// the previous holders' connections on to them; Lingering: it handed
	// the VIP off and serves its connections through the holder's
	// forwarding; EndLinger: it holds the VIP and asks the lingering
	// members to end (it is about to restart in place).
	Held, Forwarding, Lingering, EndLinger bool
	// Departing: it hands its VIPs over on purpose (withdrawn by the
	// operator or its Node, or leaving): it closes its connections itself.
	Departing bool
	// Addr is its membership address (not valid: not known).
	Addr netip.Addr
}

// Election is what the election answered for the VIP over the view.
type Election struct {
	Owner  string // "" when no node is eligible
	Reason string
	// Bootstrap: eligibility fell back to alive and not withdrawn.
	Bootstrap bool
	// Eligible lists the members that may own the VIP, in election order.
	Eligible []string
}

// peer returns the member named name in peers.
func peer(peers []Peer, name string) (Peer, bool) {
	for _, p := range peers {
		if p.Name == name {
			return p, true
		}
	}
	return Peer{}, false
}
