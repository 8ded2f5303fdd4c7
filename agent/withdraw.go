package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lifecycle"
)

// withdrawWaiter is a `vipctl withdraw --wait` caller waiting for its VIPs
// to be held elsewhere.
type withdrawWaiter struct {
	vips     []string
	force    bool // done once released here, even if no node takes over
	timeout  time.Duration
	deadline time.Time
	reply    chan error
}

// withdrawRequest is a withdraw call's options.
type withdrawRequest struct {
	wait, force, noPersist bool
	timeout                time.Duration
}

// withdraw sets the withdraw flag (on the loop goroutine). The flag is saved
// first: a withdraw that would not survive a restart is refused unless
// noPersist. With wait, it returns a waiter that is answered when every VIP
// this node held is held elsewhere, or at the deadline.
func (a *Agent) withdraw(req withdrawRequest) (*withdrawWaiter, *apipb.WithdrawResponse, error) {
	view := a.view(a.members.Members())
	var others []Member
	for _, m := range view {
		if m.Name != a.self {
			others = append(others, m)
		}
	}
	var held, stranded []string
	for name, v := range a.st.vips {
		if !v.held {
			continue
		}
		held = append(held, name)
		if len(Eligible(others, a.electionVIP(v))) == 0 {
			stranded = append(stranded, name)
		}
	}
	sort.Strings(held)
	sort.Strings(stranded)
	if len(stranded) > 0 && !req.force {
		return nil, nil, status.Errorf(codes.FailedPrecondition,
			"refusing to withdraw: no other eligible node for %s; use --force to drop the VIP anyway", a.reasons(stranded))
	}
	resp := &apipb.WithdrawResponse{Message: "withdrawn", Persisted: true}
	if err := saveWithdraw(a.st.cfg.StateDir, true); err != nil {
		if !req.noPersist {
			return nil, nil, status.Errorf(codes.Aborted,
				"withdraw flag not saved, so the node would be eligible again after a restart: %v; nothing was changed (fix state_dir, or pass --no-persist to withdraw until vipd restarts)", err)
		}
		a.log.Warn("withdraw flag not persisted (--no-persist); the node is withdrawn until vipd restarts", "err", err)
		resp.Message, resp.Persisted = "withdrawn until vipd restarts (the flag could not be saved: "+err.Error()+")", false
	}
	if !a.st.withdrawn {
		a.log.Info("withdrawn by vipctl", "held", held, "persisted", resp.Persisted)
		a.events.publish(&apipb.Event{Kind: "withdraw", Node: a.self, Message: "withdrawn"})
	}
	if !a.st.withdrawn {
		a.st.withdrawnSince = a.now()
	}
	a.st.withdrawn = true
	if !req.wait {
		return nil, resp, nil
	}
	// The loop's next pass (right after this request) starts the handoff
	// and answers the waiter once every VIP is held elsewhere.
	w := &withdrawWaiter{vips: held, force: req.force, timeout: req.timeout, deadline: a.now().Add(req.timeout), reply: make(chan error, 1)}
	a.st.waiters = append(a.st.waiters, w)
	return w, resp, nil
}

// reasons says, for each of vips, why the other nodes cannot take it:
// "apiserver: cp-2: unhealthy since 12:03:10; cp-3: withdrawn".
func (a *Agent) reasons(vips []string) string {
	s := a.snapshot.Load()
	if s == nil {
		return strings.Join(vips, ", ") + ": membership not known yet"
	}
	var parts []string
	for _, v := range vips {
		parts = append(parts, v+": "+s.reasons(v))
	}
	return strings.Join(parts, "; ")
}

// restore clears the withdraw flag. Nothing to remove is not an error (a
// read-only state_dir without a flag restores fine).
func (a *Agent) restore() error {
	if err := saveWithdraw(a.st.cfg.StateDir, false); err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	if a.st.withdrawn {
		a.log.Info("restored by vipctl")
		a.events.publish(&apipb.Event{Kind: "withdraw", Node: a.self, Message: "restored"})
	}
	a.st.withdrawn, a.st.withdrawnSince = false, time.Time{}
	return nil
}

// checkWaiters answers withdraw --wait callers whose VIPs are now held
// elsewhere, or whose deadline passed.
func (a *Agent) checkWaiters(view []Member, now time.Time) {
	keep := a.st.waiters[:0]
	for _, w := range a.st.waiters {
		var pending []string
		for _, name := range w.vips {
			v := a.st.vips[name]
			if v == nil {
				continue
			}
			if v.held || (v.cfg.Announce != config.AnnounceAll && !w.force && !lifecycle.HeldElsewhere(a.self, peersOf(view, name, nil))) {
				pending = append(pending, name)
			}
		}
		switch {
		case len(pending) == 0:
			w.reply <- nil
		case !now.Before(w.deadline):
			w.reply <- status.Errorf(codes.DeadlineExceeded, "timed out after %s: %s not yet held by another node: %s",
				w.timeout, strings.Join(pending, ", "), a.reasons(pending))
		default:
			keep = append(keep, w)
		}
	}
	a.st.waiters = keep
}

// forget drops a member that is not alive from the table and the cache.
// Forgetting this node itself is decommissioning it: it tells the others it
// is being removed for good, and they forget it once it has stopped.
func (a *Agent) forget(name string) error {
	if name == a.self {
		if !a.st.decommissioned {
			a.st.decommissioned = true
			a.log.Info("decommissioned: the others forget this node once it stops")
			a.events.publish(&apipb.Event{Kind: "membership", Node: a.self, Message: "decommissioned: removed for good once it stops"})
		}
		return nil
	}
	if name == "" {
		return status.Errorf(codes.InvalidArgument, "forget: name a node")
	}
	known := false
	for _, m := range a.members.Members() {
		if m.Name != name {
			continue
		}
		known = true
		if m.State == StateAlive || m.State == StateSuspect {
			return status.Errorf(codes.FailedPrecondition, "forget: %s is %s; stop it (or wait until it is dead) first", name, m.State)
		}
	}
	var next []CachedPeer
	for _, p := range a.cache.get() {
		if p.Name == name {
			known = true
			continue
		}
		next = append(next, p)
	}
	if !known {
		return status.Errorf(codes.NotFound, "forget: no member named %q", sanitize(name))
	}
	a.members.Forget(name)
	a.cache.set(next)
	if err := savePeerCache(a.st.cfg.StateDir, next); err != nil {
		a.log.Error("save peer cache (kept in memory)", "err", err)
	}
	a.log.Info("member forgotten", "member", name)
	a.events.publish(&apipb.Event{Kind: "membership", Node: name, Message: fmt.Sprintf("forgotten by %s", a.self)})
	return nil
}
