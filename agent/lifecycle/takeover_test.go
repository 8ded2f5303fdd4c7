package lifecycle

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func TestTakeoverStep(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		now      time.Time
		held     bool
		canReset bool
		view     []Peer
		want     []Effect
	}{
		{"previous holder still holds (handoff overlap)", t0, true, true, []Peer{{Name: "b", Held: true}}, nil},
		{"previous holder cut off, fence not expired: alive and holding for the view", t0, true, true, []Peer{{Name: "b", State: Suspect, Held: true}}, nil},
		{"previous holder lingers on its connections", t0, true, true, []Peer{{Name: "b", Lingering: true}}, nil},
		{"previous holder released", t0, true, true, []Peer{{Name: "b"}}, []Effect{{Kind: ResetClients, Member: "b", Lost: true}}},
		{"previous holder withdrawn and released", t0, true, true, []Peer{{Name: "b", Departing: true}}, []Effect{{Kind: ResetClients, Member: "b"}}},
		{"previous holder's fence expired: dead for the view", t0, true, true, []Peer{{Name: "b", State: Dead, Held: true}}, []Effect{{Kind: ResetClients, Member: "b", Lost: true}}},
		{"previous holder left", t0, true, true, []Peer{{Name: "b", State: Left, Held: true, Departing: true}}, []Effect{{Kind: ResetClients, Member: "b"}}},
		{"previous holder forgotten", t0, true, true, nil, []Effect{{Kind: ResetClients, Member: "b", Lost: true}}},
		{"this node lost the VIP meanwhile", t0, false, true, []Peer{{Name: "b"}},
			[]Effect{{Kind: ForgetClients, Member: "b", Reason: "no longer holding the VIP, or it did not release it in time"}}},
		{"previous holder held on past the horizon", t0.Add(TakeoverHorizon + time.Second), true, true, []Peer{{Name: "b", Held: true}},
			[]Effect{{Kind: ForgetClients, Member: "b", Reason: "no longer holding the VIP, or it did not release it in time"}}},
		{"reset turned off by a reload", t0, true, false, []Peer{{Name: "b"}},
			[]Effect{{Kind: ForgetClients, Member: "b", Reason: "[connections] reset is off"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := TakeoverStep(tc.now, "b", t0, tc.held, tc.canReset, tc.view); !slices.Equal(got, tc.want) {
				t.Fatalf("TakeoverStep = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLastHolder(t *testing.T) {
	cases := []struct {
		name string
		view []Peer
		want string
	}{
		{"nobody else holds", []Peer{{Name: "a", Held: true}, {Name: "b"}}, ""},
		{"an alive holder", []Peer{{Name: "a"}, {Name: "b", Held: true}}, "b"},
		{"a dead holder", []Peer{{Name: "a"}, {Name: "b", State: Dead, Held: true}}, "b"},
		{"an alive holder before a dead one", []Peer{{Name: "a"}, {Name: "b", State: Dead, Held: true}, {Name: "c", Held: true}}, "c"},
	}
	for _, tc := range cases {
		if got := LastHolder("a", tc.view); got != tc.want {
			t.Errorf("%s: LastHolder = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestNoteHolders(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	seen := NoteHolders(nil, "a", []Peer{{Name: "a", Held: true}, {Name: "b", Held: true}, {Name: "c", State: Dead, Held: true}, {Name: "d"}}, t0)
	if want := map[string]time.Time{"b": t0, "c": t0}; !maps.Equal(seen, want) {
		t.Fatalf("an alive holder and a dead one: seen %v, want %v", seen, want)
	}
	// c is no longer reported holding: it is kept for TakeoverHorizon.
	t1 := t0.Add(TakeoverHorizon)
	seen = NoteHolders(seen, "a", []Peer{{Name: "b", Held: true}}, t1)
	if want := map[string]time.Time{"b": t1, "c": t0}; !maps.Equal(seen, want) {
		t.Fatalf("within the horizon: seen %v, want %v", seen, want)
	}
	seen = NoteHolders(seen, "a", []Peer{{Name: "b", Held: true}}, t1.Add(time.Second))
	if want := map[string]time.Time{"b": t1.Add(time.Second)}; !maps.Equal(seen, want) {
		t.Fatalf("past the horizon: seen %v, want %v", seen, want)
	}
}

// TestStartTakeovers: at a claim, every other member seen holding the VIP
// lately, in name order; none when this node cannot reset clients.
func TestStartTakeovers(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	seen := map[string]time.Time{"c": t0, "a": t0, "b": t0}
	if got := StartTakeovers("a", seen, true); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("StartTakeovers = %v, want [b c]", got)
	}
	if got := StartTakeovers("a", seen, false); got != nil {
		t.Errorf("StartTakeovers without reset = %v, want none", got)
	}
}
