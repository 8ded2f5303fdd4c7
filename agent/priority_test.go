package agent

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/config"
)

// Options of election-table members for priorities and groups.
func aware(m *Member) { m.Meta.PriorityAware = true }
func waits(m *Member) { setVIP(m, func(v *VIPMeta) { v.Waiting = true }) }
func prio(p uint8) nodeOpt {
	return func(m *Member) { setVIP(m, func(v *VIPMeta) { v.Priority = p }) }
}

// TestElectPriorities: priorities order the eligible nodes before rank
// when every member is priority-aware; preempt and the preempt delay
// decide whether a holder keeps the VIP; a member that does not know
// priorities (a rolling upgrade) makes every node elect by rank.
func TestElectPriorities(t *testing.T) {
	top, second, third := rankedThree()
	keep := ElectionVIP{Name: "api"}
	preempt := ElectionVIP{Name: "api", Preempt: true}
	tests := []struct {
		name    string
		members []Member
		vip     ElectionVIP
		owner   string
		reason  string
		order   []string
	}{
		{"priority beats rank", []Member{node(top, aware), node(second, aware, prio(150)), node(third, aware)}, keep,
			second, ReasonPriority, []string{second, top, third}},
		{"equal priorities go by rank", []Member{node(top, aware, prio(150)), node(second, aware, prio(150)), node(third, aware, prio(150))}, keep,
			top, ReasonRank, []string{top, second, third}},
		{"priority written as the default is the default", []Member{node(top, aware), node(second, aware, prio(100)), node(third, aware)}, keep,
			top, ReasonRank, []string{top, second, third}},
		{"lower priority than the default", []Member{node(top, aware, prio(50)), node(second, aware), node(third, aware)}, keep,
			second, ReasonRank, []string{second, third, top}},
		{"higher priority but unhealthy: not eligible", []Member{node(top, aware), node(second, aware, prio(150), unhealthy), node(third, aware)}, keep,
			top, ReasonRank, []string{top, third}},
		{"no preempt: holder keeps it when a higher priority node returns", []Member{node(top, aware, holds), node(second, aware, prio(150)), node(third, aware)}, keep,
			top, ReasonKeep, []string{second, top, third}},
		{"preempt: higher priority node takes it", []Member{node(top, aware, holds), node(second, aware, prio(150)), node(third, aware)}, preempt,
			second, ReasonPriority, []string{second, top, third}},
		{"preempt: higher priority node waits out its delay: holder keeps", []Member{node(top, aware, holds), node(second, aware, prio(150), waits), node(third, aware)}, preempt,
			top, ReasonWaiting, []string{second, top, third}},
		{"preempt: the first waits, the next above the holder does not: it takes it",
			[]Member{node(top, aware, prio(200), waits), node(second, aware, prio(150)), node(third, aware, holds)}, preempt,
			second, ReasonWaiting, []string{top, second, third}},
		{"preempt delay does not hold off a claim nobody contests", []Member{node(top, aware), node(second, aware, prio(150), waits), node(third, aware)}, preempt,
			second, ReasonPriority, []string{second, top, third}},
		{"two holders without preempt: the higher priority holder wins", []Member{node(top, aware, holds), node(second, aware), node(third, aware, prio(150), holds)}, keep,
			third, ReasonContested, []string{third, top, second}},
		{"a member without priorities: every node elects by rank", []Member{node(top, aware), node(second, aware, prio(150)), node(third)}, keep,
			top, ReasonRank, []string{top, second, third}},
		{"a member without priorities: preempt ignores the delay, as it does", []Member{node(top, aware), node(second, aware, holds), node(third, waits)}, preempt,
			top, ReasonRank, []string{top, second, third}},
		{"a dead member without priorities does not hold them off", []Member{node(top, aware), node(second, aware, prio(150)), node(third, dead)}, keep,
			second, ReasonPriority, []string{second, top}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Elect(tt.members, tt.vip)
			if got.Owner != tt.owner || got.Reason != tt.reason || !slices.Equal(got.Eligible, tt.order) {
				t.Errorf("Elect = owner %q reason %q order %v, want %q %q %v", got.Owner, got.Reason, got.Eligible, tt.owner, tt.reason, tt.order)
			}
		})
	}
}

// groupPair returns two VIP names whose rendezvous owners among cp-1, cp-2
// and cp-3 differ when each is elected alone, so a test that they share
// one owner shows the grouping, not chance.
func groupPair(t *testing.T) (v4, v6 string) {
	t.Helper()
	first := func(vip string) string {
		ranked := []string{"cp-1", "cp-2", "cp-3"}
		sortByRank(vip, ranked, func(n string) string { return n })
		return ranked[0]
	}
	for i := range 50 {
		v4, v6 = fmt.Sprintf("api-v4-%d", i), fmt.Sprintf("api-v6-%d", i)
		if first(v4) != first(v6) {
			return v4, v6
		}
	}
	t.Fatal("no VIP pair with different owners")
	return
}

// groupNode is a member healthy for both VIPs of a group.
func groupNode(name string, vips []string, opts ...func(map[uint32]VIPMeta)) Member {
	m := Member{Name: name, State: StateAlive, Meta: NodeMeta{Valid: true, PriorityAware: true, VIPs: map[uint32]VIPMeta{}}}
	for _, v := range vips {
		m.Meta.VIPs[config.VIPKey(v)] = VIPMeta{Healthy: true}
	}
	for _, o := range opts {
		o(m.Meta.VIPs)
	}
	return m
}

// TestElectGroup: the VIPs of a group have one owner; a node that cannot
// carry one of them is eligible for none, so the whole group moves; a
// node holding one of them holds the group; while a member does not know
// groups, each VIP is elected alone.
func TestElectGroup(t *testing.T) {
	v4, v6 := groupPair(t)
	vips := []string{v4, v6}
	ev := func(name string, preempt bool) ElectionVIP {
		return ElectionVIP{Name: name, Preempt: preempt, Group: "api", Members: vips}
	}
	set := func(vip string, f func(*VIPMeta)) func(map[uint32]VIPMeta) {
		return func(m map[uint32]VIPMeta) { v := m[config.VIPKey(vip)]; f(&v); m[config.VIPKey(vip)] = v }
	}
	holdsBoth := func(m map[uint32]VIPMeta) {
		for _, v := range vips {
			set(v, func(vm *VIPMeta) { vm.Held = true })(m)
		}
	}
	sick6 := set(v6, func(vm *VIPMeta) { vm.Healthy = false })
	down4 := set(v4, func(vm *VIPMeta) { vm.Down = true })
	holds4 := set(v4, func(vm *VIPMeta) { vm.Held = true })

	ranked := []string{"cp-1", "cp-2", "cp-3"}
	sortByRank("group\x00api", ranked, func(n string) string { return n })
	g1, g2, g3 := ranked[0], ranked[1], ranked[2]

	tests := []struct {
		name    string
		members []Member
		preempt bool
		owner   string
	}{
		{"fresh cluster: one owner, the group's first by rank", []Member{groupNode(g1, vips), groupNode(g2, vips), groupNode(g3, vips)}, false, g1},
		{"holder unhealthy for the IPv6 VIP: both move", []Member{groupNode(g1, vips, holdsBoth, sick6), groupNode(g2, vips), groupNode(g3, vips)}, false, g2},
		{"holder's interface down for the IPv4 VIP: both move", []Member{groupNode(g1, vips, holdsBoth, down4), groupNode(g2, vips), groupNode(g3, vips)}, false, g2},
		{"a node holding one VIP of the group holds the group", []Member{groupNode(g1, vips), groupNode(g2, vips), groupNode(g3, vips, holds4)}, false, g3},
		{"preempt: the group goes back to its first", []Member{groupNode(g1, vips), groupNode(g2, vips), groupNode(g3, vips, holdsBoth)}, true, g1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, vip := range vips {
				if got := Elect(tt.members, ev(vip, tt.preempt)); got.Owner != tt.owner {
					t.Errorf("%s: owner %q (%s), want %q", vip, got.Owner, got.Reason, tt.owner)
				}
			}
			if res := Elect(tt.members, ev(v4, tt.preempt)); !slices.Equal(res.Eligible, Elect(tt.members, ev(v6, tt.preempt)).Eligible) {
				t.Errorf("the group's VIPs have different eligible lists")
			}
		})
	}
	t.Run("unhealthy member says which VIP", func(t *testing.T) {
		ms := []Member{groupNode(g1, vips, sick6), groupNode(g2, vips)}
		res := Elect(ms, ev(v4, false))
		if why := res.WhyNot(ms[0], ev(v4, false)); why != "unhealthy" {
			t.Errorf("WhyNot for the group's IPv4 VIP = %q, want unhealthy (its IPv6 VIP fails)", why)
		}
	})
	t.Run("a member without groups: each VIP alone", func(t *testing.T) {
		old := groupNode("cp-3", vips)
		old.Meta.PriorityAware = false
		ms := []Member{groupNode("cp-1", vips), groupNode("cp-2", vips), old}
		a, b := Elect(ms, ev(v4, false)).Owner, Elect(ms, ev(v6, false)).Owner
		if a == b {
			t.Errorf("mixed versions: both VIPs to %s; want each elected alone as the previous release does (owners differ for this pair)", a)
		}
		if want := Elect(ms, ElectionVIP{Name: v4}).Owner; a != want {
			t.Errorf("mixed versions: %s to %s, the previous release elects %s", v4, a, want)
		}
	})
}

// electGolden holds, for each of goldenViews(2000), the owner and reason
// that Elect of the release before priorities gave (the commit before
// this file, running goldenViews and printing the lines the test
// prints). Priorities must not move any of them.
const electGolden = "testdata/elect-before-priorities.txt"

// goldenViews generates n views of 1-5 members with every combination of
// liveness, health, withdraws, holds and interface states, seeded.
func goldenViews(n int) (views [][]Member, vips []ElectionVIP) {
	r := rand.New(rand.NewPCG(36, 1))
	for range n {
		var ms []Member
		for j := range 1 + r.IntN(5) {
			m := Member{Name: fmt.Sprintf("cp-%d", j+1), State: MemberState(r.IntN(4)), Meta: NodeMeta{Valid: r.IntN(20) != 0, VIPs: map[uint32]VIPMeta{}}}
			if r.IntN(3) != 0 {
				m.State = StateAlive
			}
			m.Meta.Withdrawn = r.IntN(8) == 0
			m.Meta.NodeWithdrawn = r.IntN(6) == 0
			m.Meta.Leaving = r.IntN(15) == 0
			m.Meta.Fenced = r.IntN(15) == 0
			m.Meta.VIPs[config.VIPKey("api")] = VIPMeta{Healthy: r.IntN(4) != 0, Held: r.IntN(3) == 0, Down: r.IntN(12) == 0}
			ms = append(ms, m)
		}
		views = append(views, ms)
		vips = append(vips, ElectionVIP{Name: "api", Preempt: r.IntN(2) == 0})
	}
	return views, vips
}

// TestElectWithoutPrioritiesAsBefore: with no priority written (every
// node at the default), no preempt delay and no group, this release elects
// exactly the owner the previous one did, for 2000 generated views, both
// when every member is priority-aware (all upgraded) and when none is.
func TestElectWithoutPrioritiesAsBefore(t *testing.T) {
	views, vips := goldenViews(2000)
	want, err := os.ReadFile(electGolden)
	if err != nil {
		t.Fatal(err)
	}
	for _, awareAll := range []bool{false, true} {
		var b bytes.Buffer
		for i, ms := range views {
			ms = slices.Clone(ms)
			for j := range ms {
				ms[j].Meta.PriorityAware = awareAll
			}
			res := Elect(ms, vips[i])
			fmt.Fprintf(&b, "%d %s %s\n", i, orNone(res.Owner), res.Reason)
		}
		got, wantLines := strings.Split(b.String(), "\n"), strings.Split(string(want), "\n")
		bad := 0
		for i := range wantLines {
			if i >= len(got) || got[i] != wantLines[i] {
				if bad++; bad <= 5 {
					t.Errorf("aware=%v: got %q, before priorities %q", awareAll, got[min(i, len(got)-1)], wantLines[i])
				}
			}
		}
		if bad > 0 {
			t.Errorf("aware=%v: %d of %d elections differ from the release before priorities", awareAll, bad, len(views))
		}
	}
}

// TestMetaPriority: a priority other than the default is written as
// version 3 (6-byte entries) and read back; the previous release's reader
// (version 2 and later: the first 5 bytes of each entry) reads the rest
// unchanged; without priorities the bytes are version 1's, as before.
func TestMetaPriority(t *testing.T) {
	k := config.VIPKey("api")
	in := NodeMeta{Valid: true, PriorityAware: true, VIPs: map[uint32]VIPMeta{k: {Healthy: true, Held: true, Priority: 150, Waiting: true}, 7: {Priority: 20}}}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 3 || b[3] != 6 {
		t.Fatalf("encoded %x, want version 3 with 6-byte entries", b)
	}
	out, err := DecodeMeta(b)
	if err != nil || out.VIP(k) != in.VIP(k) || out.VIP(7).Priority != 20 || !out.PriorityAware {
		t.Errorf("round trip %+v -> %+v, %v", in, out, err)
	}
	// What a release without priorities reads: the known bits of the
	// first 5 bytes of each entry.
	old := bytes.Clone(b)
	old[1] &^= metaFlagPriorityAware
	for p := 4; p+6 <= len(old); p += 6 {
		old[p+4] &^= vipFlagWaiting
		old[p+5] = 0xee // later field: ignored
	}
	old[0] = 2
	o, err := DecodeMeta(old)
	if err != nil || o.VIP(k) != (VIPMeta{Healthy: true, Held: true}) || o.PriorityAware {
		t.Errorf("the previous release reads %+v, %v; want healthy and held", o, err)
	}

	plain := NodeMeta{Valid: true, PriorityAware: true, VIPs: map[uint32]VIPMeta{k: {Healthy: true}}}
	b, _ = plain.Encode()
	if want := []byte{1, metaFlagPriorityAware, byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k), vipFlagHealthy}; !bytes.Equal(b, want) {
		t.Errorf("without priorities encoded %x, want version 1 %x", b, want)
	}
	full := NodeMeta{Valid: true, PriorityAware: true, RestartGrace: time.Second, VIPs: map[uint32]VIPMeta{}}
	for i := range config.MaxVIPsWithPriority {
		full.VIPs[uint32(i)] = VIPMeta{Healthy: true, Held: true, Priority: 200}
	}
	if b, err := full.Encode(); err != nil || len(b) > 512 {
		t.Errorf("%d VIPs with priorities while restarting: %d bytes, %v", config.MaxVIPsWithPriority, len(b), err)
	}
}

// TestPriorityWarning: status warns, naming them, when members of a
// release without priorities hold configured priorities off, and says
// nothing when priorities count or none is configured anywhere.
func TestPriorityWarning(t *testing.T) {
	cfg := func(extra string) *config.Config {
		c, err := config.Parse("w.toml", []byte("[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n"+extra))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	mixed := []Member{node("cp-1", aware), node("cp-2"), node("cp-3", dead)}
	for _, tc := range []struct {
		name string
		view []Member
		cfg  *config.Config
		want string
	}{
		{"priority here, cp-2 old", mixed, cfg("priority = 150\n"), "not in effect: cp-2 runs a release without them"},
		{"group here, cp-2 old", mixed, cfg("group = \"g\"\n"), "not in effect: cp-2 runs"},
		{"a peer publishes a priority, cp-2 old", []Member{node("cp-1", aware, prio(150)), node("cp-2")}, cfg(""), "not in effect: cp-2 runs"},
		{"none configured anywhere", mixed, cfg(""), ""},
		{"every member aware", []Member{node("cp-1", aware), node("cp-2", aware)}, cfg("priority = 150\n"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := priorityWarning(tc.view, tc.cfg)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("warning %q, want %q", got, tc.want)
			}
		})
	}
}

// TestElectGroupOfOne: a group of one VIP elects as the VIP alone (its own
// rank), so writing a group on a lone VIP moves nothing.
func TestElectGroupOfOne(t *testing.T) {
	top, second, third := rankedThree()
	ms := []Member{node(third, aware), node(second, aware), node(top, aware)}
	if got := Elect(ms, ElectionVIP{Name: "api", Group: "g", Members: []string{"api"}}).Owner; got != top {
		t.Errorf("group of one: owner %s, want %s (the VIP's own rank)", got, top)
	}
}
