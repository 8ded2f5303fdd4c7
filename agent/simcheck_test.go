package agent

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vipd/vipd/agent/lifecycle"
)

// The nemesis and the checkers of the cluster simulator (sim_test.go).

// simMoveWindow: a move of the VIP away from a holder needs a cause in the
// trace at most this long before it (a fault of the holder, or with
// preempt one of the node it moves to).
const simMoveWindow = 15 * time.Second

// simWorldWindow: the same for a fault of the world (a process, a host,
// the network), which moves the VIP within memberlist's failure detection
// and a settle or not at all.
const simWorldWindow = 10 * time.Second

// simCause is what a fault may explain: nothing (an end of a fault, or
// every apiserver unhealthy at once: the holder is no worse than any
// other node), a move away from its own host (its health, a withdraw, a
// pause or a slow host), or a move anywhere (a process or host stopping,
// the network: quorum and the lease depend on every node).
type simCause int

const (
	simNoCause simCause = iota
	simOwn
	simWorld
)

// fault records a fault in the trace; host -1 is every host.
func (s *sim) fault(host int, c simCause, format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	var h *simHost
	if host >= 0 {
		h = s.hosts[host]
	}
	s.logf(h, "NEMESIS %s", what)
	s.lastFault = s.now
	switch {
	case c == simWorld:
		s.worldFault = simFault{at: s.now, what: what}
	case c == simOwn:
		s.faultsOf[host] = append(s.faultsOf[host], simFault{at: s.now, what: what})
	}
}

// nemesis schedules the faults of [from, to).
func (s *sim) nemesis(from, to time.Duration) {
	n := len(s.hosts)
	// Some seeds are a storm, some have quiet stretches (in which a move
	// without a cause stands out).
	mean := []time.Duration{1500 * time.Millisecond, 4 * time.Second, 10 * time.Second}[s.rng.IntN(3)]
	s.logf(nil, "nemesis: a fault every %s on average", mean)
	for t := from + s.exp(mean); t < to; t += s.exp(mean) {
		late := to-t < 15*time.Second // only faults that end by themselves soon
		k := s.rng.IntN(15)
		h := s.rng.IntN(n)
		d := func(min, max time.Duration) time.Duration { return min + time.Duration(s.rng.Int64N(int64(max-min))) }
		switch k {
		case 0:
			s.at(t, func() {
				if p := s.hosts[h].proc; p != nil && !p.dead {
					s.fault(h, simWorld, "kill -9")
					s.crash(s.hosts[h], "nemesis")
				}
			})
		case 1:
			s.at(t, func() {
				s.fault(h, simWorld, "kill -9 at the next effect")
				s.hosts[h].killAtEffect = true
			})
		case 2:
			if late {
				continue
			}
			s.at(t, func() {
				if p := s.hosts[h].proc; p != nil && !p.dead && !p.shuttingDown && s.hosts[h].restarts == 0 {
					s.fault(h, simWorld, "systemctl restart")
					s.stop(s.hosts[h], true)
				}
			})
		case 3:
			if late {
				continue
			}
			off := d(time.Second, 5*time.Second)
			s.at(t, func() {
				if p := s.hosts[h].proc; p != nil && !p.dead && !p.shuttingDown && s.hosts[h].restarts == 0 {
					s.fault(h, simWorld, "systemctl stop (start again in %s)", off.Round(time.Millisecond))
					s.stop(s.hosts[h], false)
					s.restartLater(s.hosts[h], simHandoffTO+off, "systemctl start")
				}
			})
		case 4:
			off := d(time.Second, 6*time.Second)
			s.at(t, func() { s.powerOff(h, off) })
		case 5:
			s.at(t, func() { s.partition(d(500*time.Millisecond, 8*time.Second)) })
		case 6:
			s.at(t, func() { s.oneWay(h, s.rng.IntN(2) == 0, d(500*time.Millisecond, 6*time.Second)) })
		case 7:
			o := (h + 1 + s.rng.IntN(n-1)) % n
			s.at(t, func() { s.cutLink(h, o, d(300*time.Millisecond, 6*time.Second)) })
		case 8:
			s.at(t, func() { s.unhealthy(h, d(200*time.Millisecond, 5*time.Second)) })
		case 9:
			s.at(t, func() { s.allUnhealthy(d(500*time.Millisecond, 5*time.Second)) })
		case 10:
			s.at(t, func() { s.pause(h, d(100*time.Millisecond, 2*time.Second)) })
		case 11:
			s.at(t, func() { s.slowHost(h, d(5*time.Millisecond, 40*time.Millisecond), d(time.Second, 10*time.Second)) })
		case 12:
			s.at(t, func() { s.withdraw(h, d(time.Second, 8*time.Second)) })
		case 13:
			s.at(t, func() { s.lossy(0.05+0.25*s.rng.Float64(), d(time.Second, 5*time.Second)) })
		case 14:
			s.at(t, func() { s.healthFlaps(h, d(2*time.Second, 6*time.Second)) })
		}
	}
}

func (s *sim) exp(mean time.Duration) time.Duration {
	return time.Duration(s.rng.ExpFloat64()*float64(mean)) + time.Millisecond
}

func (s *sim) powerOff(i int, off time.Duration) {
	h := s.hosts[i]
	if !h.up {
		return
	}
	s.fault(i, simWorld, "power off for %s", off.Round(time.Millisecond))
	if p := h.proc; p != nil {
		p.dead = true
	}
	h.hasAddr, h.addrUntil, h.rec = false, 0, false
	h.lingerRoute, h.fwdTo = false, nil
	h.boot++ // its connections go with it
	h.up = false
	s.check()
	s.after(off, func() {
		if !h.up {
			h.up = true
			s.fault(i, simWorld, "power on")
			s.start(h, "boot")
		}
	})
}

func (s *sim) partition(dur time.Duration) {
	n := len(s.hosts)
	var a []int
	for i := range n {
		if s.rng.IntN(2) == 0 {
			a = append(a, i)
		}
	}
	if len(a) == 0 || len(a) == n {
		return
	}
	var names []string
	for _, i := range a {
		names = append(names, s.hosts[i].name)
	}
	for i := range n {
		if slices.Contains(a, i) {
			s.fault(i, simWorld, "partition {%s} | the rest for %s", strings.Join(names, " "), dur.Round(time.Millisecond))
		}
	}
	for i := range n {
		for j := range n {
			if slices.Contains(a, i) != slices.Contains(a, j) {
				s.blocked[i][j]++
			}
		}
	}
	s.after(dur, func() {
		for i := range n {
			for j := range n {
				if slices.Contains(a, i) != slices.Contains(a, j) {
					s.unblock(i, j)
				}
			}
		}
		s.fault(-1, simNoCause, "partition {%s} healed", strings.Join(names, " "))
	})
}

func (s *sim) oneWay(i int, in bool, dur time.Duration) {
	dir := "outgoing"
	if in {
		dir = "incoming"
	}
	s.fault(i, simWorld, "loses all its %s packets for %s", dir, dur.Round(time.Millisecond))
	set := func(on bool) {
		for j := range s.hosts {
			a, b := i, j
			if in {
				a, b = j, i
			}
			switch {
			case j == i:
			case on:
				s.blocked[a][b]++
			default:
				s.unblock(a, b)
			}
		}
	}
	set(true)
	s.after(dur, func() {
		set(false)
		s.fault(i, simNoCause, "%s packets flow again", dir)
	})
}

func (s *sim) cutLink(i, j int, dur time.Duration) {
	s.fault(i, simWorld, "link to %s cut (one way) for %s", s.hosts[j].name, dur.Round(time.Millisecond))
	s.blocked[i][j]++
	s.after(dur, func() {
		s.unblock(i, j)
		s.fault(i, simNoCause, "link to %s restored", s.hosts[j].name)
	})
}

// unblock ends one fault's cut of the path from a to b (heal may have
// ended them all already).
func (s *sim) unblock(a, b int) {
	s.blocked[a][b] = max(s.blocked[a][b]-1, 0)
}

// setHealth changes h's health; its vipd's checks see it after rise or
// fall (two checks 300 ms apart).
func (s *sim) setHealth(i int, ok bool) {
	h := s.hosts[i]
	h.healthy = ok
	s.after(300*time.Millisecond+time.Duration(s.rng.IntN(300))*time.Millisecond, func() {
		if p := h.proc; p != nil && !p.dead && p.healthy != h.healthy {
			p.healthy = h.healthy
			s.logf(h, "health check: healthy=%v", h.healthy)
			s.pass(p, "health")
		}
	})
}

func (s *sim) unhealthy(i int, dur time.Duration) {
	if !s.hosts[i].healthy {
		return
	}
	s.fault(i, simOwn, "apiserver unhealthy for %s", dur.Round(time.Millisecond))
	s.setHealth(i, false)
	s.after(dur, func() {
		s.fault(i, simNoCause, "apiserver healthy again")
		s.setHealth(i, true)
	})
}

func (s *sim) healthFlaps(i int, dur time.Duration) {
	s.fault(i, simOwn, "apiserver health flaps for %s", dur.Round(time.Millisecond))
	end := s.now + dur
	var flip func()
	flip = func() {
		if s.now >= end {
			s.setHealth(i, true)
			return
		}
		s.setHealth(i, !s.hosts[i].healthy)
		s.after(time.Duration(100+s.rng.IntN(700))*time.Millisecond, flip)
	}
	flip()
}

// allUnhealthy is etcd down: every apiserver unhealthy, then healthy
// again together. Not a cause for a move: the holder was no worse than
// any other node.
func (s *sim) allUnhealthy(dur time.Duration) {
	s.fault(-1, simNoCause, "every apiserver unhealthy for %s", dur.Round(time.Millisecond))
	for i := range s.hosts {
		s.setHealth(i, false)
	}
	s.after(dur, func() {
		s.fault(-1, simNoCause, "every apiserver healthy again")
		for i := range s.hosts {
			s.setHealth(i, true)
		}
	})
}

// pause stops a process that holds nothing (a pause of a holder longer
// than the lease's margin is outside its assumptions: doc.go).
func (s *sim) pause(i int, dur time.Duration) {
	h := s.hosts[i]
	if h.hasAddr || h.proc == nil || h.proc.dead || s.now < h.pausedUntil {
		return
	}
	s.fault(i, simOwn, "vipd paused for %s", dur.Round(time.Millisecond))
	h.pausedUntil = s.now + dur
}

func (s *sim) slowHost(i int, extra, dur time.Duration) {
	h := s.hosts[i]
	s.fault(i, simOwn, "announcer calls %s slower for %s", extra.Round(time.Millisecond), dur.Round(time.Millisecond))
	h.slow = extra
	s.after(dur, func() { h.slow = 0 })
}

func (s *sim) withdraw(i int, dur time.Duration) {
	h := s.hosts[i]
	if h.withdrawn {
		return
	}
	s.fault(i, simOwn, "vipctl withdraw for %s", dur.Round(time.Millisecond))
	h.withdrawn = true
	if p := h.proc; p != nil && !p.dead {
		s.pass(p, "withdraw")
	}
	s.after(dur, func() {
		s.fault(i, simNoCause, "vipctl restore")
		h.withdrawn = false
		if p := h.proc; p != nil && !p.dead {
			s.pass(p, "restore")
		}
	})
}

func (s *sim) lossy(p float64, dur time.Duration) {
	s.fault(-1, simWorld, "%.0f%% packet loss, 2%% duplicates for %s", p*100, dur.Round(time.Millisecond))
	s.loss, s.dup = p, 0.02
	s.after(dur, func() {
		s.loss, s.dup = 0, 0
		s.fault(-1, simNoCause, "packet loss over")
	})
}

// heal ends every fault: the run's quiet phase begins.
func (s *sim) heal() {
	s.fault(-1, simNoCause, "heal: every fault ends")
	for i := range s.hosts {
		for j := range s.hosts {
			s.blocked[i][j] = 0
		}
	}
	s.loss, s.dup = 0, 0
	for i, h := range s.hosts {
		h.killAtEffect, h.slow, h.pausedUntil = false, 0, 0
		if !h.healthy {
			s.setHealth(i, true)
		}
		if h.withdrawn {
			h.withdrawn = false
			if p := h.proc; p != nil && !p.dead {
				s.pass(p, "restore")
			}
		}
		if !h.up {
			h.up = true
			s.start(h, "boot")
		}
		if (h.proc == nil || h.proc.dead) && h.restarts == 0 {
			s.start(h, "heal")
		}
	}
	s.healed = s.now
}

// --- checkers ---

// announcers are the hosts that answer for the VIP unplanned: they have
// its address and their vipd is not handing it off make-before-break (a
// planned overlap: docs/design.md, "Handoff").
func (s *sim) announcers() (ann, all []int) {
	for i, h := range s.hosts {
		if !h.up || !s.hasAddrNow(h) {
			continue
		}
		all = append(all, i)
		// A process killed in the middle of a handoff left the address
		// silenced: cleanup removes it.
		if p := h.proc; p != nil && p.givingAway {
			continue
		}
		// A killed vipd's address is vipd cleanup's (ExecStopPost) to
		// remove, within simCleanup; a peer may claim meanwhile on a
		// refused probe (docs/design.md, "The lease").
		if p := h.proc; p != nil && p.killedAt >= 0 && s.now-p.killedAt <= simCleanup {
			continue
		}
		ann = append(ann, i)
	}
	return ann, all
}

// handedOff reports whether one of the hosts in all was handing the VIP
// off less than a settle ago: its successor's claim is that handoff's,
// though the holder has just called it off.
func (s *sim) handedOff(all []int) bool {
	for _, i := range all {
		if h := s.hosts[i]; h.gaveAway > 0 && s.now-h.gaveAway <= lifecycle.ClaimSettle {
			return true
		}
	}
	return false
}

func (s *sim) holders() string {
	_, all := s.announcers()
	if len(all) == 0 {
		return "none"
	}
	var names []string
	for _, i := range all {
		names = append(names, s.hosts[i].name)
	}
	return strings.Join(names, ", ")
}

// check runs the checkers on the world as it is now.
func (s *sim) check() {
	if s.ended {
		return
	}
	for _, h := range s.hosts {
		if h.hasAddr && h.addrUntil != 0 && s.now >= h.addrUntil {
			h.hasAddr, h.addrUntil = false, 0
			s.logf(h, "EFFECT address removed (its kernel lifetime ran out)")
		}
	}
	ann, all := s.announcers()
	switch {
	case len(all) < 2:
		s.overlap = -1
	case s.overlap < 0 && (len(ann) < 2 || s.handedOff(all)):
		// A planned overlap begins: a successor claims while the holder
		// hands the VIP off. It stays planned if the holder calls the
		// handoff off (its health returned): the contest that follows
		// ends it, make-before-break.
		s.overlap = s.now
	}
	if len(ann) >= 2 && s.overlap < 0 {
		s.violate("two holders: %s have the VIP's address and none of them hands it off", s.holders())
		return
	}
	if s.overlap >= 0 && s.now-s.overlap > simHandoffTO+time.Second {
		s.violate("a planned overlap (%s) outlasted handoff_timeout", s.holders())
		return
	}
	// Moves.
	if len(all) == 1 && all[0] != s.holder {
		y := all[0]
		if s.holder >= 0 {
			s.moves++
			if why := s.moveCause(s.holder, y); why == "" {
				s.violate("needless move: the VIP moved from %s to %s with no fault of %s in the last %s",
					s.hosts[s.holder].name, s.hosts[y].name, s.hosts[s.holder].name, simMoveWindow)
				return
			}
			if s.healed >= 0 && s.now-s.healed > s.o.Converge {
				s.violate("moved from %s to %s after converging", s.hosts[s.holder].name, s.hosts[y].name)
				return
			}
		}
		s.holder = y
	}
	// No holder.
	if len(all) == 0 {
		if s.noHolder < 0 {
			s.noHolder = s.now
		}
	} else {
		s.noHolder = -1
	}
	if s.stableMajority() {
		if s.stable < 0 {
			s.stable = s.now
		}
	} else {
		s.stable = -1
		s.unstable = s.now
	}
	if s.noHolder >= 0 && s.stable >= 0 {
		gap := s.now - max(s.noHolder, s.stable)
		s.maxNoHolder = max(s.maxNoHolder, gap)
		if gap > s.o.NoHolder {
			s.violate("no holder for %s while a majority with an eligible node is up and connected", gap.Round(time.Millisecond))
			return
		}
	}
	s.checkClients()
	if s.ended {
		return
	}
	// Convergence.
	if s.healed >= 0 && s.now-s.healed >= s.o.Converge && len(all) != 1 {
		s.violate("not converged %s after the last fault: holders %s", s.o.Converge, s.holders())
	}
}

// moveCause names the fault that explains a move from x to y ("": none).
func (s *sim) moveCause(x, y int) string {
	if p := s.hosts[x].proc; p == nil || p.dead || !s.hosts[x].up || s.hosts[x].withdrawn || !s.hosts[x].healthy {
		return "holder down, withdrawn or unhealthy now"
	}
	for _, f := range slices.Backward(s.faultsOf[x]) {
		if s.now-f.at <= simMoveWindow {
			return f.what
		}
		break
	}
	if px, py := s.hosts[x].proc, s.hosts[y].proc; px != nil && py != nil && !px.healthy && py.healthy {
		return "holder unhealthy, successor healthy"
	}
	if s.preempt && rank(simVIP, s.hosts[y].name) > rank(simVIP, s.hosts[x].name) {
		return "preempt: " + s.hosts[y].name + " ranks above " + s.hosts[x].name
	}
	if f := s.worldFault; f.what != "" && s.now-f.at <= simWorldWindow {
		return f.what
	}
	if s.unstable >= 0 && s.now-s.unstable <= simMoveWindow {
		return "no stable majority a moment ago"
	}
	if s.preempt {
		for _, f := range slices.Backward(s.faultsOf[y]) {
			if s.now-f.at <= simMoveWindow {
				return "preempt after " + f.what
			}
			break
		}
	}
	return ""
}

// stableMajority reports whether a majority of the hosts run vipd
// (not paused, not stopping), reach one another both ways over a network
// with little loss, and one of them can carry the VIP (healthy, not
// withdrawn): the VIP then must have a holder.
func (s *sim) stableMajority() bool {
	if s.loss > 0.05 {
		return false
	}
	n := len(s.hosts)
	ok := s.stableOK[:0]
	for i, h := range s.hosts {
		if p := h.proc; h.up && p != nil && !p.dead && !p.shuttingDown && s.now >= h.pausedUntil {
			ok = append(ok, i)
		}
	}
	s.stableOK = ok
	need := n/2 + 1
	if len(ok) < need {
		return false
	}
	// The key is all largestClique reads: which hosts, which of them
	// are withdrawn, which paths are cut.
	key := s.stableBuf[:0]
	for _, i := range ok {
		key = append(key, byte(i), simBool(s.hosts[i].withdrawn))
	}
	for i := range n {
		for j := range n {
			key = append(key, simBool(s.blocked[i][j] > 0))
		}
	}
	if s.stableValid && bytes.Equal(key, s.stableKey) {
		s.stableBuf = key
		return s.stableWas
	}
	s.stableBuf, s.stableKey, s.stableValid = s.stableKey, key, true
	s.stableWas = s.largestClique(ok, need)
	return s.stableWas
}

func simBool(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// largestClique reports whether at least need of the hosts ok reach one
// another both ways, one of them not withdrawn.
func (s *sim) largestClique(ok []int, need int) bool {
	// The largest set of mutually connected hosts (n <= 7: every subset).
	best := 0
	for mask := 1; mask < 1<<len(ok); mask++ {
		var set []int
		for b, i := range ok {
			if mask&(1<<b) != 0 {
				set = append(set, i)
			}
		}
		if len(set) < need || len(set) <= best {
			continue
		}
		conn, elig := true, false
		for _, i := range set {
			if !s.hosts[i].withdrawn { // healthy, or the bootstrap fallback
				elig = true
			}
			for _, j := range set {
				if i != j && s.blocked[i][j] > 0 {
					conn = false
				}
			}
		}
		if conn && elig {
			best = len(set)
		}
	}
	return best >= need
}
