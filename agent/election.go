package agent

import (
	"hash/fnv"
	"sort"

	"github.com/vipd/vipd/agent/config"
)

// MemberState is a member's liveness as membership sees it.
type MemberState int

// Member states.
const (
	StateAlive MemberState = iota
	StateSuspect
	StateDead
	StateLeft
)

func (s MemberState) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "unknown"
}

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
}

// Election reasons, as they appear in logs and events.
const (
	ReasonKeep      = "current holder stays owner"
	ReasonRank      = "highest ranked eligible node"
	ReasonContested = "several nodes hold it; highest ranked holder wins"
	ReasonBootstrap = "no node is healthy; bootstrap fallback to alive, not withdrawn nodes"
	ReasonNone      = "no eligible node"
)

// Result is the outcome of an election.
type Result struct {
	Owner     string // "" when no node is eligible
	Reason    string
	Bootstrap bool // eligibility fell back to alive + not withdrawn
	// Eligible lists the members that may own the VIP, in rank order.
	Eligible []string
}

// Elect returns the owner of vip given the members. It is a pure function:
// every node that sees the same members computes the same owner.
//
// A member is eligible when it is alive (or suspect: not yet declared
// dead), not withdrawn, able to carry the VIP (its interface is up) and
// healthy for this VIP. When no alive,
// non-withdrawn member is healthy (cluster bootstrap: the apiserver is not
// up anywhere yet), eligibility falls back to alive and not withdrawn.
//
// Among eligible members, without preemption a member that already holds
// the VIP keeps it (no second interruption when a better node returns);
// when several eligible members hold it (after a partition heals), the
// highest ranked of them wins. Otherwise the highest ranked eligible member
// wins. Rank is rendezvous hashing of (VIP, node name), which spreads VIPs
// over nodes and moves only the VIPs of a node that goes.
func Elect(members []Member, vip ElectionVIP) Result {
	key := config.VIPKey(vip.Name)
	var eligible []Member
	anyHealthy := false
	for _, m := range members {
		if whyNot(m, key, true) == "" {
			anyHealthy = true
		}
	}
	for _, m := range members {
		if whyNot(m, key, anyHealthy) == "" {
			eligible = append(eligible, m)
		}
	}
	if len(eligible) == 0 {
		return Result{Reason: ReasonNone}
	}
	sortByRank(vip.Name, eligible, func(m Member) string { return m.Name })
	names := make([]string, len(eligible))
	for i, m := range eligible {
		names[i] = m.Name
	}
	res := Result{Owner: eligible[0].Name, Reason: ReasonRank, Bootstrap: !anyHealthy, Eligible: names}
	if !anyHealthy {
		res.Reason = ReasonBootstrap
	}
	var holders []string
	for _, m := range eligible {
		if m.Meta.VIP(key).Held {
			holders = append(holders, m.Name)
		}
	}
	switch {
	case len(holders) > 1:
		if !vip.Preempt {
			res.Owner = holders[0]
		}
		res.Reason = ReasonContested
	case len(holders) == 1 && !vip.Preempt:
		res.Owner = holders[0]
		res.Reason = ReasonKeep
	}
	if res.Bootstrap && res.Reason != ReasonBootstrap {
		res.Reason += "; " + ReasonBootstrap
	}
	return res
}

// Eligible lists the members that may own vip, in rank order, by the same
// rules as Elect.
func Eligible(members []Member, vip ElectionVIP) []string {
	return Elect(members, vip).Eligible
}

// whyNot says why m may not own the VIP with key k, in words, or "" when
// it may: it must be alive (or suspect: not yet declared dead) with
// metadata that decoded, not withdrawn, able to carry the VIP (its
// interface is up, it is not fenced) and, when health counts (not under the
// bootstrap fallback), healthy for it. The words name what the member said
// of itself: leaving and fenced members are withdrawn, or have the VIP
// down, in the metadata they send.
func whyNot(m Member, k uint32, health bool) string {
	vm := m.Meta.VIP(k)
	switch {
	case m.State == StateDead:
		return "dead"
	case m.State == StateLeft:
		return "left"
	case !m.Meta.Valid:
		return "metadata unreadable"
	case !m.Meta.Withdrawn && !vm.Down && (!health || vm.Healthy):
		return ""
	case m.Meta.Leaving:
		return "leaving"
	case m.Meta.Fenced:
		return "fenced (no majority hears it)"
	case m.Meta.Withdrawn:
		return "withdrawn"
	case vm.Down:
		return "interface down"
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
