package lease

import (
	"testing"
	"time"
)

// TestFence: the fence state machine, step by step, as the agent's loop
// drives it: each step (a pass) observes the lease's state, then sets what
// the node wants to drive.
func TestFence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	release := FastTimers().Release
	off := State{timers: FastTimers()}
	held := State{timers: FastTimers(), required: true, canHold: true}
	expired := State{timers: FastTimers(), required: true}
	type step struct {
		at      time.Duration // after t0
		want    bool          // the node wants to drive (holds, or a decision wants the fence)
		st      State
		holding bool
		fenced  bool // Fenced after the step
		changed bool // Observe reported a change
		driving bool // Driving after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"quorum not required: never fenced", []step{
			{want: true, st: off, holding: true, driving: true},
			{at: time.Hour, want: true, st: off, holding: true, driving: true},
		}},
		{"a holder with evidence stays unfenced", []step{
			{want: true, st: held, holding: true, driving: true},
			{at: time.Second, want: true, st: held, holding: true, driving: true},
		}},
		{"a holder without evidence: fenced at once", []step{
			{want: true, st: held, holding: true, driving: true},
			{at: time.Millisecond, want: true, st: expired, holding: true, fenced: true, changed: true, driving: true},
		}},
		{"about to claim: Release for the first answers, then fenced", []step{
			{want: true, st: expired, driving: true},
			{at: release - time.Millisecond, want: true, st: expired, driving: true},
			{at: release, want: true, st: expired, fenced: true, changed: true, driving: true},
		}},
		{"not driving, no evidence: not fenced (nothing to fence)", []step{
			{st: expired},
			{at: time.Hour, st: expired},
		}},
		{"fenced stays fenced, and keeps driving, until the evidence returns", []step{
			{want: true, st: held, holding: true, driving: true},
			{at: time.Millisecond, want: true, st: expired, holding: true, fenced: true, changed: true, driving: true},
			{at: 2 * time.Millisecond, st: expired, fenced: true, driving: true},
			{at: time.Hour, st: expired, fenced: true, driving: true},
			{at: time.Hour + time.Millisecond, st: held, changed: true},
			{at: time.Hour + 2*time.Millisecond, st: held},
		}},
		{"fence no longer required: lifted", []step{
			{want: true, st: held, holding: true, driving: true},
			{at: time.Millisecond, want: true, st: expired, holding: true, fenced: true, changed: true, driving: true},
			{at: 2 * time.Millisecond, want: true, st: off, holding: true, changed: true, driving: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Fence
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				changed := f.Observe(s.st, s.holding, now)
				f.SetDriving(s.want, now)
				if f.Fenced() != s.fenced || changed != s.changed || f.Driving() != s.driving {
					t.Fatalf("step %d (at %v): fenced %v changed %v driving %v; want %v %v %v",
						i, s.at, f.Fenced(), changed, f.Driving(), s.fenced, s.changed, s.driving)
				}
			}
		})
	}
}
