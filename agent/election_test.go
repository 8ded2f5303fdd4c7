package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/config"
)

// node builds a member for election tables.
type nodeOpt func(*Member)

func withdrawn(m *Member)  { m.Meta.Withdrawn = true }
func dead(m *Member)       { m.State = StateDead }
func left(m *Member)       { m.State = StateLeft }
func suspect(m *Member)    { m.State = StateSuspect }
func garbage(m *Member)    { m.Meta = NodeMeta{} }
func unhealthy(m *Member)  { setVIP(m, func(v *VIPMeta) { v.Healthy = false }) }
func holds(m *Member)      { setVIP(m, func(v *VIPMeta) { v.Held = true }) }
func restarting(m *Member) { m.Meta.RestartGrace = 30 * time.Second }
func forwards(m *Member)   { setVIP(m, func(v *VIPMeta) { v.Forwarding = true }) }
func setVIP(m *Member, f func(*VIPMeta)) {
	v := m.Meta.VIPs[config.VIPKey("api")]
	f(&v)
	m.Meta.VIPs[config.VIPKey("api")] = v
}

func node(name string, opts ...nodeOpt) Member {
	m := Member{Name: name, State: StateAlive, Meta: NodeMeta{Valid: true, VIPs: map[uint32]VIPMeta{config.VIPKey("api"): {Healthy: true}}}}
	for _, o := range opts {
		o(&m)
	}
	return m
}

// topRanked returns the node the hash prefers for "api" among names.
func topRanked(names ...string) string {
	ranked := slices.Clone(names)
	sortByRank("api", ranked, func(n string) string { return n })
	return ranked[0]
}

// rankedThree returns cp-1, cp-2 and cp-3 in the hash's order for "api".
func rankedThree() (top, second, third string) {
	ranked := []string{"cp-1", "cp-2", "cp-3"}
	sortByRank("api", ranked, func(n string) string { return n })
	return ranked[0], ranked[1], ranked[2]
}

func TestElect(t *testing.T) {
	top, second, third := rankedThree()
	vip := ElectionVIP{Name: "api"}
	tests := []struct {
		name      string
		members   []Member
		vip       ElectionVIP
		owner     string
		reason    string
		bootstrap bool
	}{
		{"fresh cluster: highest ranked wins", []Member{node(top), node(second), node(third)}, vip, top, ReasonRank, false},
		{"owner withdrawn: successor chosen", []Member{node(top, holds, withdrawn), node(second), node(third)}, vip, second, ReasonRank, false},
		{"owner dead", []Member{node(top, holds, dead), node(second), node(third)}, vip, second, ReasonRank, false},
		{"owner left", []Member{node(top, holds, left), node(second), node(third)}, vip, second, ReasonRank, false},
		{"suspect owner keeps the VIP until declared dead", []Member{node(top, holds, suspect), node(second), node(third)}, vip, top, ReasonKeep, false},
		{"owner unhealthy: healthy successor", []Member{node(top, holds, unhealthy), node(second), node(third)}, vip, second, ReasonRank, false},
		{"no preempt: holder keeps it when better node returns", []Member{node(top), node(second, holds), node(third)}, vip, second, ReasonKeep, false},
		{"preempt waits for a holder restarting in place", []Member{node(top), node(second, holds, restarting), node(third)}, ElectionVIP{Name: "api", Preempt: true}, second, ReasonRestarting, false},
		{"a holder restarting in place with its health frozen unhealthy keeps it", []Member{node(top), node(second, holds, restarting, unhealthy), node(third)}, vip, second, ReasonRestarting, false},
		{"a holder restarting in place beside another holder: contested as usual", []Member{node(top), node(second, holds, restarting), node(third, holds)}, vip, second, ReasonContested, false},
		{"a dead holder's stale restart grace does not count", []Member{node(top, holds, restarting, dead), node(second), node(third)}, vip, second, ReasonRank, false},
		{"a restarting node that holds nothing is not waited for", []Member{node(top), node(second, restarting), node(third, holds)}, ElectionVIP{Name: "api", Preempt: true}, top, ReasonRank, false},
		{"preempt: better node takes it back", []Member{node(top), node(second, holds), node(third)}, ElectionVIP{Name: "api", Preempt: true}, top, ReasonRank, false},
		{"two nodes claim: highest ranked holder wins", []Member{node(top), node(second, holds), node(third, holds)}, vip, second, ReasonContested, false},
		{"two nodes claim with preempt: highest ranked wins", []Member{node(top), node(second, holds), node(third, holds)}, ElectionVIP{Name: "api", Preempt: true}, top, ReasonContested, false},
		{"holder that is withdrawn does not count as claim", []Member{node(top, holds, withdrawn), node(second), node(third, holds)}, vip, third, ReasonKeep, false},
		{"all unhealthy at bootstrap: fallback to alive, not withdrawn", []Member{node(top, unhealthy), node(second, unhealthy), node(third, unhealthy)}, vip, top, ReasonBootstrap, true},
		{"all unhealthy and top withdrawn: fallback skips withdrawn", []Member{node(top, unhealthy, withdrawn), node(second, unhealthy), node(third, unhealthy)}, vip, second, ReasonBootstrap, true},
		{"only a withdrawn node is healthy: fallback", []Member{node(top, withdrawn), node(second, unhealthy), node(third, unhealthy)}, vip, second, ReasonBootstrap, true},
		{"one healthy node among unhealthy: it wins, no fallback", []Member{node(top, unhealthy), node(second, unhealthy), node(third)}, vip, third, ReasonRank, false},
		{"garbage metadata is never eligible", []Member{node(top, garbage), node(second), node(third)}, vip, second, ReasonRank, false},
		{"everyone withdrawn: no owner", []Member{node(top, withdrawn), node(second, withdrawn)}, vip, "", ReasonNone, false},
		{"everyone dead but one", []Member{node(top, dead), node(second, dead), node(third)}, vip, third, ReasonRank, false},
		{"no members", nil, vip, "", ReasonNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Elect(tt.members, tt.vip)
			if got.Owner != tt.owner || got.Reason != tt.reason || got.Bootstrap != tt.bootstrap {
				t.Errorf("Elect = %+v, want owner %q reason %q bootstrap %v", got, tt.owner, tt.reason, tt.bootstrap)
			}
		})
	}
}

// TestElectSameViewSameOwner checks that the result does not depend on the
// order in which a node lists its members.
func TestElectSameViewSameOwner(t *testing.T) {
	ms := []Member{node("a"), node("b", holds), node("c", holds), node("d", unhealthy), node("e", withdrawn)}
	want := Elect(ms, ElectionVIP{Name: "api"})
	for i := 0; i < len(ms); i++ {
		rot := append(append([]Member(nil), ms[i:]...), ms[:i]...)
		for j, k := 0, len(rot)-1; j < k; j, k = j+1, k-1 {
			if i%2 == 1 {
				rot[j], rot[k] = rot[k], rot[j]
			}
		}
		got := Elect(rot, ElectionVIP{Name: "api"})
		if got.Owner != want.Owner || got.Reason != want.Reason || got.Bootstrap != want.Bootstrap || !slices.Equal(got.Eligible, want.Eligible) {
			t.Errorf("order %d: %+v, want %+v", i, got, want)
		}
	}
}

// TestRankSpreadsVIPs checks that rendezvous ranking spreads VIPs across
// nodes instead of piling them on one, and that removing a node moves only
// that node's VIPs.
func TestRankSpreadsVIPs(t *testing.T) {
	nodes := []string{"cp-1", "cp-2", "cp-3"}
	owners := map[string]string{}
	count := map[string]int{}
	for i := 0; i < 300; i++ {
		vip := fmt.Sprintf("vip-%d", i)
		var ms []Member
		for _, n := range nodes {
			m := node(n)
			m.Meta.VIPs = map[uint32]VIPMeta{config.VIPKey(vip): {Healthy: true}}
			ms = append(ms, m)
		}
		o := Elect(ms, ElectionVIP{Name: vip}).Owner
		owners[vip] = o
		count[o]++
	}
	for _, n := range nodes {
		if count[n] < 60 {
			t.Errorf("node %s owns %d of 300 VIPs; ranking is lopsided: %v", n, count[n], count)
		}
	}
	moved := 0
	for vip, o := range owners {
		var ms []Member
		for _, n := range nodes[:2] {
			m := node(n)
			m.Meta.VIPs = map[uint32]VIPMeta{config.VIPKey(vip): {Healthy: true}}
			ms = append(ms, m)
		}
		if got := Elect(ms, ElectionVIP{Name: vip}).Owner; got != o {
			moved++
			if o != "cp-3" {
				t.Errorf("%s moved from %s to %s though %s stayed", vip, o, got, o)
			}
		}
	}
	if moved != count["cp-3"] {
		t.Errorf("moved %d VIPs, want cp-3's %d", moved, count["cp-3"])
	}
}

func TestEligible(t *testing.T) {
	ms := []Member{node("a", withdrawn), node("b"), node("c", dead), node("d", unhealthy)}
	got := Eligible(ms, ElectionVIP{Name: "api"})
	if len(got) != 1 || got[0] != "b" {
		t.Errorf("Eligible = %v, want [b]", got)
	}
}

func BenchmarkElect(b *testing.B) {
	for _, n := range []int{3, 16, 64} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var ms []Member
			for i := 0; i < n; i++ {
				m := node(fmt.Sprintf("cp-%d", i))
				if i == n/2 {
					holds(&m)
				}
				ms = append(ms, m)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				Elect(ms, ElectionVIP{Name: "api"})
			}
		})
	}
}

func down(m *Member) { setVIP(m, func(v *VIPMeta) { v.Down = true; v.Healthy = false }) }

func TestElectInterfaceDown(t *testing.T) {
	top := topRanked("cp-1", "cp-2", "cp-3")
	var others []string
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		if n != top {
			others = append(others, n)
		}
	}
	vip := ElectionVIP{Name: "api"}
	// Even when nobody is healthy (bootstrap fallback), a node whose
	// interface is down is never chosen.
	got := Elect([]Member{node(top, down), node(others[0], unhealthy), node(others[1], unhealthy)}, vip)
	if got.Owner == top || got.Owner == "" || !got.Bootstrap {
		t.Errorf("interface down in bootstrap fallback: %+v, want another owner by fallback", got)
	}
	// A holder whose interface went down loses the VIP.
	got = Elect([]Member{node(top, holds, down), node(others[0]), node(others[1])}, vip)
	if got.Owner == top {
		t.Errorf("holder with interface down kept the VIP: %+v", got)
	}
	if got := Elect([]Member{node(top, down)}, vip); got.Owner != "" {
		t.Errorf("only node has its interface down: owner %q, want none", got.Owner)
	}
}

// cordoned: the member's Kubernetes Node withdraws it (cordoned, excluded,
// deleted, shutting down: any reason reads the same to the election).
func cordoned(m *Member) { m.Meta.NodeWithdrawn = true }

// TestElectNodeWithdrawn: a node its Node withdraws hands the VIP on when
// another node can take it, and keeps it (or may take it) when none can:
// the Node never drops the VIP. An operator's withdraw is stronger.
func TestElectNodeWithdrawn(t *testing.T) {
	top, second, third := rankedThree()
	all := []string{"cp-1", "cp-2", "cp-3"}
	vip := ElectionVIP{Name: "api"}
	tests := []struct {
		name      string
		members   []Member
		owner     string
		eligible  []string // in any order
		nodeKept  bool
		bootstrap bool
	}{
		{"owner cordoned: successor",
			[]Member{node(top, holds, cordoned), node(second), node(third)}, second, []string{second, third}, false, false},
		{"owner cordoned, a successor already holds it: it keeps it",
			[]Member{node(top, holds, cordoned), node(second), node(third, holds)}, third, []string{second, third}, false, false},
		{"all cordoned: holder keeps",
			[]Member{node(top, cordoned), node(second, holds, cordoned), node(third, cordoned)}, second, all, true, false},
		{"all cordoned at once, nobody holds yet: no drop, highest ranked",
			[]Member{node(top, cordoned), node(second, cordoned), node(third, cordoned)}, top, all, true, false},
		{"cordoned-healthy vs uncordoned-unhealthy: the healthy cordoned holder keeps",
			[]Member{node(top, unhealthy), node(second, holds, cordoned), node(third, unhealthy)}, second, []string{second}, true, false},
		{"cordoned-healthy vs uncordoned-unhealthy: the healthy cordoned node takes it",
			[]Member{node(top, unhealthy, holds), node(second, cordoned), node(third, unhealthy)}, second, []string{second}, true, false},
		{"cordoned and operator-withdrawn: ineligible even in fallback",
			[]Member{node(top, holds, cordoned, withdrawn), node(second, cordoned, unhealthy), node(third, cordoned, unhealthy)}, second, []string{second, third}, true, true},
		{"cordoned and operator-withdrawn, nobody else: no owner",
			[]Member{node(top, holds, cordoned, withdrawn), node(second, withdrawn)}, "", nil, false, false},
		{"nobody healthy: bootstrap prefers nodes the Node does not withdraw",
			[]Member{node(top, unhealthy, cordoned), node(second, unhealthy), node(third, unhealthy, cordoned)}, second, []string{second}, false, true},
		{"uncordoned owner returns: the holder keeps (no preempt)",
			[]Member{node(top), node(second, holds), node(third, cordoned)}, second, []string{top, second}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Elect(tt.members, vip)
			if got.Owner != tt.owner || got.NodeKept != tt.nodeKept || got.Bootstrap != tt.bootstrap ||
				!slices.Equal(slices.Sorted(slices.Values(got.Eligible)), slices.Sorted(slices.Values(tt.eligible))) {
				t.Errorf("Elect = %+v, want owner %q eligible %v nodeKept %v bootstrap %v", got, tt.owner, tt.eligible, tt.nodeKept, tt.bootstrap)
			}
			if tt.nodeKept && !strings.Contains(got.Reason, ReasonNodeKept) {
				t.Errorf("reason %q does not say the Node's withdraw was overruled", got.Reason)
			}
			for _, m := range tt.members {
				why := got.WhyNot(m, ElectionVIP{Name: "api"})
				if (why == "") != slices.Contains(got.Eligible, m.Name) {
					t.Errorf("%s: WhyNot %q disagrees with Eligible %v", m.Name, why, got.Eligible)
				}
				if m.Meta.NodeWithdrawn && !m.Meta.Withdrawn && why != "" && !got.NodeKept && got.Owner != "" && m.Meta.VIP(config.VIPKey("api")).Healthy && why != "withdrawn by its Node" {
					t.Errorf("%s: WhyNot %q, want withdrawn by its Node", m.Name, why)
				}
			}
		})
	}
}
