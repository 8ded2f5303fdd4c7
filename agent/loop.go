package agent

import (
	"context"
	"time"
)

// loop is the one goroutine that owns the agent's state (a.st). Every event
// is followed by a reconcile pass; without events a pass runs every Tick
// while something is time-driven and every IdleTick otherwise. It returns
// when ctx ends. Work it starts (announcer calls, health checks) runs under
// work, which outlives ctx: the shutdown handoff still needs it.
func (a *Agent) loop(ctx, work context.Context) {
	t := time.NewTimer(a.opts.Tick)
	defer t.Stop()
	a.reconcile(work)
	a.markReady()
	for {
		now := a.now()
		t.Reset(a.grid.After(now, a.nextTick()).Sub(now))
		var req *loopRequest
		select {
		case <-ctx.Done():
			return
		case <-a.members.Changed():
		case <-t.C:
		case r := <-a.health:
			a.onHealth(r)
		case cf := <-a.conflicts:
			a.onConflict(work, cf)
		case <-a.wake:
			a.st.verifyNow = true
		case <-a.nodeCh:
			a.onNodeReport()
		case req = <-a.reqs:
			req.f()
		case <-a.reloadCh:
			a.reload(work)
		}
		a.reconcile(work)
		if req != nil {
			// After the pass: a caller that changed something (withdraw,
			// restore) then reads a status that shows it.
			close(req.done)
		}
	}
}

// nextTick is how long the loop may sleep when no event comes: short while
// a timer-driven step is pending, IdleTick otherwise (which keeps an idle
// agent's CPU use low and still pings the watchdog). The loop wakes on the
// grid's next beat of that period, with the other periodic timers.
func (a *Agent) nextTick() time.Duration {
	if len(a.st.waiters) > 0 || a.st.shuttingDown {
		return a.opts.Tick
	}
	for _, v := range a.st.vips {
		if !v.handoffStarted.IsZero() || !v.drainStarted.IsZero() || !v.retryAt.IsZero() || v.settling || v.waiting || v.forward != nil || v.adopted {
			return a.opts.Tick
		}
	}
	return max(a.opts.IdleTick, a.opts.Tick)
}

// loopRequest is a closure to run on the loop goroutine.
type loopRequest struct {
	f    func()
	done chan struct{} // closed after f and the pass that follows it
}

// do runs f on the loop goroutine and waits until it and the reconcile pass
// after it have run.
func (a *Agent) do(ctx context.Context, f func()) error {
	req := &loopRequest{f: f, done: make(chan struct{})}
	select {
	case a.reqs <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// announceTimeout bounds one announcer call made by the loop: a wedged
// netlink socket or BGP server must not stop the loop (and its watchdog
// pings) for longer.
const announceTimeout = 5 * time.Second

// withTimeout is ctx bounded by announceTimeout.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, announceTimeout)
}
