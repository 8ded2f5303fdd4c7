package agent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
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
// write again by itself.
//
// With it (both holders' announcers able, [connections] reset on):
//
//  1. The new holder claims the VIP and, since the old holder is alive and
//     still holds it, passes the packets of connections it does not know
//     (no SYN, no connection of its own) on to the old holder, and says so
//     in its metadata (VIPMeta.Forwarding). New connections land on it.
//  2. The old holder, seeing that, quiesces the VIP: it keeps the address
//     but stops answering ARP for it and stops its gratuitous ARPs, so
//     clients keep sending to the new holder; its connections keep working
//     through the new holder. It closes them each at an idle moment (the
//     answer to the last request has left: conns.Table.DestroyIdle), so
//     each client's next request opens a new connection, to the new
//     holder. After quiesceMax it closes what is left.
//  3. Then it releases the VIP (its metadata says so), and the new holder
//     stops forwarding forwardGrace later.
//
// A node that cannot do its part (an older release, IPv6, the previous
// holder's address not on the VIP's link, no nftables) hands off as
// before: the old holder closes its connections at once.

const (
	// quiesceMax bounds how long a quiescing holder waits for its
	// connections' idle moments before it closes the rest.
	quiesceMax = 5 * time.Second
	// quiescePoll is how often it looks at the connections not yet idle.
	quiescePoll = 5 * time.Millisecond
	// quiesceQuiet is how long a connection must have carried no data
	// either way to be closed (conns.IdleConfig.Quiet): longer than an
	// apiserver takes to answer a request after it last sent something
	// else on the same HTTP/2 connection (a watch event), shorter than
	// the pauses between a busy client's requests (a kubelet-like client
	// writing every 100 ms).
	quiesceQuiet = 40 * time.Millisecond
	// forwardGrace is how long the new holder keeps forwarding after the
	// previous holder released (its last packets, and its clients' answers
	// to its resets, still on their way).
	forwardGrace = 2 * time.Second
	// forwardMax bounds forwarding whatever the previous holder says.
	forwardMax = quiesceMax + quiesceSlack + 2*forwardGrace + 5*time.Second
)

// forward is a VIP this node forwards the previous holder's connections
// for.
type forward struct {
	to       string // the previous holder
	since    time.Time
	released time.Time // when the previous holder was first seen not holding
}

// quiesce is a VIP this node quiesces: its connections closing, at idle
// moments, in a goroutine.
type quiesce struct {
	started time.Time
	cancel  context.CancelFunc
	done    chan struct{} // closed when the closing ended; res and err then set
	res     conns.DestroyResult
	err     error
}

// finished reports whether q's closing has ended.
func (q *quiesce) finished() bool {
	select {
	case <-q.done:
		return true
	default:
		return false
	}
}

// canQuiesce reports whether this node can end a handoff of v by
// quiescing it.
func (a *Agent) canQuiesce(v *vipState) bool {
	_, ok := v.ann.(Quiescer)
	return ok && v.cfg.Mode == config.ModeL2 && v.cfg.Announce != config.AnnounceAll &&
		a.st.cfg.Connections.Enabled() && a.clients != nil && a.clients.backend != nil
}

// startQuiesce quiesces v (actQuiesce) and starts closing its connections.
// When the announcer fails, the handoff completes as without the chain.
func (a *Agent) startQuiesce(ctx context.Context, v *vipState, reason string) {
	qa := v.ann.(Quiescer)
	actx, cancel := withTimeout(ctx)
	err := qa.Quiesce(actx, v.cfg.Addr())
	cancel()
	if err != nil {
		a.log.Warn("quiesce VIP for the handoff; closing its connections at once instead", "vip", v.cfg.Name, "err", err)
		a.closeClients(v)
		a.release(ctx, v, "successor "+v.owner+" holds it")
		return
	}
	// Cancelling cctx calls the closing off (what is busy stays open);
	// at quiesceMax it closes what is still busy itself.
	cctx, cancel := context.WithCancel(ctx)
	q := &quiesce{started: a.now(), cancel: cancel, done: make(chan struct{})}
	idle := conns.IdleConfig{Poll: quiescePoll, Quiet: quiesceQuiet, Until: q.started.Add(quiesceMax)}
	v.quiesce = q
	a.log.Info("quiescing VIP: the successor forwards its connections here; closing them at idle moments", "vip", v.cfg.Name, "to", v.owner, "reason", reason)
	f := conns.Filter{Addrs: []netip.Addr{v.cfg.Addr()}, Ports: a.st.cfg.Connections.PortList()}
	backend := a.clients.backend
	a.goroutines.Go(func() {
		defer close(q.done)
		defer cancel()
		q.res, q.err = backend.DestroyIdle(cctx, f, idle)
		a.wakeLoop()
	})
}

// endQuiesce ends v's quiesce: the closing stops, and the connections
// still busy stay open (the caller closes them, or keeps them when the
// handoff is called off). It reports what the closing did.
func (a *Agent) endQuiesce(v *vipState) {
	q := v.quiesce
	if q == nil {
		return
	}
	v.quiesce = nil
	q.cancel()
	<-q.done
	closed := q.res.Idle + q.res.Busy
	a.metrics.clientsClosed.WithLabelValues(v.cfg.Name).Add(float64(closed))
	if q.err != nil {
		a.log.Warn("close the VIP's client connections at idle moments", "vip", v.cfg.Name, "closed", closed, "err", q.err)
	}
	if closed > 0 {
		a.log.Info("closed the VIP's client connections at idle moments: they reconnect to the new holder", "vip", v.cfg.Name,
			"to", v.owner, "idle", q.res.Idle, "busy", q.res.Busy, "left", q.res.Left, "took", a.now().Sub(q.started).Round(time.Millisecond))
		a.events.publish(&apipb.Event{Kind: "clients", Vip: v.cfg.Name, Node: a.self, To: v.owner,
			Message: fmt.Sprintf("closed %d client connections for the new holder at idle moments (%d still busy when time was up)", closed, q.res.Busy)})
	}
}

// abortQuiesce calls a quiesce off: this node keeps the VIP after all,
// and the connections not closed yet with it. Announcing it again ends
// the quiesce (ARP answered, re-announced). It reports whether there was
// a quiesce to call off.
func (a *Agent) abortQuiesce(ctx context.Context, v *vipState) bool {
	if v.quiesce == nil {
		return false
	}
	a.endQuiesce(v)
	a.log.Info("handoff called off while quiescing: announcing the VIP again, keeping its connections", "vip", v.cfg.Name)
	actx, cancel := withTimeout(ctx)
	defer cancel()
	if err := v.ann.Announce(actx, v.cfg.Addr()); err != nil {
		a.log.Warn("announce VIP again after a quiesce", "vip", v.cfg.Name, "err", err)
	}
	return true
}

// startForward makes this node, which is about to claim v (or has called
// off its quiesce of v and won it back), forward the previous holder's
// connections to it when that holder is alive and still holds v (a
// planned handoff, make-before-break): the previous holder then quiesces
// instead of closing them at once. addrs are the members' membership
// addresses (memberAddrs).
func (a *Agent) startForward(ctx context.Context, v *vipState, view []Member, addrs map[string]netip.AddrPort) {
	fw, ok := v.ann.(Forwarder)
	if !ok || v.cfg.Mode != config.ModeL2 || v.cfg.Announce == config.AnnounceAll || !a.st.cfg.Connections.Enabled() ||
		v.lastHolder == "" || v.lastHolder == a.self || v.forward != nil {
		return
	}
	prev, found := memberOf(view, v.lastHolder)
	if !found || prev.State != StateAlive || !prev.Meta.VIP(config.VIPKey(v.cfg.Name)).Held {
		return
	}
	ap, ok := addrs[v.lastHolder]
	if !ok {
		a.log.Info("not forwarding the previous holder's connections: its address is not known", "vip", v.cfg.Name, "from", v.lastHolder)
		return
	}
	to := ap.Addr().Unmap()
	actx, cancel := withTimeout(ctx)
	defer cancel()
	if err := fw.Forward(actx, v.cfg.Addr(), a.st.cfg.Connections.PortList(), to); err != nil {
		a.log.Info("not forwarding the previous holder's connections: it closes them at once", "vip", v.cfg.Name, "from", v.lastHolder, "err", err)
		return
	}
	v.forward = &forward{to: v.lastHolder, since: a.now()}
	a.log.Info("forwarding the previous holder's connections to it while it closes them", "vip", v.cfg.Name, "from", v.lastHolder, "address", to)
}

// stepForward stops forwarding v's previous holder's connections when it
// is over: this node no longer holds v, the previous holder released it
// forwardGrace ago, it is gone, or forwardMax has passed.
func (a *Agent) stepForward(ctx context.Context, v *vipState, view []Member) {
	f := v.forward
	if f == nil {
		return
	}
	now := a.now()
	prev, found := memberOf(view, f.to)
	holding := found && (prev.State == StateAlive || prev.State == StateSuspect) && prev.Meta.VIP(config.VIPKey(v.cfg.Name)).Held
	if !holding && f.released.IsZero() {
		f.released = now
	}
	why := ""
	switch {
	case !v.held:
		why = "this node no longer holds the VIP"
	case !found || prev.State == StateDead || prev.State == StateLeft:
		why = "the previous holder is gone"
	case !f.released.IsZero() && now.Sub(f.released) >= forwardGrace:
		why = "the previous holder released the VIP"
	case now.Sub(f.since) >= forwardMax:
		why = "forwarded for the longest a handoff takes"
	default:
		return
	}
	a.stopForward(ctx, v, why)
}

// stopForward removes v's forwarding.
func (a *Agent) stopForward(ctx context.Context, v *vipState, why string) {
	if v.forward == nil {
		return
	}
	from := v.forward.to
	v.forward = nil
	actx, cancel := withTimeout(ctx)
	defer cancel()
	if err := v.ann.(Forwarder).StopForward(actx, v.cfg.Addr()); err != nil {
		a.log.Warn("stop forwarding the previous holder's connections", "vip", v.cfg.Name, "from", from, "err", err)
		return
	}
	a.log.Info("stopped forwarding the previous holder's connections", "vip", v.cfg.Name, "from", from, "reason", why)
}

// memberOf returns the member named name in view.
func memberOf(view []Member, name string) (Member, bool) {
	for _, m := range view {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}
