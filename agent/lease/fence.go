package lease

import "time"

// Fence is the state machine of this node's fence, as the agent's loop
// keeps it: whether this node drives lease rounds (it holds a VIP or is
// about to claim one) and whether it is fenced (it drove rounds and has had
// no majority evidence for Release: it holds nothing and tells the others
// it cannot carry the VIPs). It does no I/O; the loop logs and publishes
// its changes. The zero Fence drives nothing and is not fenced.
//
// Once fenced, a node stays fenced, and keeps driving rounds so that the
// answers that end it can come, until a majority hears it again. Were it to
// unfence as soon as it released, it would elect itself again (to itself
// it is still the best node), drive, fence and so on, and its metadata
// would flicker between fenced and not: the others, who may still hear it
// (only its incoming traffic lost), would never see it fenced long enough
// to take over.
type Fence struct {
	fenced       bool
	driving      bool
	drivingSince time.Time
}

// Fenced reports whether this node is fenced.
func (f *Fence) Fenced() bool { return f.fenced }

// Driving reports whether this node drives lease rounds (Runner.SetBase
// takes it).
func (f *Fence) Driving() bool { return f.driving }

// SetDriving records whether this node wants to drive rounds now (it holds
// a VIP or a decision wants the fence, to claim one); a fenced node drives
// whatever it wants. It reports whether driving changed.
func (f *Fence) SetDriving(want bool, now time.Time) (changed bool) {
	on := want || f.fenced
	if on == f.driving {
		return false
	}
	f.driving, f.drivingSince = on, now
	return true
}

// Observe takes the lease's state at the start of a pass and whether this
// node holds any VIP, and reports whether the fence changed (Fenced says
// to what):
//   - lifted when the fence is valid, or does not apply;
//   - raised for a holder without evidence, at once: a holder never holds
//     without it;
//   - raised for a node driving rounds to claim, without evidence after
//     Release: its first answers (a millisecond on a LAN) never came;
//   - kept otherwise: fenced stays fenced until the evidence returns.
func (f *Fence) Observe(st State, holding bool, now time.Time) (changed bool) {
	was := f.fenced
	switch {
	case !st.required || st.canHold:
		f.fenced = false
	case f.fenced:
	case f.driving && holding:
		f.fenced = true
	case f.driving && now.Sub(f.drivingSince) >= st.timers.Release:
		f.fenced = true
	}
	return f.fenced != was
}
