package lease

import "time"

// Timers are the lease's timers. The safety argument (doc.go) needs
// Claim > Release by more than the clock rates' drift over Claim, the
// holder's reaction and a packet's travel; Release > Interval, so a holder
// has a round's answers before its evidence expires.
type Timers struct {
	// Interval between a driver's rounds; the alarm beats at half of it.
	Interval time.Duration
	// Retry: how long a driver waits for the asked member's answer before
	// asking all.
	Retry time.Duration
	// Release: a holder without majority evidence for this long releases.
	Release time.Duration
	// Claim: an expected member not heard from for this long gets this
	// node's vote.
	Claim time.Duration
	// Fresh: a peer's votes count while its last heartbeat is this recent.
	Fresh time.Duration
}

// FastTimers are the timers of failure_detection = "fast": an owner
// heartbeats every 100 ms, releases after 300 ms without a majority's
// answer, and its peers take it for gone after 400 ms.
func FastTimers() Timers {
	return Timers{Interval: 100 * time.Millisecond, Retry: 25 * time.Millisecond, Release: 300 * time.Millisecond,
		Claim: 400 * time.Millisecond, Fresh: 150 * time.Millisecond}
}

// LANTimers are the timers of failure_detection = "lan", for loaded hosts
// and lossy links: 250 ms, 1.2 s and 1.6 s.
func LANTimers() Timers {
	return Timers{Interval: 250 * time.Millisecond, Retry: 60 * time.Millisecond, Release: 1200 * time.Millisecond,
		Claim: 1600 * time.Millisecond, Fresh: 500 * time.Millisecond}
}
