package lease

import (
	"slices"
	"testing"
)

// TestMajority: more than half.
func TestMajority(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 16: 9} {
		if got := Majority(n); got != want {
			t.Errorf("Majority(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestCountQuorum: the base, the counts and the verdict; the agent's
// TestQuorum covers how it maps membership onto these lists.
func TestCountQuorum(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name               string
		known, alive, dead []string
		heard              []string
		require            *bool
		want               Quorum
	}{
		{"alone", nil, nil, nil, nil, nil, Quorum{OK: true, Alive: 1, Known: 1, Base: []string{"a"}}},
		{"two of four: no majority", []string{"b", "c", "d"}, []string{"b"}, []string{"c", "d"}, nil, nil,
			Quorum{Required: true, Alive: 2, Known: 4, Base: []string{"a", "b", "c", "d"}}},
		{"three of four", []string{"b", "c", "d"}, []string{"b", "c"}, []string{"d"}, nil, nil,
			Quorum{OK: true, Required: true, Alive: 3, Known: 4, Base: []string{"a", "b", "c", "d"}}},
		{"dead but heard counts alive", []string{"b", "c"}, nil, []string{"c", "b"}, []string{"c", "b"}, nil,
			Quorum{OK: true, Required: true, Alive: 3, Known: 3, Base: []string{"a", "b", "c"}, HeardOnly: []string{"b", "c"}}},
		{"heard, not dead (left, or a stranger): not counted", []string{"b", "c"}, nil, nil, []string{"b", "x"}, nil,
			Quorum{Required: true, Alive: 1, Known: 3, Base: []string{"a", "b", "c"}}},
		{"members alive or dead are known even if the caller left them out", nil, []string{"b"}, []string{"c"}, nil, nil,
			Quorum{OK: true, Required: true, Alive: 2, Known: 3, Base: []string{"a", "b", "c"}}},
		{"required by configuration with two", []string{"b"}, nil, []string{"b"}, nil, &yes,
			Quorum{Required: true, Alive: 1, Known: 2, Base: []string{"a", "b"}}},
		{"not required by configuration with three", []string{"b", "c"}, nil, nil, nil, &no,
			Quorum{OK: true, Alive: 1, Known: 3, Base: []string{"a", "b", "c"}}},
	}
	for _, tt := range tests {
		got := CountQuorum("a", tt.known, tt.alive, tt.dead, tt.heard, tt.require)
		if got.OK != tt.want.OK || got.Required != tt.want.Required || got.Alive != tt.want.Alive || got.Known != tt.want.Known ||
			!slices.Equal(got.Base, tt.want.Base) || !slices.Equal(got.HeardOnly, tt.want.HeardOnly) {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
