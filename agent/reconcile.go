package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/agent/lifecycle"
)

// reconcile is one pass of the loop: it reads the world (links, the
// membership view), elects an owner per VIP, decides what this node does
// about each VIP and does it; then it publishes this node's metadata, the
// metrics, the peer cache, the status snapshot, and answers withdraw
// waiters.
func (a *Agent) reconcile(ctx context.Context) {
	now := a.now()
	c := a.st.cfg
	members := a.forgetRemoved(a.members.Members())
	for _, m := range members {
		if m.Name != a.self && m.Meta.RestartGrace > 0 {
			a.lease.MarkRestarting(m.Name, m.Meta.RestartGrace)
		}
	}
	q := hasQuorum(a.self, a.cache.get(), members, a.lease.RecentlyHeard(), c.Cluster.RequireQuorum)
	addrs := memberAddrs(members)
	a.lease.SetBase(q.Base, q.Required, addrs, a.st.fence.Driving())
	if !slices.Equal(q.HeardOnly, a.st.heardOnly) {
		if len(q.HeardOnly) > 0 {
			a.log.Info("membership says dead but the lease hears them: counted alive for quorum", "members", q.HeardOnly)
		}
		a.st.heardOnly = q.HeardOnly
	}
	a.observeLease(a.lease.State(), now)

	names := a.vipNames()
	wantDrive := false // a VIP wants a fence: this node drives lease rounds
	a.observeLinks(names)
	a.dropAdopted(ctx, false)
	a.verifyHeld(ctx, names, now, a.st.verifyNow)
	a.st.verifyNow = false
	for _, name := range names {
		if v := a.st.vips[name]; v.failing && !now.Before(v.retryAt) {
			v.failing = false // eligible again: the next claim is the retry
		}
	}

	a.notePreemptDelays(now)
	// One view for the pass: a VIP's election depends only on its own entry
	// in this node's metadata, which changes only when that VIP is handled.
	view := a.view(members)
	var kept []string // VIPs this node is kept eligible for against its Node's withdraw
	for _, name := range names {
		v := a.st.vips[name]
		res := Elect(view, a.electionVIP(v))
		if res.NodeKept && a.st.node.withdrawn() && slices.Contains(res.Eligible, a.self) {
			kept = append(kept, name)
		}
		if res.Owner != v.owner {
			a.log.Info("ownership change", "vip", name, "from", orNone(v.owner), "to", orNone(res.Owner), "reason", res.Reason)
			a.events.publish(&apipb.Event{Kind: "ownership", Vip: name, From: v.owner, To: res.Owner, Reason: res.Reason})
			a.metrics.ownershipChanges.WithLabelValues(name, res.Reason).Inc()
			v.owner = res.Owner
		}
		v.reason = res.Reason
		peers := peersOf(view, name, addrs)
		if h := lifecycle.LastHolder(a.self, peers); h != "" {
			v.lastHolder = h
		}
		v.holdersSeen = lifecycle.NoteHolders(v.holdersSeen, a.self, peers, a.now())
		d := lifecycle.Decide(a.decideInput(v, res, peers, q))
		if d.Do == lifecycle.Claim {
			// Before the address and its gratuitous ARP: a client that
			// moves to this node's MAC at once and writes on its
			// connection to the previous holder must find its packets
			// passed on, not reset. A claim that fails stops it below
			// (stepForward: this node does not hold the VIP).
			a.startForward(ctx, v, peers)
		}
		a.apply(ctx, v, d)
		a.confirmAdopted(ctx, v, d)
		a.stepForward(ctx, v, peers)
		a.stepLinger(ctx, v, peers)
		a.stepTakeover(ctx, v, peers)
		v.lastEligible = res.Eligible
		if d.WantsFence {
			wantDrive = true
		}
	}

	a.noteNodeKept(kept)
	a.noteHookStates()
	for _, v := range a.st.vips {
		if v.held && v.cfg.Announce != config.AnnounceAll {
			wantDrive = true
		}
	}
	// A fenced node drives whatever it wants: its rounds bring the
	// evidence that unfences it.
	if a.st.fence.SetDriving(wantDrive, now) {
		a.lease.SetBase(q.Base, q.Required, addrs, a.st.fence.Driving())
	}

	if !q.OK && q.Required {
		a.logQuorumOnce(q.Alive, q.Known)
	} else {
		if a.st.quorumLogged {
			a.log.Info("quorum regained", "alive", q.Alive, "known", q.Known)
			a.st.quorumRegained = now
			a.kickRejoin()
		}
		a.st.quorumLogged = false
	}

	if b, err := a.encodeMeta(a.localMeta()); err == nil {
		a.members.SetMeta(b)
	} else {
		a.log.Error("encode metadata", "err", err)
	}
	a.setPublishSpec()
	a.updateMetrics(members, view, q.OK)
	a.updateCache(members)
	a.checkWaiters(view, now)
	a.notifyStatus()
	a.publishSnapshot(members, view, q)
}

// decideInput gathers the lifecycle's Decide input for one VIP: res is
// the election's answer over the view, peers the view for v.
func (a *Agent) decideInput(v *vipState, res Result, peers []lifecycle.Peer, q lease.Quorum) lifecycle.Input {
	c := a.st.cfg
	in := lifecycle.Input{
		Now:         a.now(),
		Self:        a.self,
		AnnounceAll: v.cfg.Announce == config.AnnounceAll,
		L2:          v.cfg.Mode == config.ModeL2,
		Election:    electionOf(res),
		View:        peers,
		// VIPs taken over in a restart in place are kept, with or
		// without quorum, until the previous process's deadline: the
		// peers claim nothing before it.
		Quorum:         q.OK || (v.held && a.st.lease.Adopting()),
		Alive:          q.Alive,
		Known:          q.Known,
		QuorumRegained: a.st.quorumRegained,
		Planned:        a.st.withdrawn || a.st.shuttingDown || a.st.node.withdrawn(),
		Fenced:         a.st.fence.Fenced(),
		AwaitFence:     a.st.lease.Required() && (!a.st.lease.CanHold() || a.st.lease.Adopting()),
		HandoffTimeout: c.Cluster.HandoffTimeoutDuration(),
		CanQuiesce:     a.canQuiesce(v),
		Held:           v.held,
		Down:           v.down,
		DownIface:      v.cfg.Interface,
		EligibleSince:  v.eligibleSince,
		HandoffStarted: v.handoffStarted,
		DrainStarted:   v.drainStarted,
		RetryAt:        v.retryAt,
		Contested:      v.contested,
		Bootstrap:      v.bootstrap,
		LastEligible:   v.lastEligible,
		SettleStarted:  v.settleStarted,
	}
	if _, ok := v.ann.(Drainer); ok && v.cfg.Mode == config.ModeBGP && c.BGP != nil {
		in.Drain = c.BGP.GracefulShutdownDuration()
	}
	return in
}

// electionVIP is what the election needs of v: its preempt and its group.
func (a *Agent) electionVIP(v *vipState) ElectionVIP {
	ev := ElectionVIP{Name: v.cfg.Name, Preempt: v.cfg.Preempt, Group: v.cfg.Group}
	if ev.Group != "" {
		ev.Members = a.st.cfg.Groups()[ev.Group]
	}
	return ev
}

// notePreemptDelays moves each VIP's preempt delay: it runs from the
// moment this node can carry the VIP (lifecycle.PreemptReady), and while it runs
// the node publishes that it waits (VIPMeta.Waiting), so no node elects
// it over a holder.
func (a *Agent) notePreemptDelays(now time.Time) {
	nodeReady := !a.st.fence.Fenced() && !a.st.withdrawn && !a.st.shuttingDown && !a.st.node.withdrawn()
	for _, v := range a.st.vips {
		ready := nodeReady && v.healthy && !v.down && !v.failing
		v.readySince = lifecycle.PreemptReady(v.readySince, ready, now)
		w := lifecycle.PreemptWaiting(v.readySince, now, v.cfg.PreemptDelayDuration(), v.held)
		if w != v.waiting {
			if w {
				a.log.Info("waiting out the preempt delay before taking the VIP from a lower-ranked holder", "vip", v.cfg.Name, "delay", v.cfg.PreemptDelayDuration())
			} else if !v.readySince.IsZero() && !v.held {
				a.log.Info("preempt delay over", "vip", v.cfg.Name)
			}
			v.waiting = w
		}
	}
}

// vipNames returns the configured VIP names, sorted.
func (a *Agent) vipNames() []string {
	names := make([]string, 0, len(a.st.vips))
	for n := range a.st.vips {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// view is the election's input: every member, with this node's entry taken
// from its own current state rather than from gossip, and what the lease's
// evidence makes of the others (lease.State.View: gone on positive
// evidence before memberlist's slower failure detection says so, heard a
// moment ago whatever gossip says).
func (a *Agent) view(members []memberInfo) []Member {
	out := make([]Member, 0, len(members)+1)
	for _, m := range members {
		if m.Name == a.self {
			continue
		}
		out = append(out, viewMember(m, a.st.lease))
	}
	return append(out, Member{Name: a.self, State: StateAlive, Meta: a.localMeta()})
}

// viewMember is one other member as the election sees it: membership's
// view, with the lease's verdict on it applied (applyVerdict).
func viewMember(m memberInfo, ls lease.State) Member {
	return applyVerdict(m, ls.View(lease.Member{
		Name: m.Name, Alive: m.State == StateAlive || m.State == StateSuspect, Dead: m.State == StateDead,
		Since: m.Since, MetaSince: m.MetaSince,
	}))
}

// applyVerdict is m with the lease's verdict applied: alive (suspect) or
// dead against membership's view, and holding nothing when what it
// published about holding is stale (its metadata is not changed).
func applyVerdict(m memberInfo, v lease.Verdict) Member {
	st, meta := m.State, m.Meta
	switch {
	case v.Alive:
		st = StateSuspect
	case v.Dead:
		st = StateDead
	}
	if v.StaleHolds && len(meta.VIPs) > 0 {
		vips := make(map[uint32]VIPMeta, len(meta.VIPs))
		for k, vm := range meta.VIPs {
			// Nor does it linger: its connections went with its fence.
			vm.Held, vm.Lingering = false, false
			vips[k] = vm
		}
		meta.VIPs = vips
	}
	return Member{Name: m.Name, State: st, Meta: meta}
}

// hasQuorum counts this node's quorum (lease.CountQuorum): the quorum base
// is this node, every member membership shows, in any state, and every
// cached peer; alive are the members membership says are alive or
// suspect, and those it says are dead while the lease heard them a moment
// ago (heard: lease.Runner.RecentlyHeard).
func hasQuorum(self string, cached []CachedPeer, members []memberInfo, heard []string, require *bool) lease.Quorum {
	var known, alive, dead []string
	for _, p := range cached {
		known = append(known, p.Name)
	}
	for _, m := range members {
		known = append(known, m.Name)
		switch m.State {
		case StateAlive, StateSuspect:
			alive = append(alive, m.Name)
		case StateDead:
			dead = append(dead, m.Name)
		}
	}
	return lease.CountQuorum(self, known, alive, dead, heard, require)
}

// memberAddrs are the members' membership addresses, for the lease's
// heartbeats and probes.
func memberAddrs(members []memberInfo) map[string]netip.AddrPort {
	out := make(map[string]netip.AddrPort, len(members))
	for _, m := range members {
		if ap, err := netip.ParseAddrPort(m.Address); err == nil {
			out[m.Name] = ap
		}
	}
	return out
}

func (a *Agent) logQuorumOnce(alive, known int) {
	if !a.st.quorumLogged {
		a.st.quorumLogged = true
		a.log.Warn("no quorum: not holding any VIP", "alive", alive, "known", known)
		a.events.publish(&apipb.Event{Kind: "membership", Node: a.self, Message: fmt.Sprintf("no quorum: %d of %d known members alive", alive, known)})
	}
}

// observeLease records the lease's state for the pass, moves this node's
// fence (lease.Fence), and logs and publishes the changes of the fence and
// of the members gone.
func (a *Agent) observeLease(ls lease.State, now time.Time) {
	old := a.st.lease
	a.st.lease = ls
	if a.st.fence.Observe(ls, a.holdsAny(), now) {
		if a.st.fence.Fenced() {
			a.st.fencedAt = now
			age := "never"
			if !ls.Evidence().IsZero() {
				age = a.now().Sub(ls.Evidence()).Round(time.Millisecond).String()
			}
			a.log.Warn("fenced: no majority of the known members confirmed hearing this node recently; holding no VIP", "evidence_age", age)
			a.events.publish(&apipb.Event{Kind: "fence", Node: a.self, Message: "fenced: no majority evidence for " + age})
		} else {
			// What this node knows of the others may be stale (it may have
			// heard nothing for a while, as when only its incoming traffic
			// was lost): a state exchange, within the settle period before
			// it may claim, brings it up to date. Not after a fence shorter
			// than Claim: no majority can have taken this node for gone
			// meanwhile (that takes Claim of silence), and gossip carries
			// the rest. And with two of the members that just answered,
			// not every known peer: with 16 nodes fencing one another on a
			// loaded host, the burst of 15 push-pulls per unfence delayed
			// answers past Release and fenced them again, for tens of
			// seconds (docs/design.md, "Cold start").
			if fencedFor := now.Sub(a.st.fencedAt); fencedFor >= ls.Timers().Claim {
				a.refreshFrom(a.refreshAddrs())
			}
			a.log.Info("fence held again: a majority hears this node")
			a.events.publish(&apipb.Event{Kind: "fence", Node: a.self, Message: "fence held"})
		}
	}
	began, ended := ls.RestartsSince(old)
	for _, n := range began {
		a.log.Info("member restarting in place: its VIPs stay with it until it is back or the grace runs out", "member", n)
		a.events.publish(&apipb.Event{Kind: "membership", Node: n, Message: "restarting in place"})
	}
	for _, n := range ended {
		a.log.Info("member restart over: back, or its grace ran out", "member", n)
		a.events.publish(&apipb.Event{Kind: "membership", Node: n, Message: "restart in place over"})
	}
	for _, n := range ls.GoneSince(old) {
		a.log.Info("member gone (lease expired)", "member", n)
		a.events.publish(&apipb.Event{Kind: "membership", Node: n, Message: "lease expired: gone for the election"})
	}
}

// refreshAddrs returns the membership addresses of up to refreshPeers
// members the lease heard a moment ago (their answers are what lifted the
// fence), in name order.
func (a *Agent) refreshAddrs() []string {
	heard := a.lease.RecentlyHeard()
	var out []string
	for _, m := range a.members.Members() {
		if len(out) < refreshPeers && m.Name != a.self && m.Address != "" && slices.Contains(heard, m.Name) {
			out = append(out, m.Address)
		}
	}
	return out
}

// forgetRemoved forgets members that were decommissioned (vipctl
// decommission) and have stopped, as vipctl forget would on every node: a
// control-plane node removed for good must not stay in the quorum base.
func (a *Agent) forgetRemoved(members []memberInfo) []memberInfo {
	keep := members[:0:0]
	for _, m := range members {
		if m.Name != a.self && m.Meta.Removed && (m.State == StateLeft || m.State == StateDead) {
			if err := a.forget(m.Name); err != nil {
				a.log.Warn("forget a decommissioned member", "member", m.Name, "err", err)
			} else {
				a.log.Info("member removed for good (decommissioned) forgotten", "member", m.Name)
			}
			continue
		}
		keep = append(keep, m)
	}
	return keep
}
