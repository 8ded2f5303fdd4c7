package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/conns"
)

// The daisy chain: how a planned handoff of an L2 VIP costs its clients no
// request.
//
// Without it, the new holder announces the VIP, and the old holder then
// closes its connections on it: a request the old holder has not answered
// yet fails, and so does one a client sends in the milliseconds between
// the announcement and the close (its packets reach the new holder, whose
// kernel has no such connection and resets it). client-go does not send a
// write again by itself. Closing each connection at a moment its bytes
// say is idle does not help on HTTP/2, where a kubelet's watches and
// writes share one connection (docs/design.md, "What an idle moment can
// and cannot know").
//
// With it (both holders' announcers able, [connections] reset on):
//
//  1. The new holder, before it announces the VIP, passes on the packets
//     of connections it does not know (no SYN, no connection of its own)
//     to the previous holder, alive and still holding it, and to every
//     member that lingers on the VIP (step 2 of an earlier handoff), and
//     says so in its metadata (VIPMeta.Forwarding). New connections land
//     on it.
//  2. The old holder, seeing that, lingers: it takes the address off but
//     keeps taking the VIP's packets for the connections it has (l2
//     Linger: a local route, no ARP, the segments of connections it does
//     not have dropped), and says so (VIPMeta.Lingering). It is no longer
//     a holder for anyone: not in its metadata, not on the link. Its
//     connections keep working through the new holder until they end by
//     themselves: the apiserver ends a connection gracefully with a
//     GOAWAY when kube-apiserver's --goaway-chance picks it, and its
//     client then sends its next request on a new connection, to the new
//     holder, while its streams in flight finish on the old one; or the
//     client closes it. When no connection is left, the old holder stops
//     lingering.
//  3. At [connections] linger_max, at a shutdown or a restart in place, it
//     closes what is left each at an idle moment (conns.Table.DestroyIdle,
//     within quiesceMax), then the rest, and stops lingering. Its clients
//     reconnect to the holder.
//  4. The holder stops passing packets on to a member once that member no
//     longer holds nor lingers (ForwardGrace later: its last packets), or
//     at once when it is gone, and then resets the clients that member
//     had, as after an unplanned failover (takeovers, clients.go). A later
//     handoff chains: its new holder forwards to the old holder and to
//     every member still lingering, so a connection accepted three moves
//     ago still works.
//  5. A lingering member that becomes unhealthy closes its connections at
//     once (its apiserver is what they talk to); one elected again
//     announces the VIP and keeps them, they are its own again.
//
// A node that cannot do its part (an older release, IPv6, the previous
// holder's address not on the VIP's link, no nftables) hands off as
// before: the old holder closes its connections at once.

const (
	// quiesceMax bounds how long a lingering node that must end (linger_max,
	// a shutdown, a restart) waits for its connections' idle moments before
	// it closes the rest.
	quiesceMax = 5 * time.Second
	// quiescePoll is how often it looks at the connections not yet idle.
	quiescePoll = 5 * time.Millisecond
	// quiesceQuiet is how long a connection must have carried no data
	// either way to be closed (conns.IdleConfig.Quiet).
	quiesceQuiet = 40 * time.Millisecond
	// lingerPoll is how often a lingering node counts its connections.
	lingerPoll = time.Second
	// quiesceSlack is room for a lingering node's closing at idle moments
	// to report back after quiesceMax.
	quiesceSlack = 2 * time.Second
	// handoffMax bounds a restart in place's wait for a handoff under way
	// (restart.go): the old holder's end of a linger and the new holder's
	// forwarding grace, with room to spare.
	handoffMax = quiesceMax + quiesceSlack + 2*lifecycle.ForwardGrace + 5*time.Second
)

// linger is a VIP this node lingers on (step 2 above): its connections are
// counted, then closed at idle moments, in a goroutine.
type linger struct {
	started time.Time
	cancel  context.CancelFunc // called off: what is open stays open
	hurry   chan struct{}      // closed: close what is left now (step 3)
	hurried bool
	done    chan struct{} // closed when it ended; res and err then set
	res     conns.DestroyResult
	err     error
}

// finished reports whether l's goroutine has ended.
func (l *linger) finished() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// canQuiesce reports whether this node can end a handoff of v by
// lingering on it.
func (a *Agent) canQuiesce(v *vipState) bool {
	_, ok := v.ann.(Lingerer)
	return ok && v.cfg.Mode == config.ModeL2 && v.cfg.Announce != config.AnnounceAll &&
		a.st.cfg.Connections.Enabled() && a.clients != nil && a.clients.backend != nil
}

// startLinger releases v, whose successor holds it and forwards this
// node's connections here, by lingering on it (step 2). When the announcer
// fails, the handoff completes as without the chain.
func (a *Agent) startLinger(ctx context.Context, v *vipState, reason string) {
	la := v.ann.(Lingerer)
	actx, cancel := withTimeout(ctx)
	err := la.Linger(actx, v.cfg.Addr())
	cancel()
	if err != nil {
		a.log.Warn("linger on the VIP for the handoff; closing its connections at once instead", "vip", v.cfg.Name, "err", err)
		a.closeClients(v)
		a.release(ctx, v, "successor "+v.owner+" holds it")
		return
	}
	// What this node forwarded, its successor forwards now. Only once the
	// address has gone: until then a client whose ARP cache still names
	// this node sends it the segments of the connections it forwarded,
	// and without the rule its kernel resets them.
	a.stopForward(ctx, v, "this node hands the VIP off")
	lctx, lcancel := context.WithCancel(ctx)
	l := &linger{started: a.now(), cancel: lcancel, hurry: make(chan struct{}), done: make(chan struct{})}
	v.linger = l
	a.stopWatch(v)
	v.held, v.handoffStarted, v.drainStarted = false, time.Time{}, time.Time{}
	a.record(v, false)
	a.log.Info("released VIP, lingering: the successor forwards its connections here until they end", "vip", v.cfg.Name,
		"to", v.owner, "reason", reason, "linger_max", a.st.cfg.Connections.LingerMaxDuration())
	a.events.publish(&apipb.Event{Kind: "release", Vip: v.cfg.Name, Node: a.self, Reason: reason + "; lingering on its connections"})
	a.reconnectNodeWatch()
	f := conns.Filter{Addrs: []netip.Addr{v.cfg.Addr()}, Ports: a.st.cfg.Connections.PortList()}
	backend, max, now := a.clients.backend, a.st.cfg.Connections.LingerMaxDuration(), a.now
	a.goroutines.Go(func() {
		defer close(l.done)
		defer lcancel()
		defer a.wakeLoop()
		l.res, l.err = lingerOn(lctx, backend, f, l.hurry, max, now, time.After)
	})
}

// lingerOn is a lingering node's goroutine: it counts the connections f
// selects every lingerPoll until none is left, hurry is closed or max has
// passed on now's clock; then it closes what is left at idle moments,
// within quiesceMax. A ctx that ends calls it off: what is open stays
// open.
func lingerOn(ctx context.Context, b ConnsBackend, f conns.Filter, hurry <-chan struct{}, max time.Duration,
	now func() time.Time, after func(time.Duration) <-chan time.Time) (conns.DestroyResult, error) {
	deadline := now().Add(max)
	for now().Before(deadline) {
		set, err := b.List(f)
		if err == nil && set.Len() == 0 {
			return conns.DestroyResult{}, nil
		}
		select {
		case <-ctx.Done():
			return conns.DestroyResult{}, nil
		case <-hurry:
			deadline = now()
		case <-after(min(lingerPoll, max)):
		}
	}
	if ctx.Err() != nil {
		return conns.DestroyResult{}, nil
	}
	idle := conns.IdleConfig{Poll: quiescePoll, Quiet: quiesceQuiet, Until: now().Add(quiesceMax)}
	return b.DestroyIdle(ctx, f, idle)
}

// stepLinger moves v's lingering on at a pass: what lifecycle.StepLinger
// answers, done.
func (a *Agent) stepLinger(ctx context.Context, v *vipState, peers []lifecycle.Peer) {
	l := v.linger
	if l == nil {
		return
	}
	in := lifecycle.Linger{Self: a.self, View: peers, Finished: l.finished(), Hurried: l.hurried,
		Healthy: v.healthy && !v.down, Ending: a.st.shuttingDown || a.st.finishing}
	for _, e := range lifecycle.StepLinger(in) {
		switch e.Kind {
		case lifecycle.EndLinger:
			a.endLinger(ctx, v, e.Reason)
		case lifecycle.AbandonLinger:
			a.abandonLinger(ctx, v, e.Reason)
		case lifecycle.HurryLinger:
			l.hurried = true
			close(l.hurry)
			a.log.Info("lingering on the VIP: closing what is left at idle moments", "vip", v.cfg.Name)
		}
	}
}

// endLinger ends v's lingering (after its goroutine): the announcer stops
// taking the VIP's packets, and what the closing did is reported.
func (a *Agent) endLinger(ctx context.Context, v *vipState, why string) {
	l := v.takeLinger()
	if l == nil {
		return
	}
	if la, ok := v.ann.(Lingerer); ok && !v.held {
		actx, cancel := withTimeout(ctx)
		if err := la.StopLinger(actx, v.cfg.Addr()); err != nil {
			a.log.Warn("stop lingering on the VIP", "vip", v.cfg.Name, "err", err)
		}
		cancel()
		// This host's own connections to the VIP, served here while it
		// lingered (the local route), cannot go on without it.
		a.closeOwnConnections(v, conns.Loopback)
	}
	closed := l.res.Idle + l.res.Busy
	a.metrics.clientsClosed.WithLabelValues(v.cfg.Name).Add(float64(closed))
	if l.err != nil {
		a.log.Warn("close the VIP's client connections at idle moments", "vip", v.cfg.Name, "closed", closed, "err", l.err)
	}
	a.log.Info("stopped lingering on the VIP", "vip", v.cfg.Name, "reason", why, "took", a.now().Sub(l.started).Round(time.Millisecond),
		"idle", l.res.Idle, "busy", l.res.Busy)
	if closed > 0 {
		a.events.publish(&apipb.Event{Kind: "clients", Vip: v.cfg.Name, Node: a.self, To: v.owner,
			Message: fmt.Sprintf("closed %d client connections for the holder at idle moments (%d still busy when time was up)", closed, l.res.Busy)})
	}
}

// abandonLinger ends v's lingering at once, if it lingers: what is left is
// closed first (a shutdown's deadline, a reload).
func (a *Agent) abandonLinger(ctx context.Context, v *vipState, why string) {
	l := v.linger
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
	a.closeClients(v)
	a.endLinger(ctx, v, why)
}

// callOffLinger ends v's lingering before this node announces v again:
// its connections stay open, they are its own again.
func (a *Agent) callOffLinger(v *vipState) {
	if v.takeLinger() == nil {
		return
	}
	a.log.Info("lingering called off: this node holds the VIP again, with its connections", "vip", v.cfg.Name)
}

// takeLinger ends v's lingering goroutine, if it lingers, and returns
// what it was (nil if it did not linger).
func (v *vipState) takeLinger() *linger {
	l := v.linger
	if l == nil {
		return nil
	}
	v.linger = nil
	l.cancel()
	<-l.done
	return l
}

// canForward reports whether this node can forward the previous holders'
// connections on v to them when it claims v.
func (a *Agent) canForward(v *vipState) bool {
	_, ok := v.ann.(Forwarder)
	return ok && v.cfg.Mode == config.ModeL2 && v.cfg.Announce != config.AnnounceAll && a.st.cfg.Connections.Enabled()
}

// chainInput is the chain's steps' input for v at this pass.
func (a *Agent) chainInput(v *vipState, peers []lifecycle.Peer) lifecycle.Chain {
	return lifecycle.Chain{Now: a.now(), Self: a.self, LastHolder: v.lastHolder, View: peers, Held: v.held,
		CanForward: a.canForward(v), CanReset: a.canReset(v)}
}

// startForward makes this node, which is about to claim v, forward the
// connections of the previous holders to them (lifecycle.StartForward):
// the previous holder then lingers instead of closing them at once.
func (a *Agent) startForward(ctx context.Context, v *vipState, peers []lifecycle.Peer) {
	targets, unknown := lifecycle.StartForward(v.forward, a.chainInput(v, peers))
	a.logNoAddress(v, unknown)
	if len(targets) == 0 {
		return
	}
	f := &lifecycle.Forward{Since: a.now(), Targets: targets, Gone: map[string]time.Time{}}
	if err := a.installForward(ctx, v, f); err != nil {
		a.log.Info("not forwarding the previous holders' connections: they close them at once", "vip", v.cfg.Name, "to", slices.Sorted(maps.Keys(targets)), "err", err)
		return
	}
	v.forward = f
	a.log.Info("forwarding the previous holders' connections to them while they serve them", "vip", v.cfg.Name, "to", slices.Sorted(maps.Keys(targets)))
}

// logNoAddress logs the members not forwarded to for want of an address.
func (a *Agent) logNoAddress(v *vipState, unknown []lifecycle.Effect) {
	for _, e := range unknown {
		a.log.Info("not forwarding a member's connections: its address is not known", "vip", v.cfg.Name, "member", e.Member)
	}
}

// installForward sets v's forwarding to f's targets.
func (a *Agent) installForward(ctx context.Context, v *vipState, f *lifecycle.Forward) error {
	to := make([]netip.Addr, 0, len(f.Targets))
	for _, name := range slices.Sorted(maps.Keys(f.Targets)) {
		to = append(to, f.Targets[name])
	}
	actx, cancel := withTimeout(ctx)
	defer cancel()
	return v.ann.(Forwarder).Forward(actx, v.cfg.Addr(), a.st.cfg.Connections.PortList(), to...)
}

// stepForward moves v's forwarding on at a pass (lifecycle.Forward.Step)
// and does what it answers: a member dropped has its clients reset (a
// takeover of whatever it still listed), the forwarding is installed
// again when its targets changed, and removed when none is left or this
// node no longer holds v.
func (a *Agent) stepForward(ctx context.Context, v *vipState, peers []lifecycle.Peer) {
	f := v.forward
	if f == nil {
		return
	}
	for _, e := range f.Step(a.chainInput(v, peers)) {
		switch e.Kind {
		case lifecycle.DropTarget:
			if e.Lost {
				a.log.Info("stopped forwarding a member's connections: it is gone; resetting its clients", "vip", v.cfg.Name, "member", e.Member)
			}
		case lifecycle.TakeOver:
			a.takeOverFrom(v, e.Member)
		case lifecycle.NoAddress:
			a.logNoAddress(v, []lifecycle.Effect{e})
		case lifecycle.AddTarget:
			a.log.Info("forwarding the connections of a member that lingers on the VIP", "vip", v.cfg.Name, "member", e.Member)
		case lifecycle.StopForward:
			a.stopForward(ctx, v, e.Reason)
		case lifecycle.InstallForward:
			if err := a.installForward(ctx, v, f); err != nil {
				a.log.Warn("forward to the members still lingering", "vip", v.cfg.Name, "err", err)
			}
		}
	}
}

// stopForward removes v's forwarding.
func (a *Agent) stopForward(ctx context.Context, v *vipState, why string) {
	if v.forward == nil {
		return
	}
	to := slices.Sorted(maps.Keys(v.forward.Targets))
	v.forward = nil
	actx, cancel := withTimeout(ctx)
	defer cancel()
	if err := v.ann.(Forwarder).StopForward(actx, v.cfg.Addr()); err != nil {
		a.log.Warn("stop forwarding the previous holders' connections", "vip", v.cfg.Name, "to", to, "err", err)
		return
	}
	a.log.Info("stopped forwarding the previous holders' connections", "vip", v.cfg.Name, "to", to, "reason", why)
}
