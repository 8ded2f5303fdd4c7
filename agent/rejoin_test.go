package agent

import (
	"slices"
	"strings"
	"testing"
)

func TestRejoinTargets(t *testing.T) {
	cached := []CachedPeer{{"cp-1", "192.0.2.11:7946"}, {"cp-2", "192.0.2.12:7946"}, {"cp-3", "192.0.2.13:7946"}}
	tests := []struct {
		name       string
		configured []string
		members    []memberInfo
		want       string
	}{
		{"all alive: nothing to join", nil, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateAlive},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, ""},
		{"dead peer is rejoined at its cached address", nil, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateDead},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, "192.0.2.12:7946"},
		{"cut off node: every cached peer", nil, nil, "192.0.2.12:7946,192.0.2.13:7946"},
		{"suspect counts as alive", nil, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateSuspect},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, ""},
		{"configured peer not yet seen", []string{"192.0.2.14:7946", "192.0.2.12:7946"}, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateAlive},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, "192.0.2.14:7946"},
		{"left peer in cache is still tried", nil, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateLeft},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, "192.0.2.12:7946"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(rejoinTargets("cp-1", cached, tt.configured, tt.members), ",")
			if got != tt.want {
				t.Errorf("rejoinTargets = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNextPeerCache(t *testing.T) {
	cached := []CachedPeer{{"cp-2", "192.0.2.12:7946"}, {"cp-4", "192.0.2.14:7946"}}
	members := []memberInfo{
		{Name: "cp-1", Address: "192.0.2.11:7946", State: StateAlive}, // self
		{Name: "cp-2", Address: "192.0.2.22:7946", State: StateAlive}, // moved
		{Name: "cp-3", Address: "192.0.2.13:7946", State: StateDead},  // dead: keep
		{Name: "cp-4", Address: "192.0.2.14:7946", State: StateLeft},  // left: keep (quorum base)
	}
	got := nextPeerCache("cp-1", cached, members)
	want := []CachedPeer{{"cp-2", "192.0.2.22:7946"}, {"cp-3", "192.0.2.13:7946"}, {"cp-4", "192.0.2.14:7946"}}
	if !slices.Equal(got, want) {
		t.Errorf("nextPeerCache = %v, want %v", got, want)
	}
}

func TestQuorum(t *testing.T) {
	yes, no := true, false
	cache3 := []CachedPeer{{"b", ""}, {"c", ""}}
	alive := func(names ...string) []memberInfo {
		var out []memberInfo
		for _, n := range names {
			out = append(out, memberInfo{Name: n, State: StateAlive})
		}
		return out
	}
	tests := []struct {
		name         string
		cache        []CachedPeer
		members      []memberInfo
		heard        []string
		require      *bool
		ok, required bool
		alive, known int
		heardOnly    []string
	}{
		{"single node bootstrap: not required", nil, nil, nil, nil, true, false, 1, 1, nil},
		{"two known: not required by default", []CachedPeer{{"b", ""}}, nil, nil, nil, true, false, 1, 2, nil},
		{"three known, all alive", cache3, alive("b", "c"), nil, nil, true, true, 3, 3, nil},
		{"three known, one other alive: majority", cache3, alive("b"), nil, nil, true, true, 2, 3, nil},
		{"isolated of three: no quorum", cache3, nil, nil, nil, false, true, 1, 3, nil},
		{"isolated but quorum disabled", cache3, nil, nil, &no, true, false, 1, 3, nil},
		{"two known, required explicitly, isolated", []CachedPeer{{"b", ""}}, nil, nil, &yes, false, true, 1, 2, nil},
		{"dead members still count as known", nil, []memberInfo{{Name: "b", State: StateAlive}, {Name: "c", State: StateDead}, {Name: "d", State: StateDead}}, nil, nil, false, true, 2, 4, nil},
		{"left members stay known (etcd-like): 2 of 3 is quorum", nil, []memberInfo{{Name: "b", State: StateAlive}, {Name: "c", State: StateLeft}}, nil, nil, true, true, 2, 3, nil},
		{"a left member and a partition: 1 of 3 is no quorum", nil, []memberInfo{{Name: "b", State: StateDead}, {Name: "c", State: StateLeft}}, nil, nil, false, true, 1, 3, nil},
		// A node back from a partition gossiped that b died: membership
		// believes it until b refutes it, but b's heartbeat just arrived.
		{"dead by gossip but heard by the lease: alive", cache3, []memberInfo{{Name: "b", State: StateDead}, {Name: "c", State: StateDead}}, []string{"b"}, nil, true, true, 2, 3, []string{"b"}},
		{"heard but not known: a stranger does not count", cache3, []memberInfo{{Name: "b", State: StateDead}, {Name: "c", State: StateDead}}, []string{"x", "y"}, nil, false, true, 1, 3, nil},
		{"left but heard a moment ago: it said it left", cache3, []memberInfo{{Name: "b", State: StateAlive}, {Name: "c", State: StateLeft}}, []string{"b", "c"}, nil, true, true, 2, 3, nil},
		{"cached only, heard: not a member yet", cache3, nil, []string{"b", "c"}, nil, false, true, 1, 3, nil},
		{"heard and alive count once", cache3, alive("b"), []string{"b"}, nil, true, true, 2, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := hasQuorum("a", tt.cache, tt.members, tt.heard, tt.require)
			ok, required, alive, known := q.ok, q.required, q.alive, q.known
			if ok != tt.ok || required != tt.required || alive != tt.alive || known != tt.known {
				t.Errorf("hasQuorum = ok %v required %v alive %d known %d; want %v %v %d %d", ok, required, alive, known, tt.ok, tt.required, tt.alive, tt.known)
			}
			if want := tt.heardOnly; !slices.Equal(q.heardOnly, want) {
				t.Errorf("hasQuorum: heardOnly %v, want %v", q.heardOnly, want)
			}
		})
	}
}
