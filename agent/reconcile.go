package agent

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/vipd/vipd/agent/apipb"

	"github.com/vipd/vipd/agent/config"
)

// reconcile is one pass of the loop: it reads the world (links, the
// membership view), elects an owner per VIP, decides what this node does
// about each VIP and does it; then it publishes this node's metadata, the
// metrics, the peer cache, the status snapshot, and answers withdraw
// waiters.
func (a *Agent) reconcile(ctx context.Context) {
	now := a.now()
	c := a.st.cfg
	members := a.forgetRemoved(a.members.snapshot())
	q := hasQuorum(a.self, a.cache.get(), members, a.lease.recentlyHeard(), c.Cluster.RequireQuorum)
	a.lease.setBase(q.base, q.required, members, a.st.driving)
	if !slices.Equal(q.heardOnly, a.st.heardOnly) {
		if len(q.heardOnly) > 0 {
			a.log.Info("membership says dead but the lease hears them: counted alive for quorum", "members", q.heardOnly)
		}
		a.st.heardOnly = q.heardOnly
	}
	a.observeLease(a.lease.state(), now)

	names := a.vipNames()
	wantDrive := false // a VIP wants a fence: this node drives lease rounds
	a.observeLinks(names)
	a.verifyHeld(ctx, names, now, a.st.verifyNow)
	a.st.verifyNow = false
	for _, name := range names {
		if v := a.st.vips[name]; v.failing && !now.Before(v.retryAt) {
			v.failing = false // eligible again: the next claim is the retry
		}
	}

	// One view for the pass: a VIP's election depends only on its own entry
	// in this node's metadata, which changes only when that VIP is handled.
	view := a.view(members)
	for _, name := range names {
		v := a.st.vips[name]
		res := Elect(view, ElectionVIP{Name: name, Preempt: v.cfg.Preempt})
		if res.Owner != v.owner {
			a.log.Info("ownership change", "vip", name, "from", orNone(v.owner), "to", orNone(res.Owner), "reason", res.Reason)
			a.events.publish(&apipb.Event{Kind: "ownership", Vip: name, From: v.owner, To: res.Owner, Reason: res.Reason})
			a.metrics.ownershipChanges.WithLabelValues(name, res.Reason).Inc()
			v.owner = res.Owner
		}
		v.reason = res.Reason
		d := decide(a.decideInput(v, res, view, q))
		a.apply(ctx, v, d)
		v.lastEligible = res.Eligible
		if d.WantsFence {
			wantDrive = true
		}
	}

	for _, v := range a.st.vips {
		if v.held && v.cfg.Announce != config.AnnounceAll {
			wantDrive = true
		}
	}
	if a.st.fenced {
		wantDrive = true // its rounds bring the evidence that unfences it
	}
	if wantDrive != a.st.driving {
		a.st.driving, a.st.drivingSince = wantDrive, now
		a.lease.setBase(q.base, q.required, members, wantDrive)
	}

	if !q.ok && q.required {
		a.logQuorumOnce(q.alive, q.known)
	} else {
		if a.st.quorumLogged {
			a.log.Info("quorum regained", "alive", q.alive, "known", q.known)
			a.st.quorumRegained = now
			a.kickRejoin()
		}
		a.st.quorumLogged = false
	}

	if b, err := a.encodeMeta(a.localMeta()); err == nil {
		a.members.setMeta(b)
	} else {
		a.log.Error("encode metadata", "err", err)
	}
	a.updateMetrics(members, view, q.ok)
	a.updateCache(members)
	a.checkWaiters(view, now)
	a.notifyStatus()
	a.publishSnapshot(members, view, q)
}

// decideInput gathers decide's input for one VIP.
func (a *Agent) decideInput(v *vipState, res Result, view []Member, q quorum) decideInput {
	c := a.st.cfg
	in := decideInput{
		Now:            a.now(),
		Self:           a.self,
		VIP:            v.cfg.Name,
		AnnounceAll:    v.cfg.Announce == config.AnnounceAll,
		L2:             v.cfg.Mode == config.ModeL2,
		Election:       res,
		View:           view,
		Quorum:         q.ok,
		Alive:          q.alive,
		Known:          q.known,
		QuorumRegained: a.st.quorumRegained,
		Planned:        a.st.withdrawn || a.st.shuttingDown,
		Fenced:         a.st.fenced,
		AwaitFence:     a.st.lease.required && !a.st.lease.canHold,
		HandoffTimeout: c.Cluster.HandoffTimeoutDuration(),
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
// from its own current state rather than from gossip, and members whose
// lease expired on positive evidence (lease.go) counted as dead before
// memberlist's slower failure detection says so.
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

// viewMember is one other member as the election sees it:
//   - gone for the lease (positive evidence that its fence expired), unless
//     membership saw it change since (it restarted, or rejoined, and says so
//     in its metadata): dead;
//   - heard again after it was gone, but with metadata from before that:
//     holding nothing. Its fence had expired, so it released; what it said
//     about holding before is stale until its current metadata arrives.
//     Believing it would make the node that took over release to it ("the
//     highest ranked holder wins") and leave the VIP dark until it claims
//     again, after a heal;
//   - dead for membership but heard by the lease less than Claim ago:
//     suspect (alive for the election). A node back from a partition
//     gossips the deaths it concluded while cut off, and a holder whose
//     incarnation did not change in the meantime is dead for every node
//     that believes it, until it refutes, a few milliseconds later. Taken
//     for dead, the others would elect a new owner and claim at once (they
//     have been eligible all along): two holders, and a move with preempt
//     off. Its heartbeat is direct evidence; the gossip is hearsay. A
//     member that left is not overridden: it said so itself.
func viewMember(m memberInfo, ls leaseState) Member {
	st, meta := m.State, m.Meta
	at, gone := ls.expired[m.Name]
	if st == StateDead && ls.heard[m.Name] && !gone {
		st = StateSuspect
	}
	if gone && st <= StateSuspect && !m.Since.After(at) {
		st = StateDead
	}
	if at, was := ls.lastGone[m.Name]; was && !m.MetaSince.After(at) && len(meta.VIPs) > 0 {
		vips := make(map[uint32]VIPMeta, len(meta.VIPs))
		for k, v := range meta.VIPs {
			v.Held = false
			vips[k] = v
		}
		meta.VIPs = vips
	}
	return Member{Name: m.Name, State: st, Meta: meta}
}

func (a *Agent) logQuorumOnce(alive, known int) {
	if !a.st.quorumLogged {
		a.st.quorumLogged = true
		a.log.Warn("no quorum: not holding any VIP", "alive", alive, "known", known)
		a.events.publish(&apipb.Event{Kind: "membership", Node: a.self, Message: fmt.Sprintf("no quorum: %d of %d known members alive", alive, known)})
	}
}

// observeLease records the lease's state for the pass, and logs and
// publishes changes of this node's fence and of the members gone. A node is
// fenced when it drives rounds (it holds, or is about to claim) and has had
// no majority evidence for the release time; it stays fenced until it has
// fresh evidence again.
func (a *Agent) observeLease(ls leaseState, now time.Time) {
	old := a.st.lease
	a.st.lease = ls
	wasFenced := a.st.fenced
	release := a.lease.tr.cfg.Release
	switch {
	case !ls.required || ls.canHold:
		a.st.fenced = false
	case a.st.fenced:
		// A fenced node stays fenced (and keeps driving rounds, so that
		// the answers that end it can come) until a majority hears it
		// again. Were it to unfence as soon as it released, it would elect
		// itself again (to itself it is still the best node), drive, fence
		// and so on, and its metadata would flicker between fenced and
		// not: the others, who may still hear it (only its incoming
		// traffic lost), would never see it fenced long enough to take
		// over.
	case a.st.driving && a.holdsAny():
		a.st.fenced = true // a holder never holds without evidence
	case a.st.driving && now.Sub(a.st.drivingSince) >= release:
		a.st.fenced = true
	}
	if a.st.fenced != wasFenced {
		if a.st.fenced {
			age := "never"
			if !ls.evidence.IsZero() {
				age = a.now().Sub(ls.evidence).Round(time.Millisecond).String()
			}
			a.log.Warn("fenced: no majority of the known members confirmed hearing this node recently; holding no VIP", "evidence_age", age)
			a.events.publish(&apipb.Event{Kind: "fence", Node: a.self, Message: "fenced: no majority evidence for " + age})
		} else {
			// What this node knows of the others may be stale (it may have
			// heard nothing for a while, as when only its incoming traffic
			// was lost): a join of every known peer exchanges the full
			// state, within the settle period before it may claim.
			a.rejoinAll()
			a.log.Info("fence held again: a majority hears this node")
			a.events.publish(&apipb.Event{Kind: "fence", Node: a.self, Message: "fence held"})
		}
	}
	for n := range ls.expired {
		if _, was := old.expired[n]; !was {
			a.log.Info("member gone (lease expired)", "member", n)
			a.events.publish(&apipb.Event{Kind: "membership", Node: n, Message: "lease expired: gone for the election"})
		}
	}
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
