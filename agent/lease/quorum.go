package lease

import "sort"

// Majority is how many of n known members make a majority.
func Majority(n int) int { return n/2 + 1 }

// Quorum is whether this node sees a majority of the known members.
type Quorum struct {
	// OK: a majority is alive, or quorum is not required.
	OK bool
	// Required: quorum is required (cluster.require_quorum, by default
	// with 3 or more known members); the fence applies.
	Required bool
	// Alive and Known count the members alive and known, this node
	// included.
	Alive, Known int
	// Base is the quorum base: the known members' names, sorted, this
	// node's included (Runner.SetBase takes it).
	Base []string
	// HeardOnly are the members counted alive only because the lease heard
	// them (membership says dead), sorted.
	HeardOnly []string
}

// CountQuorum counts the quorum of this node (self).
//
// known are the other members this node knows: every member membership
// shows, in any state, and every cached peer, including members that died
// or left gracefully. As with etcd, a stopped member stays in the base
// until it is removed for good (vipctl forget on every node): with 2 of 3
// alive there is quorum, with 1 of 3 there is none, so two survivors split
// by a partition cannot both hold a VIP. A new member (a control-plane node
// joining) enters the base when it joins.
//
// alive are the members membership says are alive or suspect, and dead
// those it says are dead; heard are the members the lease heard a moment
// ago (Runner.RecentlyHeard), which count as alive when membership says
// dead. Membership can declare a live member dead for a moment: a node back
// from a partition gossips the deaths it concluded while cut off, every
// node that knew the member at that incarnation believes it until the
// member refutes it, a few milliseconds later. A holder that counted only
// membership lost quorum for those milliseconds and released, and with
// nobody holding the VIP it went to the highest ranked node, the one just
// back: a second outage and a move with preempt off. A heartbeat just
// received is direct evidence; gossip is hearsay. heard overrides only
// dead: a member that left said so itself (its last heartbeats may still
// be recent), and names membership does not show do not count.
//
// require is cluster.require_quorum (nil: required once 3 or more members
// are known).
func CountQuorum(self string, known, alive, dead, heard []string, require *bool) Quorum {
	knownSet := map[string]bool{self: true}
	for _, n := range known {
		knownSet[n] = true
	}
	aliveSet := map[string]bool{self: true}
	for _, n := range alive {
		knownSet[n], aliveSet[n] = true, true
	}
	deadSet := map[string]bool{}
	for _, n := range dead {
		knownSet[n], deadSet[n] = true, true
	}
	var heardOnly []string
	for _, n := range heard {
		if deadSet[n] && !aliveSet[n] {
			aliveSet[n] = true
			heardOnly = append(heardOnly, n)
		}
	}
	sort.Strings(heardOnly)
	q := Quorum{Known: len(knownSet), Alive: len(aliveSet), HeardOnly: heardOnly}
	for n := range knownSet {
		q.Base = append(q.Base, n)
	}
	sort.Strings(q.Base)
	q.Required = q.Known >= 3
	if require != nil {
		q.Required = *require
	}
	q.OK = !q.Required || q.Alive >= Majority(q.Known)
	return q
}
