package agent

import (
	"context"
	"net"
	"time"

	"github.com/vipd/vipd/agent/apipb"
)

// startWatch starts duplicate-owner detection for a VIP this node now
// holds, when its announcer supports it. The watcher ends when the VIP is
// released (stopWatch) or when ctx (the agent's run) ends.
func (a *Agent) startWatch(ctx context.Context, v *vipState) {
	w, ok := v.ann.(ConflictWatcher)
	if !ok || v.stopWatch != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	v.stopWatch = cancel
	name, addr := v.cfg.Name, v.cfg.Addr()
	a.goroutines.Go(func() {
		// The watcher's socket dies with its link; start it again (with a
		// pause) for as long as the VIP is held.
		for ctx.Err() == nil {
			err := w.WatchConflicts(ctx, addr, func(mac net.HardwareAddr) {
				select {
				case a.conflicts <- conflict{vip: name, mac: mac.String()}:
				default:
				}
			})
			if ctx.Err() != nil {
				return
			}
			a.log.Debug("duplicate-owner detection interrupted; restarting", "vip", name, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
}

func (a *Agent) stopWatch(v *vipState) {
	if v.stopWatch != nil {
		v.stopWatch()
		v.stopWatch = nil
	}
}

// onConflict handles another MAC answering for a VIP this node holds. When
// the other host is a vipd node, its metadata shows the claim and the
// election resolves it (the highest ranked holder keeps the VIP). While this
// node is still the elected owner it re-asserts the VIP (a new gratuitous
// ARP / NA burst, at most once a second) so clients point back at it.
func (a *Agent) onConflict(ctx context.Context, c conflict) {
	v := a.st.vips[c.vip]
	if v == nil || !v.held {
		return
	}
	if v.owner != a.self {
		// This node is handing the VIP off (make-before-break) or lost
		// a contest: the new owner's announcements are expected.
		a.log.Debug("VIP announced by its new owner while handing off", "vip", c.vip, "mac", c.mac, "owner", v.owner)
		return
	}
	a.metrics.conflicts.WithLabelValues(c.vip).Inc()
	a.log.Warn("duplicate owner: another host answers for a held VIP", "vip", c.vip, "mac", c.mac, "owner", v.owner)
	a.events.publish(&apipb.Event{Kind: "conflict", Vip: c.vip, Node: a.self, Message: "another host answers for the VIP from MAC " + c.mac})
	now := a.now()
	if now.Sub(v.lastReassert) >= time.Second {
		v.lastReassert = now
		actx, cancel := withTimeout(ctx)
		defer cancel()
		if err := v.ann.Announce(actx, v.cfg.Addr()); err != nil {
			a.log.Warn("re-assert VIP", "vip", c.vip, "err", err)
		}
	}
}
