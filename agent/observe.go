package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
)

// observeLinks reads the link state of every L2 VIP's interface (once per
// interface per pass) and records changes. A link that comes back makes
// this node exchange state with every known peer at once: while it was
// down it may have missed who took its VIPs over.
func (a *Agent) observeLinks(names []string) {
	links := map[string]bool{} // interface -> up
	for _, name := range names {
		v := a.st.vips[name]
		down := false
		if v.cfg.Mode == config.ModeL2 {
			up, seen := links[v.cfg.Interface]
			if !seen {
				up = a.opts.LinkUp(v.cfg.Interface)
				links[v.cfg.Interface] = up
			}
			down = !up
		}
		if down == v.down {
			continue
		}
		if !down {
			a.rejoinAll()
		}
		v.down = down
		a.log.Warn("VIP interface state", "vip", name, "interface", v.cfg.Interface, "down", down)
		a.events.publish(&apipb.Event{Kind: "health", Vip: name, Node: a.self, Message: fmt.Sprintf("interface %s down=%v", v.cfg.Interface, down)})
	}
}

// watchLinks wakes the loop whenever an L2 VIP's interface changes, so a
// link going down releases the VIP at once rather than at the next tick. A
// failed subscription is started again after a pause; the loop's ticks read
// the link state meanwhile.
func (a *Agent) watchLinks(ctx context.Context) {
	for {
		err := a.opts.LinkEvents(ctx, func(iface string) {
			if m := a.l2Ifaces.Load(); m == nil || !(*m)[iface] {
				return
			}
			a.wakeLoop()
		})
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("watching interface changes; retrying in 1s", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		a.wakeLoop() // changes may have been missed
	}
}

// wakeLoop makes the loop run a pass now.
func (a *Agent) wakeLoop() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// verifyEvery is how often a held VIP is read back from the world when no
// event says it changed.
const verifyEvery = time.Second

// verifyHeld reads back every VIP this node holds (once per beat of
// verifyEvery on the grid, and at once after an interface event) and repairs drift: an
// address removed behind vipd's back (ip addr del, a network manager, ip
// addr flush) or a route gone from the speaker is announced again, with a
// new gratuitous ARP / NA burst. A VIP that cannot be put back (the
// interface is gone, the kernel refuses) is released and this node marks
// itself unable to carry it until its retry, so a peer takes over.
func (a *Agent) verifyHeld(ctx context.Context, names []string, now time.Time, event bool) {
	if !event && now.Before(a.grid.After(a.st.lastVerify, verifyEvery)) {
		return
	}
	a.st.lastVerify = now
	for _, name := range names {
		v := a.st.vips[name]
		ver, ok := v.ann.(Verifier)
		if !ok || !v.held || v.down || v.adopted {
			// An adopted VIP is not put back: dropAdopted gives it up
			// when its address is gone.
			continue
		}
		vctx, cancel := withTimeout(ctx)
		present, err := ver.Verify(vctx, v.cfg.Addr())
		cancel()
		if err != nil {
			a.log.Warn("verify VIP", "vip", name, "err", err)
			continue
		}
		if present {
			continue
		}
		a.metrics.repairs.WithLabelValues(name).Inc()
		a.log.Warn("held VIP missing from the network; announcing it again", "vip", name, "address", v.cfg.Addr(), "interface", v.cfg.Interface)
		a.events.publish(&apipb.Event{Kind: "drift", Vip: name, Node: a.self, Message: "VIP address or route was removed behind vipd's back; announced again"})
		actx, cancel := withTimeout(ctx)
		err = v.ann.Announce(actx, v.cfg.Addr())
		cancel()
		if err == nil {
			// Announce advertises again: a handoff under way silences
			// it again in this pass.
			v.silenced = false
			continue
		}
		a.metrics.announceErrors.WithLabelValues(name, "repair").Inc()
		a.log.Error("cannot put the VIP back; releasing it so a peer takes over", "vip", name, "err", err)
		a.release(ctx, v, "cannot announce it again: "+err.Error())
		v.fail(now)
	}
}
