package lifecycle

import "time"

// The smaller rules of holding a VIP: the backoff after a failed
// announce, the preempt delay, the end of an adoption after a restart in
// place, and whether a planned handoff is under way.

// Announce retries back off from AnnounceRetryMin, doubling up to
// AnnounceRetryMax.
const (
	AnnounceRetryMin = time.Second
	AnnounceRetryMax = 30 * time.Second
)

// NextBackoff is the wait before the next announce after one that failed,
// prev the wait before it (zero: none failed since the last success).
func NextBackoff(prev time.Duration) time.Duration {
	return min(max(2*prev, AnnounceRetryMin), AnnounceRetryMax)
}

// PreemptReady is when a node that can carry a VIP now (ready) became
// able to, given since, the last answer (zero: it could not).
func PreemptReady(since time.Time, ready bool, now time.Time) time.Time {
	switch {
	case !ready:
		return time.Time{}
	case since.IsZero():
		return now
	}
	return since
}

// PreemptWaiting reports whether a node that became able to carry a VIP
// at since (zero: it cannot) still waits out the preempt delay before it
// may take the VIP from a holder. A holder does not wait, nor does a node
// that cannot carry the VIP (it is not eligible anyway), nor any without
// a delay.
func PreemptWaiting(since, now time.Time, delay time.Duration, held bool) bool {
	return delay > 0 && !held && !since.IsZero() && now.Sub(since) < delay
}

// ConfirmAdoption reports whether a VIP this process adopted from the
// previous one (a restart in place), and still holds, is its own now: this
// pass kept it (do) and this process's lease is live: it may hold
// (canHold), no longer rests on the previous process's evidence
// (adopting) and has evidence of its own (a majority acked its
// heartbeats, or quorum is not required). Its address is then made
// forever again. The arguments are agent/lease's State.CanHold, Adopting
// and Evidence.
func ConfirmAdoption(do Action, canHold, adopting bool, evidence time.Time) bool {
	return do == Keep && canHold && !adopting && !evidence.IsZero()
}

// HandoffUnderway reports whether this node is in the middle of a planned
// handoff of a VIP, as its old holder (handing it off, draining:
// handoffStarted, drainStarted; lingering) or its new one (forwarding the
// old holder's connections): a restart in place waits for it to end.
func HandoffUnderway(held, lingering, forwarding bool, handoffStarted, drainStarted time.Time) bool {
	return lingering || forwarding || (held && (!handoffStarted.IsZero() || !drainStarted.IsZero()))
}
