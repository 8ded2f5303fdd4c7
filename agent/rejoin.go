package agent

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// peerCache is the in-memory copy of state_dir/peers.json, shared by the
// loop (which updates it) and the rejoin loop (which reads it).
type peerCache struct {
	mu    sync.Mutex
	peers []CachedPeer
}

func (c *peerCache) set(p []CachedPeer) {
	c.mu.Lock()
	c.peers = p
	c.mu.Unlock()
}

func (c *peerCache) get() []CachedPeer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peers
}

// updateCache merges the membership table into the peer cache and saves it
// when it changed.
func (a *Agent) updateCache(members []memberInfo) {
	old := a.cache.get()
	next := nextPeerCache(a.self, old, members)
	if slices.Equal(old, next) {
		return
	}
	a.cache.set(next)
	if err := savePeerCache(a.st.cfg.StateDir, next); err != nil {
		a.log.Error("save peer cache (kept in memory)", "err", err)
	}
}

// joinAll joins addresses in parallel: memberlist joins a list one by one
// and an unreachable cached peer would hold the others up for its timeout.
func (a *Agent) joinAll(addrs []string) int {
	if len(addrs) == 0 {
		return 0
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	joined := 0
	for _, addr := range addrs {
		wg.Go(func() {
			n, err := a.members.Join([]string{addr})
			if err != nil {
				a.log.Debug("join", "peer", addr, "err", err)
			}
			mu.Lock()
			joined += n
			mu.Unlock()
		})
	}
	wg.Wait()
	a.log.Info("join", "tried", len(addrs), "joined", joined)
	return joined
}

// rejoinLoop joins, every rejoin_interval, the known peers that are not
// alive members, so a node cut off for a while comes back by itself.
//
// A node that came back under another address (cluster.bind_address
// changed across a restart without a leave) is refused by its peers until
// its old process's entry has been dead for memberlist's
// DeadNodeReclaimTime, and its own view has them alive, so nothing above
// would try again before memberlist's periodic state exchange (10 s, 30 s
// with lan timers). While a state exchange shows a peer knowing this node
// at another address (membership.misplaced), every misplacedRetry it joins
// every known peer again.
func (a *Agent) rejoinLoop(ctx context.Context) {
	var interval time.Duration
	if err := a.do(ctx, func() { interval = a.st.cfg.Cluster.RejoinIntervalDuration() }); err != nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	mt := time.NewTicker(misplacedRetry)
	defer mt.Stop()
	logged := false
	for {
		misplaced := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.rejoinKick:
		case <-mt.C:
			if misplaced = a.members.TakeMisplaced(); !misplaced {
				continue
			}
		}
		// Read without a request to the loop: a rejoin tick that finds
		// every peer alive must not wake it.
		members := a.members.Members()
		if a.rejoinEvery.Swap(false) || misplaced {
			members = nil // every known peer, alive ones included
		}
		if misplaced && !logged {
			logged = true
			a.log.Info("a peer knows this node at another address (it came back under a new one): joining the peers again until they take it", "address", a.members.Advertised())
		}
		targets := rejoinTargets(a.self, a.cache.get(), *a.peers.Load(), members)
		if also := a.rejoinAlso.Swap(nil); also != nil {
			for _, addr := range *also {
				if !slices.Contains(targets, addr) {
					targets = append(targets, addr)
				}
			}
		}
		if len(targets) == 0 {
			continue
		}
		a.log.Info("rejoin", "peers", strings.Join(targets, ","))
		a.metrics.rejoinAttempts.Add(float64(len(targets)))
		a.metrics.rejoinJoined.Add(float64(a.joinAll(targets)))
	}
}

// misplacedRetry is how often the rejoin loop joins the peers again while
// one knows this node at another address.
const misplacedRetry = time.Second

// kickRejoin makes the rejoin loop run now (after quorum is regained, the
// state exchange of a join brings this node's stale view up to date).
func (a *Agent) kickRejoin() {
	select {
	case a.rejoinKick <- struct{}{}:
	default:
	}
}

// rejoinAll makes the rejoin loop join every known peer now, alive ones
// included: the state exchange of a join refreshes a view that may be stale
// (a link back up, a fence lifted).
func (a *Agent) rejoinAll() {
	a.rejoinEvery.Store(true)
	a.kickRejoin()
}

// refreshFrom makes the rejoin loop join addrs now, alive members
// included: the state exchange of a join with a few members brings a view
// that may be stale up to date (one push-pull carries the whole member
// table), without the burst of a join with every known peer.
func (a *Agent) refreshFrom(addrs []string) {
	if len(addrs) == 0 {
		return
	}
	a.rejoinAlso.Store(&addrs)
	a.kickRejoin()
}

// refreshPeers is how many members refreshFrom asks after a fence.
const refreshPeers = 2

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
// seen, with its latest address, except this one. Nodes that died or left
// stay, like etcd members that stopped: they are the ones to rejoin, and
// they count in the quorum base until `vipctl forget` removes them.
func nextPeerCache(self string, cached []CachedPeer, members []memberInfo) []CachedPeer {
	byName := map[string]CachedPeer{}
	for _, p := range cached {
		byName[p.Name] = p
	}
	for _, m := range members {
		if m.Name != self {
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
