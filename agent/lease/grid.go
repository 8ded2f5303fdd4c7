package lease

import "time"

// Grid lines up the agent's periodic timers (lease rounds, health checks,
// the loop's idle pass) on multiples of their periods from one base, so
// timers due at the same moment fire in one wake-up of the process. An
// idle agent's CPU is almost all wake-ups (each costs a few hundred
// microseconds of context switching on a virtual machine, the work itself
// a few microseconds), so a lease round every 100 ms and a health check
// every 300 ms cost one wake-up at each 300 ms, not two.
//
// The lease's rounds beat on it, and the other timers join that beat: a
// health check every 300 ms falls on every third round of 100 ms.
type Grid struct {
	// Base is the grid's origin: the process's start.
	Base time.Time
}

// After returns the first point of the grid of period p strictly after t:
// the next beat of a timer that last fired at t, never more than one
// period after it (for t before the base: the base). A period of zero or
// less returns t; the zero grid returns t+p.
func (g Grid) After(t time.Time, p time.Duration) time.Time {
	if p <= 0 {
		return t
	}
	if g.Base.IsZero() {
		return t.Add(p) // no grid: one period after t
	}
	d := t.Sub(g.Base)
	if d < 0 {
		return g.Base
	}
	return g.Base.Add((d/p + 1) * p)
}
