package agent

import (
	"hash/fnv"
	"sort"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/membership"
)

// MemberState is a member's liveness as membership sees it.
type MemberState = membership.State

// Member states.
const (
	StateAlive   = membership.Alive
	StateSuspect = membership.Suspect
	StateDead    = membership.Dead
	StateLeft    = membership.Left
)

// Member is one node as the election sees it: its liveness and what it
// announces about itself in its metadata.
type Member struct {
	Name  string
	State MemberState
	Meta  NodeMeta
}

// ElectionVIP is what the election needs to know of a VIP.
type ElectionVIP struct {
	Name    string
	Preempt bool
	// Group is the VIP's group (vip.group; "" for none) and Members the
	// names of the group's VIPs, Name among them: they are elected as one
	// while every member is priority-aware.
	Group   string
	Members []string
}

// keys are the metadata keys of the VIPs elected as one, and the name
// their rank is hashed from: the group's when grouped. A group of one VIP
// is the VIP alone, so writing a group on a lone VIP moves nothing.
func (v ElectionVIP) keys(grouped bool) (rankName string, keys []uint32) {
	if !grouped || v.Group == "" || len(v.Members) < 2 {
		return v.Name, []uint32{config.VIPKey(v.Name)}
	}
	for _, n := range v.Members {
		keys = append(keys, config.VIPKey(n))
	}
	// A group's rank differs from a VIP's of the same name.
	return "group\x00" + v.Group, keys
}

// Election reasons, as they appear in logs and events.
const (
	ReasonKeep      = "current holder stays owner"
	ReasonRank      = "highest ranked eligible node"
	ReasonContested = "several nodes hold it; highest ranked holder wins"
	ReasonBootstrap = "no node is healthy; bootstrap fallback to alive, not withdrawn nodes"
	ReasonNodeKept  = "every eligible node is withdrawn by its Node; kept eligible so the VIP stays"
	ReasonNone      = "no eligible node"
	// ReasonPriority: the owner's priority is above every other eligible
	// node's.
	ReasonPriority = "highest priority eligible node"
	// ReasonWaiting: a node that ranks above the holder waits out its
	// preempt delay.
	ReasonWaiting = "a better node waits out its preempt delay; the holder keeps it"
	// ReasonRestarting: the only holder restarts in place; it stays owner
	// until it is back or its grace runs out (restartingHolder).
	ReasonRestarting = "the holder restarts in place; it keeps the VIP until it is back"
)

// Result is the outcome of an election.
type Result struct {
	Owner     string // "" when no node is eligible
	Reason    string
	Bootstrap bool // eligibility fell back to alive + not withdrawn
	// NodeKept: eligibility fell back to nodes their Node withdraws (every
	// other node is unhealthy or withdrawn): the VIP stays rather than
	// going nowhere.
	NodeKept bool
	// Eligible lists the members that may own the VIP, in election order:
	// by priority, then rank.
	Eligible []string
	// Priorities: every member is priority-aware, so priorities, preempt
	// delays and groups count. When false (a member runs a release that
	// does not know them) every node elects by rank alone, as that
	// release does.
	Priorities bool

	// tier is the rule Eligible was chosen by.
	tier tier
}

// tier is one rung of eligibility: whether a member must be healthy, and
// whether a member its Node withdraws may be eligible.
type tier struct{ health, nodeWithdrawn bool }

// tiers are tried in order; the first with an eligible member decides.
var tiers = [...]tier{
	{health: true},                      // healthy, and the Node agrees
	{health: true, nodeWithdrawn: true}, // every healthy node is withdrawn by its Node: they stay eligible
	{},                                  // bootstrap: nobody is healthy
	{nodeWithdrawn: true},               // bootstrap, and every node is withdrawn by its Node
}

// Elect returns the owner of vip given the members. It is a pure function:
// every node that sees the same members computes the same owner.
//
// A member may be eligible when it is usable: alive (or suspect: not yet
// declared dead), not withdrawn by the operator, able to carry the VIP (its
// interface is up, it is not fenced or leaving). The eligible members are
// the first non-empty of, in order:
//
//  1. the usable members that are healthy for the VIP and that their
//     Kubernetes Node does not withdraw;
//  2. the usable, healthy ones (every healthy node is withdrawn by its
//     Node, as when every node is cordoned: the VIP stays);
//  3. the usable ones that their Node does not withdraw (cluster
//     bootstrap: the apiserver is up nowhere yet);
//  4. the usable ones.
//
// The eligible members are ordered by priority (highest first), then by
// rank. Without preemption a member that already holds the VIP keeps it
// (no second interruption when a better node returns); when several
// eligible members hold it (after a partition heals), the first of them in
// that order wins. With preemption the first eligible member wins, except
// that one waiting out its preempt delay does not take the VIP from a
// holder: the first member that holds it or does not wait wins. Rank is
// rendezvous hashing of (VIP, node name), which spreads VIPs over nodes
// and moves only the VIPs of a node that goes.
//
// Priorities, preempt delays and groups count only when every alive (or
// suspect) member whose metadata decoded says it is priority-aware: while
// a release that does not know them runs anywhere (a rolling upgrade),
// every node elects as it does, by rank alone, each VIP on its own, and
// all still name the same owner. Without priorities written (every node
// at the default) and no preempt delay, the order is the rank order and
// the owner is the one elected before priorities existed.
//
// A group's VIPs (vip.Members) are elected as one: a member is eligible
// when it is for every VIP of the group (under the same tier), it holds
// the group when it holds any of them, its priority is its first VIP's
// (the configuration makes them equal), and the rank is the group's.
func Elect(members []Member, vip ElectionVIP) Result {
	aware := priorityAware(members)
	rankName, keys := vip.keys(aware)
	var eligible []Member
	var rule tier
	for _, t := range tiers {
		rule = t
		for _, m := range members {
			if whyNotAll(m, keys, t) == "" {
				eligible = append(eligible, m)
			}
		}
		if len(eligible) > 0 {
			break
		}
	}
	if len(eligible) == 0 {
		return Result{Reason: ReasonNone, tier: tiers[0], Priorities: aware}
	}
	sortByRank(rankName, eligible, func(m Member) string { return m.Name })
	if aware {
		// Stable: equal priorities keep their rank order.
		sort.SliceStable(eligible, func(i, j int) bool { return priority(eligible[i], keys) > priority(eligible[j], keys) })
	}
	names := make([]string, len(eligible))
	for i, m := range eligible {
		names[i] = m.Name
	}
	res := Result{Owner: eligible[0].Name, Reason: ReasonRank, Bootstrap: !rule.health, NodeKept: rule.nodeWithdrawn, Eligible: names,
		Priorities: aware, tier: rule}
	if aware && len(eligible) > 1 && priority(eligible[0], keys) > priority(eligible[1], keys) {
		res.Reason = ReasonPriority
	}
	if res.Bootstrap {
		res.Reason = ReasonBootstrap
	}
	var holders []string
	for _, m := range eligible {
		if holdsAny(m, keys) {
			holders = append(holders, m.Name)
		}
	}
	rh := restartingHolder(members, keys)
	switch {
	case len(holders) > 1:
		res.Owner = holders[0]
		if vip.Preempt {
			res.Owner = preemptor(eligible, keys, aware)
		}
		res.Reason = ReasonContested
	case len(holders) == 1 && !vip.Preempt:
		res.Owner = holders[0]
		res.Reason = ReasonKeep
	case rh != "" && (len(holders) == 0 || holders[0] == rh):
		res.Owner = rh
		res.Reason = ReasonRestarting
	case len(holders) == 1:
		if res.Owner = preemptor(eligible, keys, aware); res.Owner != eligible[0].Name {
			res.Reason = ReasonWaiting
		}
	}
	if res.Bootstrap && res.Reason != ReasonBootstrap {
		res.Reason += "; " + ReasonBootstrap
	}
	if res.NodeKept {
		res.Reason += "; " + ReasonNodeKept
	}
	return res
}

// restartingHolder returns the member that holds the VIP and said in its
// metadata that it restarts in place, if it is the only member holding
// it ("" otherwise). Its process is gone and its address stays on its host
// for the restart (with a lifetime shorter than its grace), and its
// metadata is frozen: health, withdraw and the rest as they were when it
// stopped. It stays the owner, whatever preempt and that frozen metadata
// say, until it is back (its new process publishes afresh) or its grace
// runs out (the lease then lets membership's verdict stand): another node
// claiming meanwhile would answer for the VIP beside it.
func restartingHolder(members []Member, keys []uint32) string {
	found := ""
	for _, m := range members {
		if !m.State.Usable() || !m.Meta.Valid || !holdsAny(m, keys) {
			continue
		}
		if found != "" || m.Meta.RestartGrace <= 0 {
			return ""
		}
		found = m.Name
	}
	return found
}

// preemptor is the owner of a held VIP with preemption: the first
// eligible member that holds it or, when priorities count, does not wait
// out a preempt delay.
func preemptor(eligible []Member, keys []uint32, aware bool) string {
	for _, m := range eligible {
		if !aware || holdsAny(m, keys) || !waiting(m, keys) {
			return m.Name
		}
	}
	return eligible[0].Name // not reached: a holder is eligible
}

// priorityAware reports whether every alive (or suspect) member whose
// metadata decoded elects by priority.
func priorityAware(members []Member) bool {
	for _, m := range members {
		if m.State.Usable() && m.Meta.Valid && !m.Meta.PriorityAware {
			return false
		}
	}
	return true
}

// priority is m's priority for the VIPs keys: its first one's.
func priority(m Member, keys []uint32) int { return m.Meta.VIP(keys[0]).priority() }

// holdsAny reports whether m holds any of the VIPs keys.
func holdsAny(m Member, keys []uint32) bool {
	for _, k := range keys {
		if m.Meta.VIP(k).Held {
			return true
		}
	}
	return false
}

// waiting reports whether m waits out its preempt delay for any of keys.
func waiting(m Member, keys []uint32) bool {
	for _, k := range keys {
		if m.Meta.VIP(k).Waiting {
			return true
		}
	}
	return false
}

// whyNotAll is whyNot for the first of keys m may not own, "" when it may
// own them all.
func whyNotAll(m Member, keys []uint32, t tier) string {
	for _, k := range keys {
		if w := whyNot(m, k, t); w != "" {
			return w
		}
	}
	return ""
}

// Eligible lists the members that may own vip, in rank order, by the same
// rules as Elect.
func Eligible(members []Member, vip ElectionVIP) []string {
	return Elect(members, vip).Eligible
}

// WhyNot says why m is not eligible for vip under the rule r was elected
// by ("" when it is): for a group, for the first of its VIPs m cannot
// carry.
func (r Result) WhyNot(m Member, vip ElectionVIP) string {
	_, keys := vip.keys(r.Priorities)
	return whyNotAll(m, keys, r.tier)
}

// whyNot says why m may not own the VIP with key k under rule t, in words,
// or "" when it may: it must be alive (or suspect: not yet declared dead)
// with metadata that decoded, not withdrawn, able to carry the VIP (its
// interface is up, it is not fenced), when health counts healthy for it,
// and, unless the rule admits them, not withdrawn by its Node. The words
// name what the member said of itself: leaving and fenced members are
// withdrawn, or have the VIP down, in the metadata they send.
func whyNot(m Member, k uint32, t tier) string {
	vm := m.Meta.VIP(k)
	switch {
	case m.State == StateDead:
		return "dead"
	case m.State == StateLeft:
		return "left"
	case !m.Meta.Valid:
		return "metadata unreadable"
	case !m.Meta.Withdrawn && !vm.Down && (!t.health || vm.Healthy) && (t.nodeWithdrawn || !m.Meta.NodeWithdrawn):
		return ""
	case m.Meta.Leaving:
		return "leaving"
	case m.Meta.Fenced:
		return "fenced (no majority hears it)"
	case m.Meta.Withdrawn:
		return "withdrawn"
	case vm.Down:
		return "interface down"
	case m.Meta.NodeWithdrawn && !t.nodeWithdrawn:
		return "withdrawn by its Node"
	}
	return "unhealthy"
}

// sortByRank sorts items by the rendezvous rank of their node name for vip,
// highest first, hashing each name once.
func sortByRank[T any](vip string, items []T, name func(T) string) {
	type ranked struct {
		rank uint64
		name string
		item T
	}
	rs := make([]ranked, len(items))
	for i, it := range items {
		n := name(it)
		rs[i] = ranked{rank(vip, n), n, it}
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].rank != rs[j].rank {
			return rs[i].rank > rs[j].rank
		}
		return rs[i].name < rs[j].name
	})
	for i := range rs {
		items[i] = rs[i].item
	}
}

func rank(vip, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(vip))
	h.Write([]byte{0})
	h.Write([]byte(node))
	// fnv mixes the last bytes poorly into the high bits; finish with a
	// 64-bit avalanche (splitmix64) so ranks are spread.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
