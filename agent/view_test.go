package agent

import (
	"slices"
	"testing"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/agent/lifecycle"
)

// TestViewMemberStaleHeld: a member whose published holdings are stale
// for the lease (heard again after it was taken for gone, metadata from
// before: lease.TestStateView) holds nothing in the election, healthy and
// alive as it says; its own metadata is not changed. Gone for the lease, it
// is dead; without a verdict, believed.
func TestViewMemberStaleHeld(t *testing.T) {
	held := NodeMeta{Valid: true, VIPs: map[uint32]VIPMeta{7: {Healthy: true, Held: true}}}
	m := memberInfo{Name: "c", State: StateAlive, Meta: held}

	v := applyVerdict(m, lease.Verdict{StaleHolds: true})
	if v.State != StateAlive || v.Meta.VIP(7).Held || !v.Meta.VIP(7).Healthy {
		t.Errorf("stale holdings: %+v, want alive, healthy, not holding", v)
	}
	if !m.Meta.VIP(7).Held {
		t.Error("applyVerdict changed the member's own metadata")
	}
	if v := applyVerdict(m, lease.Verdict{}); v.State != StateAlive || !v.Meta.VIP(7).Held {
		t.Errorf("no verdict: %+v, want alive and holding", v)
	}
	if v := applyVerdict(m, lease.Verdict{Dead: true, StaleHolds: true}); v.State != StateDead {
		t.Errorf("gone: %+v, want dead", v)
	}
	// viewMember asks the lease with membership's view: no evidence, no
	// change.
	if v := viewMember(m, lease.State{}); v.State != StateAlive || !v.Meta.VIP(7).Held {
		t.Errorf("viewMember without evidence: %+v, want alive and holding", v)
	}
}

// TestViewMemberDeadByGossipButHeard: a holder that membership says is dead
// (a healed node's stale gossip) while the lease heard it a moment ago
// (lease.TestStateView: Verdict.Alive) stays alive for the election,
// holding, and keeps the VIP; without the verdict it is dead and another
// node is elected.
func TestViewMemberDeadByGossipButHeard(t *testing.T) {
	k := config.VIPKey("apiserver")
	held := NodeMeta{Valid: true, VIPs: map[uint32]VIPMeta{k: {Healthy: true, Held: true}}}
	m := memberInfo{Name: "c", State: StateDead, Meta: held}

	v := applyVerdict(m, lease.Verdict{Alive: true})
	if v.State != StateSuspect || !v.Meta.VIP(k).Held {
		t.Errorf("dead by gossip, heard: %+v, want suspect and holding", v)
	}
	// a and b are eligible; c holds: the election keeps c, and a sees the
	// VIP held elsewhere.
	healthy := NodeMeta{Valid: true, VIPs: map[uint32]VIPMeta{k: {Healthy: true}}}
	view := []Member{v, {Name: "a", State: StateAlive, Meta: healthy}, {Name: "b", State: StateAlive, Meta: healthy}}
	if r := Elect(view, ElectionVIP{Name: "apiserver"}); r.Owner != "c" {
		t.Errorf("dead by gossip, heard: elected %q (%s), want c, the holder", r.Owner, r.Reason)
	}
	if !lifecycle.HeldElsewhere("a", peersOf(view, "apiserver", nil)) {
		t.Error("dead by gossip, heard: a sees no holder, want c")
	}
	if r := Elect([]Member{viewMember(m, lease.State{}), view[1], view[2]}, ElectionVIP{Name: "apiserver"}); r.Owner == "c" {
		t.Errorf("dead, not heard: elected c (%s), want another", r.Reason)
	}
	if v := viewMember(m, lease.State{}); v.State != StateDead {
		t.Errorf("dead, not heard: %+v, want dead", v)
	}
}

// TestQuorum: how membership and the peer cache make the quorum count
// (lease.CountQuorum counts).
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
			ok, required, alive, known := q.OK, q.Required, q.Alive, q.Known
			if ok != tt.ok || required != tt.required || alive != tt.alive || known != tt.known {
				t.Errorf("hasQuorum = ok %v required %v alive %d known %d; want %v %v %d %d", ok, required, alive, known, tt.ok, tt.required, tt.alive, tt.known)
			}
			if want := tt.heardOnly; !slices.Equal(q.HeardOnly, want) {
				t.Errorf("hasQuorum: heardOnly %v, want %v", q.HeardOnly, want)
			}
		})
	}
}
