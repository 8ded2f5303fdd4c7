package agent

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

func TestCheckClockShiftsTimers(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), vips: map[string]*vipState{
		"api": {eligibleSince: base.Add(-500 * time.Millisecond), release: base.Add(-time.Second)},
	}}
	w := &withdrawWaiter{deadline: base.Add(30 * time.Second)}
	a.waiters = []*withdrawWaiter{w}
	a.checkClock(base)
	// An ordinary pass moves nothing.
	a.checkClock(base.Add(400 * time.Millisecond))
	if v := a.vips["api"]; !v.eligibleSince.Equal(base.Add(-500 * time.Millisecond)) {
		t.Fatalf("ordinary pass shifted timers: %v", v.eligibleSince)
	}
	// The clock steps an hour back: every instant moves with it, so the
	// elapsed times stay what they were.
	back := base.Add(400*time.Millisecond - time.Hour)
	a.checkClock(back)
	v := a.vips["api"]
	if got := back.Sub(v.eligibleSince); got != 900*time.Millisecond {
		t.Errorf("after a backward step, eligible for %v, want 900ms", got)
	}
	if got := back.Sub(v.release); got != 1400*time.Millisecond {
		t.Errorf("after a backward step, handing off for %v, want 1.4s", got)
	}
	if got := w.deadline.Sub(back); got != 29600*time.Millisecond {
		t.Errorf("after a backward step, waiter deadline in %v, want 29.6s", got)
	}
	// And two hours forward.
	fwd := back.Add(2 * time.Hour)
	a.checkClock(fwd)
	if got := fwd.Sub(v.eligibleSince); got != 900*time.Millisecond {
		t.Errorf("after a forward step, eligible for %v, want 900ms", got)
	}
}
