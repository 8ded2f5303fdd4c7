package lease

import (
	"testing"
	"time"
)

// TestStateView: how the lease's evidence changes membership's view of a
// member, case by case.
func TestStateView(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := time.Second
	tests := []struct {
		name string
		st   State
		m    Member
		want Verdict
	}{
		{"no evidence: membership stands", State{}, Member{Name: "c", Alive: true, Since: at(0), MetaSince: at(0)}, Verdict{}},
		{"gone, nothing changed since: dead",
			State{expired: map[string]time.Time{"c": at(6 * s)}, lastGone: map[string]time.Time{"c": at(6 * s)}},
			Member{Name: "c", Alive: true, Since: at(5 * s), MetaSince: at(0)}, Verdict{Dead: true, StaleHolds: true}},
		{"gone, but membership saw it change since (a restart): alive",
			State{expired: map[string]time.Time{"c": at(6 * s)}, lastGone: map[string]time.Time{"c": at(6 * s)}},
			Member{Name: "c", Alive: true, Since: at(7 * s), MetaSince: at(7 * s)}, Verdict{}},
		{"heard again, metadata from before it was gone: holds nothing",
			State{lastGone: map[string]time.Time{"c": at(s)}},
			Member{Name: "c", Alive: true, Since: at(5 * s), MetaSince: at(0)}, Verdict{StaleHolds: true}},
		{"heard again, metadata from after it was gone: believed",
			State{lastGone: map[string]time.Time{"c": at(s)}},
			Member{Name: "c", Alive: true, Since: at(5 * s), MetaSince: at(2 * s)}, Verdict{}},
		{"dead by gossip, heard a moment ago: alive",
			State{heard: map[string]bool{"c": true}},
			Member{Name: "c", Dead: true, Since: at(0), MetaSince: at(0)}, Verdict{Alive: true}},
		{"dead by gossip, not heard: dead",
			State{heard: map[string]bool{"b": true}},
			Member{Name: "c", Dead: true, Since: at(0), MetaSince: at(0)}, Verdict{}},
		{"dead by membership, a driver the lease has not taken for gone: alive",
			State{drivers: map[string]bool{"c": true}},
			Member{Name: "c", Dead: true, Since: at(0), MetaSince: at(0)}, Verdict{Alive: true}},
		{"dead by membership, a driver gone for the lease: dead",
			State{drivers: map[string]bool{"c": true}, expired: map[string]time.Time{"c": at(s)}},
			Member{Name: "c", Dead: true, Since: at(0), MetaSince: at(0)}, Verdict{}},
		{"left, a driver: it said so itself",
			State{drivers: map[string]bool{"c": true}},
			Member{Name: "c", Since: at(0), MetaSince: at(0)}, Verdict{}},
		{"left, heard a moment ago: it said so itself",
			State{heard: map[string]bool{"c": true}},
			Member{Name: "c", Since: at(0), MetaSince: at(0)}, Verdict{}},
		{"dead, heard, but gone for the lease: the heartbeat is older than the evidence",
			State{heard: map[string]bool{"c": true}, expired: map[string]time.Time{"c": at(s)}},
			Member{Name: "c", Dead: true, Since: at(0), MetaSince: at(0)}, Verdict{}},
	}
	for _, tt := range tests {
		if got := tt.st.View(tt.m); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestStateGoneSince: the members gone now and not before, sorted.
func TestStateGoneSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := State{expired: map[string]time.Time{"b": t0}}
	now := State{expired: map[string]time.Time{"b": t0, "d": t0, "c": t0}}
	if got := now.GoneSince(prev); len(got) != 2 || got[0] != "c" || got[1] != "d" {
		t.Errorf("GoneSince = %v, want [c d]", got)
	}
	if got := prev.GoneSince(now); len(got) != 0 {
		t.Errorf("nobody newly gone: %v", got)
	}
}

// TestStateRestartsSince: the members whose restart grace began and ended
// between two states, sorted.
func TestStateRestartsSince(t *testing.T) {
	prev := State{restarting: map[string]bool{"b": true, "c": true}}
	now := State{restarting: map[string]bool{"c": true, "e": true, "d": true}}
	began, ended := now.RestartsSince(prev)
	if len(began) != 2 || began[0] != "d" || began[1] != "e" || len(ended) != 1 || ended[0] != "b" {
		t.Errorf("RestartsSince = %v, %v; want [d e], [b]", began, ended)
	}
}
