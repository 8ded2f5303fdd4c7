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
			{0, true, off, true, false, false, true},
			{time.Hour, true, off, true, false, false, true},
		}},
		{"a holder with evidence stays unfenced", []step{
			{0, true, held, true, false, false, true},
			{time.Second, true, held, true, false, false, true},
		}},
		{"a holder without evidence: fenced at once", []step{
			{0, true, held, true, false, false, true},
			{time.Millisecond, true, expired, true, true, true, true},
		}},
		{"about to claim: Release for the first answers, then fenced", []step{
			{0, true, expired, false, false, false, true},
			{release - time.Millisecond, true, expired, false, false, false, true},
			{release, true, expired, false, true, true, true},
		}},
		{"not driving, no evidence: not fenced (nothing to fence)", []step{
			{0, false, expired, false, false, false, false},
			{time.Hour, false, expired, false, false, false, false},
		}},
		{"fenced stays fenced, and keeps driving, until the evidence returns", []step{
			{0, true, held, true, false, false, true},
			{time.Millisecond, true, expired, true, true, true, true},
			{2 * time.Millisecond, false, expired, false, true, false, true},
			{time.Hour, false, expired, false, true, false, true},
			{time.Hour + time.Millisecond, false, held, false, false, true, false},
			{time.Hour + 2*time.Millisecond, false, held, false, false, false, false},
		}},
		{"fence no longer required: lifted", []step{
			{0, true, held, true, false, false, true},
			{time.Millisecond, true, expired, true, true, true, true},
			{2 * time.Millisecond, true, off, true, false, true, true},
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
