package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/vipd/vipd/agent/apipb"
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
		if v.cfg.Mode == ModeL2 {
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
			a.rejoinEvery.Store(true)
			a.kickRejoin()
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
