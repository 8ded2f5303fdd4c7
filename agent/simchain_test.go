package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vipd/vipd/agent/lifecycle"
)

// The cluster simulator's second slice (docs/design.md, "The cluster
// simulator"): simulated TCP clients of the VIP, the daisy chain's
// forwarding (chain.go startForward, stepForward on agent/lifecycle),
// lingering (startLinger, lingerOn, stepLinger, endLinger, callOffLinger,
// abandonLinger), the client reset after an unplanned failover
// (clients.go: the takeovers, their pokes, closeClients) and a restart in
// place during a handoff (restart.go finishHandoffs), with their checkers.

const (
	simClients = 3
	// simLingerMax is [connections] linger_max here (short, so that runs
	// see it).
	simLingerMax = 6 * time.Second
	// simHangBound: the longest a client may wait for the answer to a
	// request its host took, once that host no longer serves it and
	// another holds the VIP that saw it holding, before a reset tells it.
	simHangBound = 15 * time.Second
	simRTOMin    = 200 * time.Millisecond
	simRTOMax    = 3200 * time.Millisecond
	// simClientTimeout: a client gives up on an unanswered request.
	simClientTimeout = 30 * time.Second
)

// simBug breaks the modelled shell the way a reverted fix would (the
// tests that show the checkers catch it).
type simBug int

const (
	simBugNone simBug = iota
	// simBugAnnounceFirst: the successor announces before it forwards
	// (189ad3c reverted).
	simBugAnnounceFirst
	// simBugTakeoverLastOnly: a takeover resets only the clients of the
	// last holder, not of every member seen holding (finding 5's fix
	// reverted).
	simBugTakeoverLastOnly
	// simBugCallOffCloses: calling a linger off while it closes at idle
	// moments destroys the busy connections (finding 7's fix reverted).
	simBugCallOffCloses
	// simBugRestartMidHandoff: a restart in place does not let a handoff
	// under way finish (finding 8's fix reverted).
	simBugRestartMidHandoff
	// simBugLingerForever: a lingering node ignores linger_max.
	simBugLingerForever
)

// simClient is a client of the VIP (a kubelet): one connection at a time,
// a request every 20-500 ms, a connection the apiserver ends gracefully
// (GOAWAY) after 3-15 s.
type simClient struct {
	idx  int
	name string
	arp  int // the host its ARP cache maps the VIP to (-1: none)
	conn *simConn
	gen  int // its timers (a new connection or a reset restarts them)
}

// simConn is one TCP connection to the VIP, in the kernel of the host
// that accepted it.
type simConn struct {
	id     int
	cl     *simClient
	host   int
	boot   int // the host's boot it lives in (a power-off ends it)
	open   bool
	listed bool // its host published it (a takeover can reset it)
	// busyUntil: a request is being answered until then; waiting: the
	// host took a request and could not answer it (its address went),
	// since waitSince.
	busyUntil time.Duration
	waiting   bool
	waitSince time.Duration
	rto       time.Duration
}

// simLinger is a lingering (chain.go's linger), its goroutine modelled
// by events of generation gen.
type simLinger struct {
	started  time.Time
	deadline time.Time // linger_max, or the hurry
	hurried  bool
	closing  bool
	until    time.Duration // closing: the busy ones are closed then
	done     bool
	gen      int
}

type simTakeover struct {
	t     takeover
	conns map[int]bool
}

func (s *sim) startClients() {
	for i := range simClients {
		c := &simClient{idx: i, name: fmt.Sprintf("c%d", i+1), arp: -1}
		s.clients = append(s.clients, c)
		s.after(time.Second+time.Duration(s.crng.IntN(1000))*time.Millisecond, func() { s.connect(c) })
	}
}

// serves reports whether host i answers for the VIP on its own
// connections: it has the address, or lingers on it.
func (s *sim) serves(i int) bool {
	h := s.hosts[i]
	return h.up && (s.hasAddrNow(h) || h.lingerRoute)
}

// reachable reports whether host i serves its connections and their
// segments reach it: it has the address, or it lingers while a host with
// the address forwards to it. A host whose vipd was killed less than
// simCleanup ago does not: vipd cleanup (ExecStopPost) takes its address
// and rules away, and nothing forwards to a dead process's host, so its
// connections are lost anyway (docs/design.md, "The lease": a peer may
// claim on the refused probe meanwhile; the two-holder checker allows
// the same window, announcers).
func (s *sim) reachable(i int) bool {
	h := s.hosts[i]
	if p := h.proc; p != nil && p.dead && p.killedAt >= 0 && s.now-p.killedAt <= simCleanup {
		return false
	}
	if !s.serves(i) || s.hasAddrNow(h) {
		return s.serves(i)
	}
	for j, o := range s.hosts {
		if o.up && s.hasAddrNow(o) && slices.Contains(o.fwdTo, i) && s.blocked[j][i] == 0 {
			return true
		}
	}
	return false
}

func (s *sim) kernelHas(c *simConn) bool {
	h := s.hosts[c.host]
	return c.open && h.up && c.boot == h.boot
}

// resolve is the client's ARP: its cache while that host has the
// address, else whoever answers (the lowest such host).
func (s *sim) resolve(c *simClient) int {
	if c.arp >= 0 && s.hasAddrNow(s.hosts[c.arp]) {
		return c.arp
	}
	c.arp = -1
	for i, h := range s.hosts {
		if h.up && s.hasAddrNow(h) {
			c.arp = i
			break
		}
	}
	return c.arp
}

// garp is host i's gratuitous ARP: the clients move to it.
func (s *sim) garp(i int) {
	for _, c := range s.clients {
		s.after(time.Duration(s.crng.IntN(3000))*time.Microsecond, func() {
			if s.hasAddrNow(s.hosts[i]) {
				c.arp = i
			}
		})
	}
}

func (s *sim) connect(c *simClient) {
	if s.ended || c.conn != nil {
		return
	}
	c.gen++
	g := c.gen
	x := s.resolve(c)
	retry := func() {
		s.after(100*time.Millisecond, func() {
			if c.gen == g {
				s.connect(c)
			}
		})
	}
	if x < 0 {
		retry()
		return
	}
	s.after(time.Duration(200+s.crng.IntN(800))*time.Microsecond, func() {
		if c.gen != g {
			return
		}
		h := s.hosts[x]
		if !h.up || !s.hasAddrNow(h) {
			retry()
			return
		}
		s.connID++
		cn := &simConn{id: s.connID, cl: c, host: x, boot: h.boot, open: true, rto: simRTOMin}
		c.conn = cn
		s.logf(h, "CLIENT %s connects (conn %d)", c.name, cn.id)
		s.nextRequest(c)
		life := time.Duration(3000+s.crng.IntN(12000)) * time.Millisecond
		s.after(life, func() {
			if c.conn == cn && cn.open && s.kernelHas(cn) && s.serves(cn.host) {
				s.goaway(cn)
			}
		})
	})
}

// goaway: the apiserver ends the connection at an idle moment.
func (s *sim) goaway(cn *simConn) {
	if !cn.open {
		return
	}
	if s.busy(cn) {
		s.after(10*time.Millisecond, func() { s.goaway(cn) })
		return
	}
	s.closeConn(cn, "GOAWAY", false)
}

func (s *sim) busy(cn *simConn) bool {
	return cn.open && (s.now < cn.busyUntil || cn.waiting)
}

func (s *sim) nextRequest(c *simClient) {
	g := c.gen
	s.after(time.Duration(20+s.crng.IntN(480))*time.Millisecond, func() {
		if c.gen == g && c.conn != nil && !s.ended {
			s.request(c.conn)
		}
	})
}

// request sends a request's segment, or its retransmission.
func (s *sim) request(cn *simConn) {
	c := cn.cl
	g := c.gen
	x := s.resolve(c)
	retransmit := func() {
		d := cn.rto
		cn.rto = min(2*cn.rto, simRTOMax)
		s.after(d, func() {
			if c.gen == g && cn.open {
				s.request(cn)
			}
		})
	}
	if x < 0 {
		retransmit()
		return
	}
	s.after(time.Duration(200+s.crng.IntN(800))*time.Microsecond, func() {
		if c.gen != g || !cn.open {
			return
		}
		h := s.hosts[x]
		switch {
		case !h.up:
			retransmit()
		case x == cn.host && s.kernelHas(cn):
			if s.serves(x) {
				s.serve(cn)
			} else {
				retransmit()
			}
		case s.hasAddrNow(h) && slices.Contains(h.fwdTo, cn.host):
			if s.kernelHas(cn) && s.serves(cn.host) && s.blocked[x][cn.host] == 0 {
				s.serve(cn)
			} else {
				retransmit()
			}
		case s.hasAddrNow(h):
			s.reset(cn, h, "its segment reached "+h.name+", which has neither the connection nor a forward to "+s.hosts[cn.host].name, false)
		default:
			retransmit()
		}
	})
}

// serve: the connection's host takes a request and answers it after its
// time (a LIST being sent now and then); if it no longer serves the
// connection by then, the client waits (its request was acknowledged)
// until it does again or a reset tells it.
func (s *sim) serve(cn *simConn) {
	c := cn.cl
	g := c.gen
	cn.rto = simRTOMin
	d := time.Duration(1+s.crng.IntN(30)) * time.Millisecond
	if s.crng.IntN(5) == 0 {
		d = time.Duration(100+s.crng.IntN(1900)) * time.Millisecond
	}
	cn.busyUntil = s.now + d
	var answer func()
	answer = func() {
		if c.gen != g || !cn.open {
			return
		}
		if s.kernelHas(cn) && s.serves(cn.host) {
			cn.waiting = false
			s.nextRequest(c)
			return
		}
		if !cn.waiting {
			cn.waiting, cn.waitSince = true, s.now
		}
		if s.now-cn.waitSince > simClientTimeout {
			s.logf(nil, "CLIENT %s gives up on conn %d after %s", c.name, cn.id, simClientTimeout)
			s.closeConn(cn, "client timeout", false)
			return
		}
		s.after(200*time.Millisecond, answer)
	}
	s.after(d, answer)
}

// reset: the client gets a reset on cn from host h (its kernel, or a
// poke: then only a connection whose segments still reach its host
// counts, a lingering one nobody forwards to is lost anyway): a request
// in flight fails.
func (s *sim) reset(cn *simConn, h *simHost, why string, poke bool) {
	if !cn.open {
		return
	}
	serving := s.serves
	if poke {
		serving = s.reachable
	}
	if s.kernelHas(cn) && serving(cn.host) {
		s.violate("client %s's conn %d reset (%s) while %s still serves it", cn.cl.name, cn.id, why, s.hosts[cn.host].name)
	}
	s.logf(h, "CLIENT %s's conn %d reset: %s", cn.cl.name, cn.id, why)
	s.closeConn(cn, "reset", true)
}

// closeConn ends cn; the client reconnects.
func (s *sim) closeConn(cn *simConn, why string, logged bool) {
	cn.open = false
	c := cn.cl
	if c.conn == cn {
		c.conn = nil
		c.gen++
		g := c.gen
		s.after(50*time.Millisecond, func() {
			if c.gen == g {
				s.connect(c)
			}
		})
	}
	if !logged {
		s.logf(s.hosts[cn.host], "CLIENT %s's conn %d closed (%s)", c.name, cn.id, why)
	}
}

// hostConns are the connections in host i's kernel.
func (s *sim) hostConns(i int) []*simConn {
	var out []*simConn
	for _, c := range s.clients {
		if cn := c.conn; cn != nil && cn.host == i && s.kernelHas(cn) {
			out = append(out, cn)
		}
	}
	return out
}

// destroy closes host i's connections to the VIP (conns Destroy): a busy
// one is a cut request, a violation unless excused says why it may be.
func (s *sim) destroy(i int, why, excused string) {
	for _, cn := range s.hostConns(i) {
		if s.busy(cn) {
			if excused == "" {
				s.violate("client %s's conn %d closed with a request in flight by %s (%s) while it serves it", cn.cl.name, cn.id, s.hosts[i].name, why)
				return
			}
			s.logf(s.hosts[i], "CLIENT %s's conn %d cut with a request in flight: %s (%s)", cn.cl.name, cn.id, why, excused)
			s.closeConn(cn, why, true)
			continue
		}
		s.closeConn(cn, why, false)
	}
}

// publish is the clients publisher's round (clients.go publish): every
// second a process that holds or lingers lists its connections, and the
// peers' copies take the list.
func (s *sim) schedPublish(p *simProc) {
	s.after(publishEvery, func() {
		if p.dead {
			return
		}
		if p.held || p.linger != nil {
			h := p.h
			set := map[int]bool{}
			for _, cn := range s.hostConns(h.idx) {
				set[cn.id] = true
				cn.listed = true
			}
			h.published = set
		}
		s.schedPublish(p)
	})
}

// --- the shell's chain steps, after chain.go, handoff.go and clients.go:
// each takes then, run once its announcer calls (which take time) are
// done.

// chain is the lifecycle's chain input for p at this moment.
func (s *sim) chain(p *simProc, peers []lifecycle.Peer) lifecycle.Chain {
	return lifecycle.Chain{Now: p.now(), Self: p.h.name, LastHolder: p.lastHolder, View: peers, Held: p.held,
		CanForward: !s.o.NoChain, CanReset: !s.o.NoChain}
}

func (s *sim) setForward(p *simProc, targets map[string]netip.Addr) {
	var to []int
	for _, n := range slices.Sorted(maps.Keys(targets)) {
		to = append(to, s.byName(n).idx)
	}
	p.h.fwdTo = to
}

// startForward is chain.go's startForward (before a claim's announce).
func (s *sim) startForward(p *simProc, peers []lifecycle.Peer, then func()) {
	targets, _ := lifecycle.StartForward(p.fwd, s.chain(p, peers))
	if len(targets) == 0 {
		then()
		return
	}
	s.effectR(p, s.crng, func() {
		f := &lifecycle.Forward{Since: p.now(), Targets: targets, Gone: map[string]time.Time{}}
		s.setForward(p, targets)
		p.fwd = f
		s.logf(p.h, "EFFECT forwards unknown connections to %s", strings.Join(slices.Sorted(maps.Keys(targets)), ", "))
	}, then)
}

// stopForward is chain.go's stopForward.
func (s *sim) stopForward(p *simProc, why string, then func()) {
	if p.fwd == nil {
		then()
		return
	}
	p.fwd = nil
	s.effectR(p, s.crng, func() {
		p.h.fwdTo = nil
		s.logf(p.h, "EFFECT stops forwarding (%s)", why)
	}, then)
}

// stepForward is chain.go's stepForward: lifecycle.Forward.Step's
// effects, done in order.
func (s *sim) stepForward(p *simProc, peers []lifecycle.Peer, then func()) {
	f := p.fwd
	if f == nil {
		then()
		return
	}
	for _, e := range f.Step(s.chain(p, peers)) {
		switch e.Kind {
		case lifecycle.DropTarget:
			if e.Lost {
				s.logf(p.h, "stops forwarding to %s: it is gone; resets its clients", e.Member)
			}
		case lifecycle.TakeOver:
			s.takeOverFrom(p, e.Member)
		case lifecycle.AddTarget:
			s.logf(p.h, "forwards to %s too: it lingers", e.Member)
		case lifecycle.StopForward:
			s.stopForward(p, e.Reason, then)
			return
		case lifecycle.InstallForward:
			targets := maps.Clone(f.Targets)
			s.effectR(p, s.crng, func() {
				s.setForward(p, targets)
				s.logf(p.h, "EFFECT forwards to %s", strings.Join(slices.Sorted(maps.Keys(targets)), ", "))
			}, then)
			return
		}
	}
	then()
}

// startLinger is chain.go's startLinger (lifecycle.Quiesce).
func (s *sim) startLinger(p *simProc, reason string, then func()) {
	s.effectR(p, s.crng, func() { s.linger(p, reason) }, func() {
		// Only once the address has gone (a client whose ARP cache still
		// names this host sends it the segments it forwarded).
		s.stopForward(p, "this node hands the VIP off", then)
	})
}

// linger is the Linger call's effect and startLinger's state.
func (s *sim) linger(p *simProc, reason string) {
	{
		{
			h := p.h
			if s.hasAddrNow(h) {
				s.setAddr(h, false, "linger: "+reason)
			}
			h.lingerRoute = true
			now := p.now()
			l := &simLinger{started: now, deadline: now.Add(simLingerMax)}
			p.linger = l
			p.held, p.handoffStarted, p.drainStarted, p.silenced = false, time.Time{}, time.Time{}, false
			p.adopted = false
			s.logf(h, "released the VIP, lingers on its connections (linger_max %s)", simLingerMax)
			s.lingerPoll(p, l)
		}
	}
}

// lingerPoll is lingerOn's loop: count the connections every lingerPoll
// until none is left, the hurry or linger_max; then close them at idle
// moments within quiesceMax.
func (s *sim) lingerPoll(p *simProc, l *simLinger) {
	if p.dead || p.linger != l || l.done {
		return
	}
	h := p.h
	now := p.now()
	if l.closing {
		left := 0
		for _, cn := range s.hostConns(h.idx) {
			if s.busy(cn) {
				left++
				if s.now >= l.until {
					s.logf(h, "CLIENT %s's conn %d cut with a request in flight: quiesceMax over (documented bound)", cn.cl.name, cn.id)
					s.closeConn(cn, "quiesceMax", true)
				}
				continue
			}
			s.closeConn(cn, "closed at an idle moment", false)
		}
		if left == 0 || s.now >= l.until {
			s.lingerDone(p, l)
			return
		}
		s.after(quiescePoll, func() { s.lingerPoll(p, l) })
		return
	}
	if len(s.hostConns(h.idx)) == 0 {
		s.lingerDone(p, l)
		return
	}
	if (!now.Before(l.deadline) && s.o.Bug != simBugLingerForever) || l.hurried {
		l.closing = true
		l.until = s.now + quiesceMax
		s.logf(h, "lingering: closes its connections at idle moments")
		s.lingerPoll(p, l)
		return
	}
	g := l.gen
	next := min(lingerPoll, max(h.real(l.deadline)-s.now, time.Millisecond))
	s.after(next, func() {
		if l.gen == g {
			s.lingerPoll(p, l)
		}
	})
}

func (s *sim) lingerDone(p *simProc, l *simLinger) {
	l.done = true
	s.pass(p, "linger ended")
}

// hurryLinger closes the hurry channel.
func (s *sim) hurryLinger(p *simProc, l *simLinger) {
	l.hurried = true
	l.gen++
	s.logf(p.h, "lingering: hurried")
	s.lingerPoll(p, l)
}

// takeLinger ends the goroutine: what is open stays open (finding 7's
// fix), or with simBugCallOffCloses the busy ones of a closing are cut.
func (s *sim) takeLinger(p *simProc) *simLinger {
	l := p.linger
	if l == nil {
		return nil
	}
	p.linger = nil
	l.gen++
	if l.closing && !l.done && s.o.Bug == simBugCallOffCloses {
		s.destroy(p.h.idx, "a called-off closing", "")
	}
	return l
}

// endLinger is chain.go's endLinger: the route goes.
func (s *sim) endLinger(p *simProc, why string, then func()) {
	if s.takeLinger(p) == nil {
		then()
		return
	}
	if p.held {
		then()
		return
	}
	s.effectR(p, s.crng, func() {
		p.h.lingerRoute = false
		s.logf(p.h, "EFFECT stops lingering: %s", why)
	}, then)
}

// abandonLinger is chain.go's abandonLinger: what is left is closed first.
func (s *sim) abandonLinger(p *simProc, why, excused string, then func()) {
	if p.linger == nil {
		then()
		return
	}
	l := p.linger
	l.gen++
	l.done = true
	s.destroy(p.h.idx, why, excused)
	s.endLinger(p, why, then)
}

// stepLinger is chain.go's stepLinger: lifecycle.StepLinger's answer,
// done.
func (s *sim) stepLinger(p *simProc, peers []lifecycle.Peer, then func()) {
	l := p.linger
	if l == nil {
		then()
		return
	}
	in := lifecycle.Linger{Self: p.h.name, View: peers, Finished: l.done, Hurried: l.hurried,
		Healthy: p.healthy, Ending: p.shuttingDown || p.finishing}
	for _, e := range lifecycle.StepLinger(in) {
		switch e.Kind {
		case lifecycle.EndLinger:
			s.endLinger(p, e.Reason, then)
			return
		case lifecycle.AbandonLinger:
			s.abandonLinger(p, e.Reason, "its apiserver is unhealthy", then)
			return
		case lifecycle.HurryLinger:
			s.hurryLinger(p, l)
		}
	}
	then()
}

// startTakeover is clients.go's startTakeover, at a claim.
func (s *sim) startTakeover(p *simProc) {
	p.takeovers = nil
	names := lifecycle.StartTakeovers(p.h.name, p.holdersSeen, !s.o.NoChain)
	if s.o.NoChain {
		return
	}
	p.claimAt, p.claimLists = s.now, map[string]map[int]bool{}
	for name := range p.holdersSeen {
		p.claimLists[name] = s.published(name)
	}
	if s.o.Bug == simBugTakeoverLastOnly {
		names = nil
		if p.lastHolder != "" {
			names = []string{p.lastHolder}
		}
	}
	for _, name := range names {
		p.takeovers = append(p.takeovers, &simTakeover{t: takeover{from: name, since: p.now()}, conns: s.published(name)})
	}
}

func (s *sim) published(name string) map[int]bool {
	out := map[int]bool{}
	maps.Copy(out, s.byName(name).published)
	return out
}

// takeOverFrom is clients.go's takeOverFrom.
func (s *sim) takeOverFrom(p *simProc, name string) {
	p.takeovers = slices.DeleteFunc(p.takeovers, func(t *simTakeover) bool { return t.t.from == name })
	p.takeovers = append(p.takeovers, &simTakeover{t: takeover{from: name, since: p.now()}, conns: s.published(name)})
}

// stepTakeover is clients.go's stepTakeover; the pokes go out a few
// milliseconds later (a goroutine, paced).
func (s *sim) stepTakeover(p *simProc, peers []lifecycle.Peer) {
	p.takeovers = slices.DeleteFunc(p.takeovers, func(t *simTakeover) bool {
		effects := lifecycle.TakeoverStep(p.now(), t.t.from, t.t.since, p.held, !s.o.NoChain, peers)
		if len(effects) == 0 {
			return false
		}
		switch e := effects[0]; e.Kind {
		case lifecycle.ForgetClients:
			s.logf(p.h, "forgets %s's clients", t.t.from)
		case lifecycle.ResetClients:
			ids := maps.Clone(t.conns)
			maps.Copy(ids, s.published(t.t.from))
			s.logf(p.h, "resets %s's clients (%d listed)", t.t.from, len(ids))
			s.after(time.Duration(1+s.crng.IntN(10))*time.Millisecond, func() {
				if p.dead {
					return
				}
				for _, c := range s.clients {
					if cn := c.conn; cn != nil && ids[cn.id] && !(cn.host == p.h.idx && s.kernelHas(cn)) {
						s.reset(cn, p.h, "a takeover's poke from "+p.h.name, true)
					}
				}
			})
		}
		return true
	})
}

// handoffUnderway is restart.go's handoffUnderway.
func (p *simProc) handoffUnderway() bool {
	return lifecycle.HandoffUnderway(p.held, p.linger != nil, p.fwd != nil, p.handoffStarted, p.drainStarted)
}

// finishHandoffs is restart.go's finishHandoffs: passes until no handoff
// is under way or the limit, then go on (done reports whether one is
// left).
func (s *sim) finishHandoffs(p *simProc, done func(left bool)) {
	if !p.handoffUnderway() || s.o.Bug == simBugRestartMidHandoff {
		done(false)
		return
	}
	s.logf(p.h, "restart: finishing the handoff under way first")
	p.finishing = true
	deadline := s.now + max(simHandoffTO, handoffMax)
	var loop func()
	loop = func() {
		if p.dead {
			return
		}
		if !p.handoffUnderway() || s.now >= deadline {
			p.finishing = false
			done(p.handoffUnderway())
			return
		}
		s.pass(p, "finishing a handoff")
		s.after(50*time.Millisecond, loop)
	}
	loop()
}

// rulesGone: the process's nftables table and linger route go (Close, or
// cleanup after a crash).
func (s *sim) rulesGone(h *simHost, why string) {
	if h.lingerRoute || len(h.fwdTo) > 0 {
		s.logf(h, "EFFECT forwarding and linger rules removed (%s)", why)
	}
	h.lingerRoute, h.fwdTo = false, nil
}

// --- checkers ---

// checkClients runs the chain's checkers.
func (s *sim) checkClients() {
	for _, c := range s.clients {
		cn := c.conn
		if cn == nil || !cn.waiting || !cn.listed || s.holder < 0 || s.holder == cn.host {
			continue
		}
		// The promise (clients.go): a claim resets the listed clients
		// of every member its process saw holding the VIP lately.
		hp := s.hosts[s.holder].proc
		if hp == nil || hp.dead || !hp.held || !hp.claimLists[s.hosts[cn.host].name][cn.id] {
			continue
		}
		if s.now-max(cn.waitSince, hp.claimAt) > simHangBound && !(s.kernelHas(cn) && s.serves(cn.host)) {
			s.violate("client %s hangs on conn %d to %s for %s: %s's takeover did not reset it", c.name, cn.id,
				s.hosts[cn.host].name, (s.now - cn.waitSince).Round(time.Millisecond), s.hosts[s.holder].name)
			return
		}
	}
	for _, h := range s.hosts {
		p := h.proc
		live := p != nil && !p.dead
		switch {
		case h.lingerRoute && (!live || p.linger == nil) && !(live && p.held):
			if h.leftSince < 0 {
				h.leftSince = s.now
			} else if s.now-h.leftSince > time.Second {
				s.violate("%s lingers on the VIP with no vipd lingering", h.name)
				return
			}
		default:
			h.leftSince = -1
		}
		if h.lingerRoute && len(s.hostConns(h.idx)) == 0 && !(live && p.held) {
			if h.emptySince < 0 {
				h.emptySince = s.now
			} else if s.now-h.emptySince > lingerPoll+time.Second {
				s.violate("%s lingers on the VIP %s past its last connection", h.name, (s.now - h.emptySince).Round(time.Millisecond))
				return
			}
		} else {
			h.emptySince = -1
		}
		if live && p.linger != nil {
			if d := p.now().Sub(p.linger.started); d > simLingerMax+quiesceMax+quiesceSlack {
				s.violate("%s lingers %s, past linger_max %s", h.name, d.Round(time.Millisecond), simLingerMax)
				return
			}
		}
	}
}

// checkEnd: nothing left behind once faults stopped: no forwarding to a
// member that neither lingers nor holds.
func (s *sim) checkEnd() {
	for _, h := range s.hosts {
		for _, i := range h.fwdTo {
			if o := s.hosts[i]; !o.lingerRoute && !s.hasAddrNow(o) {
				s.violate("%s still forwards to %s, which neither lingers nor holds, %s after the heal", h.name, o.name, s.now-s.healed)
				return
			}
		}
	}
}

// closeExcuse says why a release may close its busy connections at once
// ("": it may not): only one this node did not choose (the lease no
// longer lets it hold).
func (s *sim) closeExcuse(p *simProc) string {
	if !p.ls.CanHold() || p.fence.Fenced() {
		return "the lease no longer lets it hold"
	}
	if !p.healthy {
		return "its apiserver is unhealthy"
	}
	return ""
}

// chainNemesis schedules, on the clients' stream, the faults aimed at the
// chain: moves of the holder (a withdraw, its apiserver unhealthy), and a
// restart in place or a kill -9 of a node in the middle of one
// (forwarding or lingering), the moments findings 5, 7 and 8 of the
// chain's review were about.
func (s *sim) chainNemesis(from, to time.Duration) {
	mean := []time.Duration{2 * time.Second, 5 * time.Second, 12 * time.Second}[s.crng.IntN(3)]
	for t := from + s.cexp(mean); t < to; t += s.cexp(mean) {
		late := to-t < 15*time.Second
		k := s.crng.IntN(4)
		d := time.Second + time.Duration(s.crng.Int64N(int64(7*time.Second)))
		s.at(t, func() {
			// The node in the middle of a handoff: forwarding, else
			// lingering (-1: none).
			mid := -1
			for i, h := range s.hosts {
				if p := h.proc; p != nil && !p.dead && p.fwd != nil {
					mid = i
					break
				}
			}
			if mid < 0 {
				for i, h := range s.hosts {
					if p := h.proc; p != nil && !p.dead && p.linger != nil {
						mid = i
						break
					}
				}
			}
			switch {
			case s.holder < 0:
			case k == 0:
				s.withdraw(s.holder, d)
			case k == 3:
				s.unhealthy(s.holder, d)
			case mid < 0:
			case k == 1 && !late:
				if h := s.hosts[mid]; h.proc != nil && !h.proc.dead && !h.proc.shuttingDown && h.restarts == 0 {
					s.fault(mid, simWorld, "systemctl restart (mid-handoff)")
					s.stop(h, true)
				}
			case k == 2:
				if h := s.hosts[mid]; h.proc != nil && !h.proc.dead {
					s.fault(mid, simWorld, "kill -9 (mid-handoff)")
					s.crash(h, "nemesis")
				}
			}
		})
	}
}

func (s *sim) cexp(mean time.Duration) time.Duration {
	return time.Duration(s.crng.ExpFloat64()*float64(mean)) + time.Millisecond
}
