package lease

import (
	"time"
)

// A manual Runner is driven by its caller instead of its own goroutine and
// timer: a deterministic simulator (the agent's cluster simulator) runs
// many nodes' lease code in one thread on simulated clocks. It runs the
// same code as Run: Fire is one tick of the alarm, Refused what a probe
// that found the port closed records, RestartRound one round of
// AnnounceRestart.

// ManualAlarm is an Alarm that only records when it should fire: the
// caller reads Due and calls Runner.Fire then. Wait and Close are never
// called on it (the manual Runner has no Run).
type ManualAlarm struct {
	now   func() time.Time
	at    time.Time
	armed bool
}

// Set arms it to fire d from now (at once for d <= 0).
func (a *ManualAlarm) Set(d time.Duration) { a.at, a.armed = a.now().Add(max(d, 0)), true }

// Stop disarms it.
func (a *ManualAlarm) Stop() { a.armed = false }

// Wait reports false: a manual alarm is not waited on.
func (a *ManualAlarm) Wait() bool { return false }

// Close does nothing.
func (a *ManualAlarm) Close() {}

// Due returns when the alarm fires (on the Runner's clock), and false
// when it is not armed.
func (a *ManualAlarm) Due() (time.Time, bool) { return a.at, a.armed }

// NewManualRunner returns a Runner with the given epoch whose alarm is a
// ManualAlarm on c.Now, and the alarm. Its caller calls Fire when the
// alarm is due, and never Run.
func NewManualRunner(c Config, epoch uint64) (*Runner, *ManualAlarm) {
	r := NewRunner(c)
	r.alarm.Close() // its timer is never used
	r.tr.epoch = epoch
	a := &ManualAlarm{now: r.now}
	r.alarm = a
	return r, a
}

// Fire is one tick of the runner, as Run does when its alarm fires: the
// heartbeats due are sent (Config.Send) and the loop woken if the state
// changed. It returns the silent members Run would probe; the caller
// reports each probe's end with ProbeDone.
func (r *Runner) Fire() (probe []string) {
	if a, ok := r.alarm.(*ManualAlarm); ok {
		a.armed = false // a one-shot alarm that fired is disarmed
	}
	return r.fire()
}

// ProbeDone ends a probe of name that Fire asked for: refused is whether
// its membership port refused the connection (its vipd is gone).
func (r *Runner) ProbeDone(name string, refused bool) {
	if refused {
		r.noteRefused(name)
	}
	r.mu.Lock()
	delete(r.probing, name)
	r.mu.Unlock()
}

// RestartRound is one round of AnnounceRestart (which repeats it every
// 20 ms): it returns the members of want that have not yet answered a
// heartbeat saying this node restarts in place; first is the state the
// rounds share (0 before the first).
func (r *Runner) RestartRound(grace time.Duration, want []string, first *uint64) (missing []string) {
	return r.restartRound(grace, want, first)
}
