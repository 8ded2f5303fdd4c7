package agent

import (
	"context"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/conns"
)

// apply carries out decide's decision for one VIP through its announcer and
// records what happened.
func (a *Agent) apply(ctx context.Context, v *vipState, d lifecycle.Decision) {
	v.eligibleSince, v.settling, v.settleStarted = d.EligibleSince, d.Settling, d.SettleStarted
	v.contested, v.bootstrap = d.Contested, d.Bootstrap
	v.handoffStarted, v.drainStarted = d.HandoffStarted, d.DrainStarted
	if d.StartedHandoff {
		a.log.Info("handing VIP off", "vip", v.cfg.Name, "to", orNone(v.owner))
	}
	switch d.Do {
	case lifecycle.Claim:
		a.claim(ctx, v, d.Reason)
		if v.held {
			a.startTakeover(v)
		}
	case lifecycle.Keep:
		if v.silenced {
			a.log.Info("handoff called off: advertising the VIP again", "vip", v.cfg.Name)
			a.reannounce(ctx, v)
		}
		v.silenced = false
	case lifecycle.Reassert:
		a.log.Info("re-announcing VIP after duplicate holder released it", "vip", v.cfg.Name)
		a.reannounce(ctx, v)
		v.silenced = false
	case lifecycle.Handoff:
		a.silence(ctx, v)
	case lifecycle.Drain:
		a.silence(ctx, v)
		if dr, ok := v.ann.(Drainer); ok {
			actx, cancel := withTimeout(ctx)
			defer cancel()
			if err := dr.Drain(actx, v.cfg.Addr()); err != nil {
				a.log.Warn("graceful shutdown announcement", "vip", v.cfg.Name, "err", err)
			}
		}
	case lifecycle.Quiesce:
		a.startLinger(ctx, v, d.Reason)
	case lifecycle.Release:
		if d.CloseClients {
			// Before the address goes: the resets leave from it.
			a.closeClients(v)
		}
		a.release(ctx, v, d.Reason)
	}
}

// reannounce announces a held VIP again (a new burst, the refresh again).
func (a *Agent) reannounce(ctx context.Context, v *vipState) {
	actx, cancel := withTimeout(ctx)
	defer cancel()
	if err := v.ann.Announce(actx, v.cfg.Addr()); err != nil {
		a.log.Warn("re-announce VIP", "vip", v.cfg.Name, "err", err)
	}
}

// silence stops this node's advertisements of a VIP it hands off
// make-before-break (Silencer), once per handoff: the successor's
// announcement moves the clients, and a refresh from here must not move
// them back just before this node releases the VIP.
func (a *Agent) silence(ctx context.Context, v *vipState) {
	s, ok := v.ann.(Silencer)
	if !ok || v.silenced {
		return
	}
	actx, cancel := withTimeout(ctx)
	defer cancel()
	if err := s.Silence(actx, v.cfg.Addr()); err != nil {
		a.log.Warn("stop advertising VIP for the handoff", "vip", v.cfg.Name, "err", err)
		return
	}
	v.silenced = true
}

// fail marks v as failing after an announce that failed: until its retry,
// this node tells the others it cannot carry the VIP, so a peer takes over.
func (v *vipState) fail(now time.Time) {
	v.backoff = lifecycle.NextBackoff(v.backoff)
	v.retryAt, v.failing = now.Add(v.backoff), true
}

// claim announces a VIP this node should hold. A failed announce is undone
// (a half-done announce must not leave the address up while this node tells
// the others it does not hold the VIP) and retried with a backoff.
func (a *Agent) claim(ctx context.Context, v *vipState, reason string) {
	actx, cancel := withTimeout(ctx)
	defer cancel()
	now := a.now()
	a.record(v, true) // before the address exists, so a crash right after leaves it covered
	// Lingering on v (an earlier handoff): its connections are its own
	// again; Announce ends the lingering with the address back.
	a.callOffLinger(v)
	if err := v.ann.Announce(actx, v.cfg.Addr()); err != nil {
		v.fail(now)
		v.failReason = err.Error()
		a.metrics.announceErrors.WithLabelValues(v.cfg.Name, "announce").Inc()
		a.log.Error("announce VIP", "vip", v.cfg.Name, "err", err, "retry_in", v.backoff)
		if werr := a.withdrawAddr(ctx, v); werr != nil {
			a.log.Error("undo failed announce", "vip", v.cfg.Name, "err", werr)
		} else {
			a.record(v, false)
		}
		return
	}
	v.held, v.failing, v.silenced = true, false, false
	v.heldReason = reason
	v.backoff, v.retryAt = 0, time.Time{}
	a.closeOwnConnections(v, conns.Outbound)
	a.startWatch(ctx, v)
	a.log.Info("holding VIP", "vip", v.cfg.Name, "address", v.cfg.Addr(), "mode", v.cfg.Mode, "reason", reason)
	a.events.publish(&apipb.Event{Kind: "hold", Vip: v.cfg.Name, Node: a.self, Reason: reason})
}

// release withdraws a VIP now. A failed withdraw keeps the VIP held (and
// is retried at the next pass).
func (a *Agent) release(ctx context.Context, v *vipState, reason string) {
	a.abandonLinger(ctx, v, reason)
	a.stopWatch(v)
	if err := a.withdrawAddr(ctx, v); err != nil {
		a.metrics.announceErrors.WithLabelValues(v.cfg.Name, "withdraw").Inc()
		a.log.Error("withdraw VIP", "vip", v.cfg.Name, "err", err)
		return
	}
	// The forwarding goes only once the address has: until then a client
	// whose ARP cache still names this node sends it the segments of the
	// connections it forwards, and without the rule its kernel resets
	// them. A withdraw that failed keeps the VIP held and forwarding.
	a.stopForward(ctx, v, "this node releases the VIP")
	v.held, v.handoffStarted, v.drainStarted, v.silenced = false, time.Time{}, time.Time{}, false
	a.closeOwnConnections(v, conns.Loopback)
	v.releaseReason = reason
	a.record(v, false)
	a.log.Info("released VIP", "vip", v.cfg.Name, "reason", reason)
	a.events.publish(&apipb.Event{Kind: "release", Vip: v.cfg.Name, Node: a.self, Reason: reason})
	a.reconnectNodeWatch()
}

// withdrawAddr takes the VIP off the network through its announcer, bounded
// by announceTimeout.
func (a *Agent) withdrawAddr(ctx context.Context, v *vipState) error {
	actx, cancel := withTimeout(ctx)
	defer cancel()
	return v.ann.Withdraw(actx, v.cfg.Addr())
}

// record notes (added) or forgets a VIP address this node put on the host,
// in state_dir/addresses.json, for vipd cleanup. A failure to save is
// logged: cleanup still covers the configured VIPs.
func (a *Agent) record(v *vipState, added bool) {
	t := CleanupTarget{VIP: v.cfg.Name, Interface: v.cfg.Interface, Addr: v.cfg.Addr()}
	old, had := a.st.recorded[v.cfg.Name]
	switch {
	case added && had && old == t, !added && !had:
		return
	case added:
		a.st.recorded[v.cfg.Name] = t
	default:
		delete(a.st.recorded, v.cfg.Name)
	}
	ts := make([]CleanupTarget, 0, len(a.st.recorded))
	for _, t := range a.st.recorded {
		ts = append(ts, t)
	}
	if err := saveRecorded(a.st.cfg.StateDir, ts); err != nil {
		a.log.Warn("record VIP addresses for cleanup", "err", err)
	}
}
