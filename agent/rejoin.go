package agent

import "sort"

// rejoinTargets returns the addresses to join: the cached and configured
// peers that are not currently alive members. Cached peers are matched by
// name (their address may be stale only if the node moved), configured
// peers by address. self is never a target.
func rejoinTargets(self string, cached []CachedPeer, configured []string, members []memberInfo) []string {
	aliveName := map[string]bool{}
	aliveAddr := map[string]bool{}
	for _, m := range members {
		if m.State == StateAlive || m.State == StateSuspect {
			aliveName[m.Name] = true
			aliveAddr[m.Address] = true
		}
	}
	seen := map[string]bool{}
	var out []string
	add := func(addr string) {
		if addr != "" && !aliveAddr[addr] && !seen[addr] {
			seen[addr] = true
			out = append(out, addr)
		}
	}
	for _, p := range cached {
		if p.Name != self && !aliveName[p.Name] {
			add(p.Address)
		}
	}
	for _, a := range configured {
		add(a)
	}
	sort.Strings(out)
	return out
}

// nextPeerCache merges what membership shows into the cache: every node
// seen, with its latest address, except this one and nodes that left
// gracefully (they rejoin by themselves from their own cache). Dead nodes
// stay: they are the ones to rejoin.
func nextPeerCache(self string, cached []CachedPeer, members []memberInfo) []CachedPeer {
	byName := map[string]CachedPeer{}
	for _, p := range cached {
		byName[p.Name] = p
	}
	for _, m := range members {
		switch {
		case m.Name == self:
		case m.State == StateLeft:
			delete(byName, m.Name)
		default:
			byName[m.Name] = CachedPeer{Name: m.Name, Address: m.Address}
		}
	}
	out := make([]CachedPeer, 0, len(byName))
	for _, p := range byName {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// hasQuorum reports whether this node sees a majority of the known members
// (cached peers, members not known to have left, and this node), and whether quorum is required at all
// (explicitly, or by default once 3 or more members are known).
func hasQuorum(self string, cached []CachedPeer, members []memberInfo, require *bool) (ok, required bool, alive, known int) {
	knownSet := map[string]bool{self: true}
	for _, p := range cached {
		knownSet[p.Name] = true
	}
	aliveSet := map[string]bool{self: true}
	for _, m := range members {
		if m.State != StateLeft {
			knownSet[m.Name] = true
		}
		if m.State == StateAlive || m.State == StateSuspect {
			aliveSet[m.Name] = true
		}
	}
	known, alive = len(knownSet), len(aliveSet)
	required = known >= 3
	if require != nil {
		required = *require
	}
	return !required || alive*2 > known, required, alive, known
}
