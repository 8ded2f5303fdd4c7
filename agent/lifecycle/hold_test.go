package lifecycle

import (
	"testing"
	"time"
)

// TestPreemptWaiting: the preempt delay runs from the moment the node can
// carry the VIP, on the injected clock; it restarts when the node could
// not carry it for a moment; a holder and a node without a delay never
// wait.
func TestPreemptWaiting(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	delay := 30 * time.Second
	var since time.Time
	step := func(ready bool, at time.Duration, held bool, want bool) {
		t.Helper()
		now := t0.Add(at)
		since = PreemptReady(since, ready, now)
		if got := PreemptWaiting(since, now, delay, held); got != want {
			t.Errorf("at %s (ready %v, held %v): waiting %v, want %v", at, ready, held, got, want)
		}
	}
	step(false, 0, false, false)              // cannot carry it: not eligible, nothing to wait for
	step(true, time.Second, false, true)      // became ready: the delay starts
	step(true, 30*time.Second, false, true)   // 29s in
	step(true, 31*time.Second, false, false)  // over
	step(false, 32*time.Second, false, false) // unhealthy a moment
	step(true, 33*time.Second, false, true)   // starts again
	step(true, 40*time.Second, true, false)   // a holder does not wait
	if PreemptWaiting(t0, t0, 0, false) {
		t.Error("waiting without a delay")
	}
}

// TestNextBackoff: a failed announce waits a second, then twice as long
// after each failure, up to 30 s.
func TestNextBackoff(t *testing.T) {
	var b time.Duration
	var got []time.Duration
	for range 7 {
		b = NextBackoff(b)
		got = append(got, b)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoffs %v, want %v", got, want)
		}
	}
}

// TestConfirmAdoption: an adopted VIP is confirmed only at a pass that
// keeps it, with a lease that is live: not before any evidence, not
// while the lease still adopts the previous process's, not fenced.
func TestConfirmAdoption(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	if !ConfirmAdoption(Keep, true, false, t0) {
		t.Error("kept with a live lease: not confirmed")
	}
	for name, c := range map[string]struct {
		do                Action
		canHold, adopting bool
		evidence          time.Time
	}{
		"handed off":     {Handoff, true, false, t0},
		"released":       {Release, true, false, t0},
		"fenced":         {Keep, false, false, t0},
		"still adopting": {Keep, true, true, t0},
		"no evidence":    {Keep, true, false, time.Time{}},
	} {
		if ConfirmAdoption(c.do, c.canHold, c.adopting, c.evidence) {
			t.Errorf("%s: confirmed", name)
		}
	}
}

// TestHandoffUnderway: a holder handing off or draining, a lingering
// node and a forwarding one are in a handoff; a holder at rest and a node
// that started a handoff but no longer holds are not.
func TestHandoffUnderway(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var zero time.Time
	for _, c := range []struct {
		name                        string
		held, lingering, forwarding bool
		handoff, drain              time.Time
		want                        bool
	}{
		{"at rest", true, false, false, zero, zero, false},
		{"handing off", true, false, false, t0, zero, true},
		{"draining", true, false, false, zero, t0, true},
		{"lingering", false, true, false, zero, zero, true},
		{"forwarding", true, false, true, zero, zero, true},
		{"released mid-handoff", false, false, false, t0, t0, false},
	} {
		if got := HandoffUnderway(c.held, c.lingering, c.forwarding, c.handoff, c.drain); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
