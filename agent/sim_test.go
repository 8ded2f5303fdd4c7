package agent

// A deterministic cluster simulator (docs/design.md, "The cluster
// simulator"): N nodes run vipd's real pure code (the lease runner and its
// fence, hasQuorum, viewMember, Elect, decide) in one thread on simulated
// clocks, over a simulated network that carries the lease's heartbeats,
// membership's gossip and probes, beside a simulated L2 segment (which
// hosts have the VIP's address). The shell around the pure code (what
// reconcile and apply do with it, and how long their effects take) is
// modelled here, after reconcile.go, handoff.go, loop.go and restart.go. A
// seeded nemesis injects faults; checkers watch every run. Everything
// follows from the seed: a failing seed prints a story of its last events.

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/agent/lifecycle"
)

const (
	simVIP         = "vip0"
	simGossip      = 200 * time.Millisecond // membership's gossip of this node's state
	simDead        = 5 * time.Second
	simTick        = 100 * time.Millisecond // Options.Tick
	simIdleTick    = time.Second            // Options.IdleTick
	simGrace       = config.DefaultRestartGrace
	simCleanup     = 30 * time.Millisecond // ExecStopPost's vipd cleanup after a crash
	simHandoffTO   = config.DefaultHandoffTimeout
	simStartFaults = 4 * time.Second
)

// simMaxEvents bounds one run's events (a livelock in the code under test
// or in the simulator).
const simMaxEvents = 5_000_000

// simOptions is one run's shape; the zero value of a field is the seed's
// choice.
type simOptions struct {
	Seed  uint64
	Nodes int
	// Faults is how long the nemesis acts (after the start), Quiet how
	// long the run goes on after it healed everything.
	Faults, Quiet time.Duration
	// Trace is how many events a failure prints.
	Trace int
	// Decide and Elect replace the real ones (a test of the checkers
	// breaks them on purpose).
	Decide func(lifecycle.Input) lifecycle.Decision
	Elect  func([]Member, ElectionVIP) Result
	// NoPreempt: preempt off (else the seed chooses).
	NoPreempt bool
	// Bounds of the checkers.
	NoHolder, Converge time.Duration
	// Bug breaks the modelled shell on purpose (simchain_test.go).
	Bug simBug
	// NoChain: [connections] reset off (no daisy chain, no clients, no
	// client reset), as the simulator's first slice ran (its regression
	// seeds replay that way).
	NoChain bool
}

func (o *simOptions) defaults() {
	if o.Faults == 0 {
		o.Faults = 30 * time.Second
	}
	if o.Quiet == 0 {
		o.Quiet = 20 * time.Second
	}
	if o.Trace == 0 {
		o.Trace = 60
	}
	if o.Decide == nil {
		o.Decide = lifecycle.Decide
	}
	if o.Elect == nil {
		o.Elect = Elect
	}
	if o.NoHolder == 0 {
		o.NoHolder = simNoHolderBound
	}
	if o.Converge == 0 {
		o.Converge = simConvergeBound
	}
}

// The checkers' bounds (docs/design.md, "The cluster simulator").
const (
	// simNoHolderBound: the longest the VIP may be on no host while a
	// stable majority with an eligible node exists: a stale holder's
	// settle (3 s) after the membership's view catches up, with room.
	simNoHolderBound = 8 * time.Second
	// simConvergeBound: after the nemesis heals everything, exactly one
	// holder within this (processes restarting, membership catching up,
	// a settle), and no change after.
	simConvergeBound = 12 * time.Second
)

// --- events ---

type simEvent struct {
	at  time.Duration
	seq uint64
	f   func()
}

// simQueue is the events by time, then by the order they were scheduled
// in: a binary heap of values (no allocation per event, no interface
// calls), popped in the same order as any heap over that total order.
type simQueue []simEvent

func (q simQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *simQueue) push(e simEvent) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *simQueue) pop() simEvent {
	h := *q
	e := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = simEvent{} // let the closure go
	h = h[:last]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if r < len(h) && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return e
}

// --- the world ---

type sim struct {
	o   simOptions
	rng *rand.Rand
	// crng: the clients', the chain's and the chain nemesis's randomness,
	// apart from rng's.
	crng  *rand.Rand
	now   time.Duration // real time since the start
	seq   uint64
	q     simQueue
	hosts []*simHost
	// blocked[a][b] > 0: packets from a to b are lost (the faults that
	// cut it).
	blocked [][]int
	loss    float64 // probability a packet is lost
	dup     float64 // probability a packet arrives twice
	preempt bool

	trace      []string // ring
	traceNext  int
	violations []string

	// checker state
	holder      int           // the sole announcing host (-1: none or several)
	noHolder    time.Duration // since when no host has the address (-1: some has)
	stable      time.Duration // since when a stable majority exists (-1: none)
	unstable    time.Duration // when there last was none (-1: never)
	lastFault   time.Duration
	healed      time.Duration // when the nemesis healed everything (-1: not yet)
	faultsOf    [][]simFault  // per host, its faults (causes of a move away from it)
	worldFault  simFault      // the last fault that may cause any move
	moves       int
	maxNoHolder time.Duration
	ended       bool
	overlap     time.Duration // since when a planned overlap runs (-1: none)
	stableKey   []byte        // stableMajority's last input and answer
	stableWas   bool
	stableValid bool   // stableKey and stableWas are set
	stableBuf   []byte // stableMajority's scratch: the next key
	stableOK    []int  // and the hosts it counts

	// the VIP's clients (simchain_test.go)
	clients []*simClient
	connID  int
}

type simFault struct {
	at   time.Duration
	what string
}

type simHost struct {
	s    *sim
	idx  int
	name string
	ap   netip.AddrPort
	addr string    // ap as membership's Address
	ppm  int64     // clock rate error, parts per million (within 1%)
	base time.Time // its monotonic clock at real time 0
	up   bool      // the host runs (a power-off takes its address too)

	// The L2 segment's state of this host: it has the VIP's address
	// (answers ARP for it) until addrUntil (zero: forever, its kernel
	// lifetime).
	hasAddr   bool
	addrUntil time.Duration
	// healthy: the apiserver's health check passes here.
	healthy bool
	// withdrawn: the operator's withdraw (kept in state_dir across
	// restarts).
	withdrawn bool
	// slow adds to every announcer call's time; pausedUntil stops the
	// process (SIGSTOP, a hung host) until then.
	slow        time.Duration
	pausedUntil time.Duration
	// killAtEffect: kill -9 right after the next effect on the kernel.
	killAtEffect bool
	// gaveAway: the last pass that found its vipd handing the VIP off.
	gaveAway time.Duration
	// rec: the restart record a process stopping for a restart in place
	// left (state_dir/restart.json); recUntil its deadline (host clock).
	rec        bool
	recHeld    bool
	recHealthy bool
	recUntil   time.Time
	metaVer    uint64 // membership's version of this host's metadata, across processes
	// The daisy chain's kernel state: the linger route (l2 Linger: it
	// takes the VIP's packets of its own connections without the
	// address), the forwarding rule's targets, and what it last
	// published of its connections (the peers' copies).
	lingerRoute bool
	fwdTo       []int
	published   map[int]bool
	boot        int
	leftSince   time.Duration // its linger route without a lingering vipd (-1: none)
	emptySince  time.Duration // its linger route with no connection left (-1: not)
	proc        *simProc
	gen         int // processes started
	restarts    int // pending restart events (so two do not overlap)
}

// local is the host's monotonic clock at real time t.
func (h *simHost) local(t time.Duration) time.Time {
	return h.base.Add(t + time.Duration(int64(t)*h.ppm/1_000_000))
}

// real is the first real time at which the host's clock reads at least l.
func (h *simHost) real(l time.Time) time.Duration {
	d := l.Sub(h.base)
	t := time.Duration(float64(d) * 1e6 / float64(1e6+h.ppm))
	for h.local(t).Before(l) {
		t++
	}
	for t > 0 && !h.local(t-1).Before(l) {
		t--
	}
	return t
}

// simMember is a member as this process's membership sees it.
type simMember struct {
	state     MemberState
	meta      NodeMeta
	ver       uint64
	since     time.Time
	metaSince time.Time
	heard     time.Time // its last gossip reached this node
}

// simProc is one vipd process.
type simProc struct {
	h     *simHost
	gen   int
	dead  bool
	lease *lease.Runner
	alarm *lease.ManualAlarm
	// alarmAt and alarmGen: the scheduled firing of the alarm.
	alarmAt  time.Duration
	alarmGen int
	fence    lease.Fence
	ls       lease.State
	members  map[string]*simMember // by name; never self
	meta     NodeMeta              // last published

	// the VIP's state (vipState)
	owner                         string
	held, healthy, adopted        bool
	silenced, settling, contested bool
	bootstrap                     bool
	eligibleSince, settleStarted  time.Time
	handoffStarted, drainStarted  time.Time
	retryAt                       time.Time
	lastEligible                  []string
	adoptUntil                    time.Time

	quorumLogged   bool
	quorumRegained time.Time
	fencedAt       time.Time
	shuttingDown   bool
	restartGrace   time.Duration // exiting for a restart in place
	shutdownBy     time.Time

	busy        bool // a pass (and its effect) is under way
	givingAway  bool // handing the VIP off, or releasing it at a handoff's end
	passAfter   bool // an event came meanwhile: a pass follows
	passPending bool
	tickAt      time.Duration // the loop's timer
	tickGen     int

	// the daisy chain and the client reset (simchain_test.go)
	fwd         *lifecycle.Forward
	linger      *simLinger
	lastHolder  string
	holdersSeen map[string]time.Time
	takeovers   []*simTakeover
	// claimAt, claimLists: the last claim, and the lists of the members
	// seen holding then (the takeover's promise, checkClients).
	claimAt      time.Duration
	claimLists   map[string]map[int]bool
	finishing    bool          // a restart waits for a handoff under way
	shutLingerBy time.Duration // a shutdown's wait for its lingering
	killedAt     time.Duration // kill -9 (-1: not killed)
}

func (p *simProc) now() time.Time { return p.h.local(p.h.s.now) }

// --- running ---

func newSim(o simOptions) *sim {
	o.defaults()
	s := &sim{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15)), crng: rand.New(rand.NewPCG(o.Seed, 0xc1e47c0ffee)), holder: -1, noHolder: 0, stable: -1, unstable: -1, healed: -1, overlap: -1}
	n := o.Nodes
	if n == 0 {
		n = 3 + s.rng.IntN(5)
	}
	s.preempt = s.rng.IntN(4) == 0 && !o.NoPreempt
	s.blocked = make([][]int, n)
	s.faultsOf = make([][]simFault, n)
	for i := range n {
		s.blocked[i] = make([]int, n)
		h := &simHost{s: s, idx: i, name: fmt.Sprintf("n%d", i+1), up: true, healthy: true,
			ap:   netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), 7946),
			ppm:  int64(s.rng.IntN(20001)) - 10000,
			base: time.Unix(1_000_000*int64(i+1), 0), leftSince: -1, emptySince: -1}
		h.addr = h.ap.String()
		s.hosts = append(s.hosts, h)
	}
	return s
}

func (s *sim) at(d time.Duration, f func()) {
	if d < s.now {
		d = s.now
	}
	s.seq++
	s.q.push(simEvent{at: d, seq: s.seq, f: f})
}

func (s *sim) after(d time.Duration, f func()) { s.at(s.now+d, f) }

func (s *sim) logf(h *simHost, format string, args ...any) {
	who := "--"
	if h != nil {
		who = h.name
	}
	line := fmt.Sprintf("%8.3fs %-3s %s", s.now.Seconds(), who, fmt.Sprintf(format, args...))
	if len(s.trace) < s.o.Trace {
		s.trace = append(s.trace, line)
		return
	}
	s.trace[s.traceNext] = line
	s.traceNext = (s.traceNext + 1) % len(s.trace)
}

func (s *sim) story() string {
	var b strings.Builder
	for i := range s.trace {
		b.WriteString(s.trace[(s.traceNext+i)%len(s.trace)])
		b.WriteByte('\n')
	}
	return b.String()
}

func (s *sim) violate(format string, args ...any) {
	msg := fmt.Sprintf("%.3fs: ", s.now.Seconds()) + fmt.Sprintf(format, args...)
	s.logf(nil, "VIOLATION %s", msg)
	s.violations = append(s.violations, msg)
	s.ended = true
}

// run runs the whole scenario and returns the violations.
func (s *sim) run() []string {
	end := simStartFaults + s.o.Faults + s.o.Quiet
	s.logf(nil, "seed %d: %d nodes, preempt %v, clocks %s", s.o.Seed, len(s.hosts), s.preempt, s.clocks())
	for _, h := range s.hosts {
		s.after(time.Duration(s.rng.IntN(500))*time.Millisecond, func() { s.start(h, "boot") })
	}
	s.nemesis(simStartFaults, simStartFaults+s.o.Faults)
	if !s.o.NoChain {
		s.startClients()
		s.chainNemesis(simStartFaults, simStartFaults+s.o.Faults)
	}
	s.at(simStartFaults+s.o.Faults, s.heal)
	for t := time.Duration(0); t < end; t += 50 * time.Millisecond {
		s.at(t, s.check)
	}
	for events := 0; len(s.q) > 0 && !s.ended; events++ {
		if events > simMaxEvents {
			s.violate("livelock: more than %d events", simMaxEvents)
			break
		}
		e := s.q.pop()
		if e.at > end {
			break
		}
		s.now = e.at
		e.f()
	}
	if !s.ended {
		s.now = end
		s.check()
		if s.holder < 0 {
			s.violate("no single holder at the end (%s)", s.holders())
		}
		if !s.ended {
			s.checkEnd()
		}
	}
	return s.violations
}

func (s *sim) clocks() string {
	var parts []string
	for _, h := range s.hosts {
		parts = append(parts, fmt.Sprintf("%s%+.2f%%", h.name, float64(h.ppm)/1e4))
	}
	return strings.Join(parts, " ")
}

// --- network ---

// send carries a packet from host a to host b: lost, delayed (so
// reordered), duplicated as the network's state says; deliver runs at
// its arrival.
func (s *sim) send(a, b int, deliver func()) {
	if s.blocked[a][b] > 0 || !s.hosts[a].up || s.rng.Float64() < s.loss {
		return
	}
	n := 1
	if s.rng.Float64() < s.dup {
		n = 2
	}
	for range n {
		d := 100*time.Microsecond + time.Duration(s.rng.IntN(900))*time.Microsecond
		if s.rng.IntN(50) == 0 {
			d += time.Duration(s.rng.IntN(20)) * time.Millisecond // a late one
		}
		s.after(d, func() {
			if s.hosts[b].up {
				deliver()
			}
		})
	}
}

// toProc runs f on host b's current process, once it runs (a paused
// process reads its socket when it resumes).
func (s *sim) toProc(b int, f func(p *simProc)) {
	h := s.hosts[b]
	p := h.proc
	if p == nil || p.dead {
		return
	}
	if s.now < h.pausedUntil {
		s.at(h.pausedUntil, func() {
			if h.proc == p && !p.dead {
				f(p)
			}
		})
		return
	}
	f(p)
}

func (s *sim) hostOf(ap netip.AddrPort) int {
	return int(ap.Addr().As4()[3]) - 10
}

// --- processes ---

// start starts a vipd process on h: a restart in place's successor adopts
// the VIP its record names if the address is still there; any other start
// removes a leftover address first.
func (s *sim) start(h *simHost, why string) {
	if !h.up || (h.proc != nil && !h.proc.dead) {
		return
	}
	h.gen++
	if s.now > 0 {
		// A cause for a move away from h (it is new) or, with preempt, to
		// it.
		s.faultsOf[h.idx] = append(s.faultsOf[h.idx], simFault{at: s.now, what: "vipd started (" + why + ")"})
	}
	// A VIP with a health check starts unhealthy (run.go's setupVIPs)
	// until its checks rise (adopt: with the health the record kept).
	p := &simProc{h: h, gen: h.gen, members: map[string]*simMember{}, killedAt: -1}
	s.after(300*time.Millisecond+time.Duration(s.rng.IntN(300))*time.Millisecond, func() {
		if !p.dead && p.healthy != h.healthy {
			p.healthy = h.healthy
			s.logf(h, "health check: healthy=%v", h.healthy)
			s.pass(p, "health")
		}
	})
	h.proc = p
	// The start-up cleanup removes what a previous process's chain left.
	s.rulesGone(h, "start-up cleanup")
	s.schedPublish(p)
	p.lease, p.alarm = lease.NewManualRunner(lease.Config{
		Self: h.name, Timers: lease.FastTimers(), Now: p.now,
		Send: func(b []byte, to netip.AddrPort) {
			payload := slices.Clone(b)
			from := h.ap
			s.send(h.idx, s.hostOf(to), func() {
				s.toProc(s.hostOf(to), func(q *simProc) {
					q.lease.Receive(payload, from)
					s.rearm(q)
				})
			})
		},
		Wake: func() { s.pass(p, "lease") },
	}, s.rng.Uint64())
	now := p.now()
	adopt := h.rec && h.recHeld && now.Before(h.recUntil) && s.hasAddrNow(h)
	if h.rec && h.recHeld && !adopt {
		s.logf(h, "restart record not used (deadline passed or address gone)")
	}
	h.rec = false
	switch {
	case adopt:
		p.held, p.adopted, p.healthy = true, true, h.recHealthy
		p.adoptUntil = now.Add(min(h.recUntil.Sub(now), recordHold(simGrace)))
		p.lease.HoldUntil(p.adoptUntil)
		s.logf(h, "vipd started (%s): adopts the VIP until +%s", why, p.adoptUntil.Sub(now).Round(time.Millisecond))
	case h.hasAddr:
		s.logf(h, "vipd started (%s): removes the leftover address", why)
		s.setAddr(h, false, "leftover removed at start")
	default:
		s.logf(h, "vipd started (%s)", why)
	}
	// A new process is a new incarnation: its state supersedes whatever
	// the members remember (its leave too).
	h.metaVer++
	p.meta = p.localMeta()
	// Join: tell every host, which answer with their state (push-pull).
	s.broadcast(p, true)
	s.schedGossip(p)
	s.pass(p, "start")
}

func (s *sim) hasAddrNow(h *simHost) bool {
	return h.hasAddr && (h.addrUntil == 0 || s.now < h.addrUntil)
}

// crash kills h's process (kill -9): its address stays until vipd
// cleanup (ExecStopPost) runs; systemd starts it again later.
func (s *sim) crash(h *simHost, why string) {
	p := h.proc
	if p == nil || p.dead {
		return
	}
	p.dead, p.killedAt = true, s.now
	s.logf(h, "vipd killed (%s)", why)
	s.after(simCleanup, func() {
		if h.proc == p && s.hasAddrNow(h) {
			s.setAddr(h, false, "vipd cleanup (ExecStopPost)")
		}
		if h.proc == p {
			s.rulesGone(h, "vipd cleanup (ExecStopPost)")
		}
	})
	s.restartLater(h, 300*time.Millisecond+time.Duration(s.rng.IntN(3000))*time.Millisecond, "systemd restart")
}

func (s *sim) restartLater(h *simHost, d time.Duration, why string) {
	h.restarts++
	s.after(d, func() {
		h.restarts--
		s.start(h, why)
	})
}

// setAddr changes the L2 segment: h has the VIP's address or not.
func (s *sim) setAddr(h *simHost, on bool, why string) {
	if !h.up {
		return
	}
	h.hasAddr, h.addrUntil = on, 0
	if on {
		s.garp(h.idx)
		s.logf(h, "EFFECT address added (%s)", why)
	} else {
		s.logf(h, "EFFECT address removed (%s)", why)
	}
	s.check()
}

// rearm schedules p's lease alarm where the runner set it.
func (s *sim) rearm(p *simProc) {
	due, ok := p.alarm.Due()
	if !ok {
		p.alarmGen++
		p.alarmAt = -1
		return
	}
	at := max(p.h.real(due), s.now)
	if at == p.alarmAt {
		return
	}
	p.alarmGen++
	p.alarmAt = at
	g := p.alarmGen
	s.at(at, func() {
		if p.dead || p.alarmGen != g {
			return
		}
		if s.now < p.h.pausedUntil {
			p.alarmAt = -1
			s.at(p.h.pausedUntil, func() { s.fire(p) })
			return
		}
		s.fire(p)
	})
}

func (s *sim) fire(p *simProc) {
	if p.dead {
		return
	}
	p.alarmAt = -1
	for _, n := range p.lease.Fire() {
		s.probe(p, n)
	}
	s.rearm(p)
}

// probe connects to a silent member's membership port: refused when its
// host is up and no vipd listens, connected when one does, a timeout
// (Interval) when the host or the path is gone.
func (s *sim) probe(p *simProc, name string) {
	b := s.byName(name)
	if b == nil {
		return
	}
	a := p.h.idx
	result := func(refused bool) {
		if !p.dead {
			p.lease.ProbeDone(name, refused)
			s.rearm(p)
		}
	}
	timeout := s.now + lease.FastTimers().Interval
	answered := false
	s.send(a, b.idx, func() {
		refused := b.proc == nil || b.proc.dead
		s.send(b.idx, a, func() {
			if !answered && s.now < timeout {
				answered = true
				result(refused)
			}
		})
	})
	s.at(timeout, func() {
		if !answered {
			answered = true
			result(false)
		}
	})
}

func (s *sim) byName(name string) *simHost {
	for _, h := range s.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

// --- membership ---

// simEntry is one member's state in a gossip message, as memberlist's
// alive, dead and push-pull messages carry it: its incarnation (ver; a
// process's metadata changes count too), metadata, state, and how long
// ago the sender heard it (its indirect probes: a member one node cannot
// reach stays alive while another can).
type simEntry struct {
	name  string
	ver   uint64
	meta  NodeMeta
	state MemberState
	age   time.Duration
}

// table is what p tells others: itself and, when full, every member it
// knows. The receivers only read it: one table can go to several.
func (s *sim) table(p *simProc, full bool) []simEntry {
	self := simEntry{name: p.h.name, ver: p.h.metaVer, meta: p.meta, state: StateAlive}
	if !full {
		return []simEntry{self}
	}
	now := p.now()
	out := make([]simEntry, 1, 1+len(p.members))
	out[0] = self
	for _, h := range s.hosts {
		if m := p.members[h.name]; m != nil {
			out = append(out, simEntry{name: h.name, ver: m.ver, meta: m.meta, state: m.state, age: now.Sub(m.heard)})
		}
	}
	return out
}

// sendTable sends p's table (or only its own entry) to host o; join asks
// o to answer with its own (a push-pull).
func (s *sim) sendTable(p *simProc, o *simHost, full, join bool) {
	s.sendEntries(p, o, s.table(p, full), join)
}

// sendEntries sends t, a table of p's, to host o.
func (s *sim) sendEntries(p *simProc, o *simHost, t []simEntry, join bool) {
	from := p.h.name
	s.send(p.h.idx, o.idx, func() {
		s.toProc(o.idx, func(q *simProc) { s.merge(q, from, t, join) })
	})
}

// broadcast sends p's own entry to every host (memberlist's broadcast of
// a metadata update, or of a join).
func (s *sim) broadcast(p *simProc, join bool) {
	t := s.table(p, false)
	for _, o := range s.hosts {
		if o != p.h {
			s.sendEntries(p, o, t, join)
		}
	}
}

// schedGossip is membership's periodic work: gossip the table to three
// random members, and the failure detection.
func (s *sim) schedGossip(p *simProc) {
	s.after(simGossip, func() {
		if p.dead {
			return
		}
		if s.now >= p.h.pausedUntil {
			var t []simEntry
			for range 3 {
				if o := s.hosts[s.rng.IntN(len(s.hosts))]; o != p.h {
					if t == nil {
						t = s.table(p, true)
					}
					s.sendEntries(p, o, t, false)
				}
			}
			s.detect(p)
		}
		s.schedGossip(p)
	})
}

// merge takes a gossip message from a member at q, as memberlist does: a
// newer incarnation replaces what q knew, a death or leave of the
// incarnation q knows is believed (until the member refutes it with a
// newer one), and a message about q itself saying it is dead makes q
// refute.
func (s *sim) merge(q *simProc, from string, t []simEntry, join bool) {
	now := q.now()
	changed := false
	for i, e := range t {
		if e.name == q.h.name {
			if e.state != StateAlive && e.ver >= q.h.metaVer {
				q.h.metaVer++
				s.logf(q.h, "refutes its death as seen by %s", from)
				s.broadcast(q, false)
			}
			continue
		}
		m := q.members[e.name]
		if m == nil {
			if e.state != StateAlive {
				continue
			}
			m = &simMember{state: StateAlive, since: now, metaSince: now}
			q.members[e.name] = m
			changed = true
		}
		heard := now.Add(-e.age)
		if i == 0 {
			heard = now // from the member itself
		}
		switch {
		case e.ver > m.ver:
			m.meta, m.ver, m.metaSince = e.meta, e.ver, now
			m.state, m.since = e.state, now
			changed = true
		case e.ver == m.ver && e.state != StateAlive && m.state == StateAlive:
			m.state, m.since = e.state, now
			changed = true
		}
		if e.ver >= m.ver && e.state == StateAlive && heard.After(m.heard) {
			m.heard = heard
		}
	}
	if join {
		if o := s.byName(from); o != nil {
			s.sendTable(q, o, true, false)
		}
	}
	if changed {
		s.pass(q, "membership")
	}
}

// detect is membership's failure detection at p: a member that p has
// not heard, directly or through another member, for simDead is dead
// (memberlist reports no suspicion: agent/membership sees a member
// alive until NotifyLeave).
func (s *sim) detect(p *simProc) {
	now := p.now()
	changed := false
	for _, h := range s.hosts {
		m := p.members[h.name]
		if m != nil && m.state == StateAlive && now.Sub(m.heard) >= simDead {
			m.state, m.since = StateDead, now
			if m.meta.Leaving {
				m.state = StateLeft
			}
			changed = true
		}
	}
	if changed {
		s.pass(p, "membership")
	}
}

// leave tells every host p left (memberlist's leave broadcast).
func (s *sim) leave(p *simProc) {
	h := p.h
	e := []simEntry{{name: h.name, ver: h.metaVer, meta: p.meta, state: StateLeft}}
	for _, o := range s.hosts {
		if o != h {
			s.send(h.idx, o.idx, func() {
				s.toProc(o.idx, func(q *simProc) { s.merge(q, h.name, e, false) })
			})
		}
	}
}

// snapshot is membership's table as reconcile reads it (memberInfo).
func (p *simProc) snapshot() []memberInfo {
	out := make([]memberInfo, 0, len(p.members))
	for _, h := range p.h.s.hosts {
		if m := p.members[h.name]; m != nil {
			out = append(out, memberInfo{Name: h.name, Address: h.addr, State: m.state, Meta: m.meta,
				Since: m.since, MetaSince: m.metaSince})
		}
	}
	return out
}

// localMeta is run.go's localMeta for this process's one VIP.
func (p *simProc) localMeta() NodeMeta {
	fenced := p.fence.Fenced()
	m := NodeMeta{Valid: true, Withdrawn: p.h.withdrawn || p.shuttingDown, Leaving: p.shuttingDown, Fenced: fenced,
		RestartAware: true, RestartGrace: p.restartGrace, PriorityAware: true, VIPs: map[uint32]VIPMeta{}}
	down := fenced
	vm := VIPMeta{Healthy: p.healthy && !down, Held: p.held, Down: down, Forwarding: p.held && p.fwd != nil,
		Lingering: !p.held && p.linger != nil, EndLinger: p.held && p.fwd != nil && p.finishing}
	if vm.Healthy || vm.Held || vm.Down || vm.Lingering {
		m.VIPs[config.VIPKey(simVIP)] = vm
	}
	return m
}

// --- the loop ---

// pass asks for a reconcile pass of p now (an event woke the loop); it
// runs once p is free.
func (s *sim) pass(p *simProc, why string) {
	if p.dead || p.passPending {
		return
	}
	p.passPending = true
	at := max(s.now, p.h.pausedUntil)
	s.at(at, func() {
		p.passPending = false
		if p.dead {
			return
		}
		if p.busy {
			p.passAfter = true // the loop is in an announcer call
			return
		}
		if s.now < p.h.pausedUntil {
			s.pass(p, why)
			return
		}
		s.reconcile(p, why)
	})
}

// reconcile is one pass of reconcile.go for the one VIP: read the lease,
// count quorum, elect, decide; then the effect, which takes the
// announcer's time, and after it the pass's tail (drive the lease,
// publish the metadata).
func (s *sim) reconcile(p *simProc, why string) {
	h := p.h
	now := p.now()
	members := p.snapshot()
	for _, m := range members {
		if m.Meta.RestartGrace > 0 {
			p.lease.MarkRestarting(m.Name, m.Meta.RestartGrace)
		}
	}
	var cached []CachedPeer
	for _, o := range s.hosts {
		if o != h {
			cached = append(cached, CachedPeer{Name: o.name})
		}
	}
	q := hasQuorum(h.name, cached, members, p.lease.RecentlyHeard(), nil)
	addrs := map[string]netip.AddrPort{}
	for _, m := range members {
		addrs[m.Name] = netip.MustParseAddrPort(m.Address)
	}
	p.lease.SetBase(q.Base, q.Required, addrs, p.fence.Driving())
	ls := p.lease.State()
	p.ls = ls
	if p.fence.Observe(ls, p.held, now) {
		if p.fence.Fenced() {
			p.fencedAt = now
			s.logf(h, "fenced: no majority evidence")
		} else {
			s.logf(h, "fence held again")
		}
	}
	// dropAdopted: an adopted address that expired meanwhile.
	if p.adopted && p.held && !s.hasAddrNow(h) {
		p.adopted = false
		s.logf(h, "gives up the adopted VIP: its address expired")
		p.held = false
	}
	if !p.retryAt.IsZero() && !now.Before(p.retryAt) {
		p.retryAt = time.Time{}
	}
	view := make([]Member, 0, len(members)+1)
	for _, m := range members {
		view = append(view, viewMember(m, ls))
	}
	view = append(view, Member{Name: h.name, State: StateAlive, Meta: p.localMeta()})
	res := s.o.Elect(view, ElectionVIP{Name: simVIP, Preempt: s.preempt})
	if res.Owner != p.owner {
		s.logf(h, "elects %s (was %s): %s", orNone(res.Owner), orNone(p.owner), res.Reason)
		p.owner = res.Owner
	}
	peers := peersOf(view, simVIP, addrs)
	if lh := lifecycle.LastHolder(h.name, peers); lh != "" {
		p.lastHolder = lh
	}
	p.holdersSeen = lifecycle.NoteHolders(p.holdersSeen, h.name, peers, now)
	in := lifecycle.Input{
		Now: now, Self: h.name, L2: true, Election: electionOf(res), View: peers, CanQuiesce: !s.o.NoChain,
		Quorum: q.OK || (p.held && ls.Adopting()), Alive: q.Alive, Known: q.Known,
		QuorumRegained: p.quorumRegained,
		Planned:        h.withdrawn || p.shuttingDown,
		Fenced:         p.fence.Fenced(),
		AwaitFence:     ls.Required() && (!ls.CanHold() || ls.Adopting()),
		HandoffTimeout: simHandoffTO,
		Held:           p.held, EligibleSince: p.eligibleSince, HandoffStarted: p.handoffStarted,
		DrainStarted: p.drainStarted, RetryAt: p.retryAt, Contested: p.contested, Bootstrap: p.bootstrap,
		LastEligible: p.lastEligible, SettleStarted: p.settleStarted,
	}
	d := s.o.Decide(in)
	// A planned overlap (docs/design.md, "Handoff"): the node hands the
	// VIP off, or releases it to a successor that holds it (the end of a
	// handoff, or a contest lost).
	if p.givingAway {
		p.h.gaveAway = s.now
	}
	// Only while the lease lets it hold: a node that may not hold the VIP
	// has no overlap to excuse.
	p.givingAway = (d.Do == lifecycle.Handoff || d.Do == lifecycle.Drain || d.Do == lifecycle.Quiesce || (d.Do == lifecycle.Release && d.CloseClients)) &&
		ls.CanHold()
	p.eligibleSince, p.settling, p.settleStarted = d.EligibleSince, d.Settling, d.SettleStarted
	p.contested, p.bootstrap = d.Contested, d.Bootstrap
	p.handoffStarted, p.drainStarted = d.HandoffStarted, d.DrainStarted
	p.lastEligible = res.Eligible
	if d.Do != lifecycle.None && d.Do != lifecycle.Keep {
		s.logf(h, "pass (%s): quorum %d/%d, decide %s: %s", why, q.Alive, q.Known, d.Do, d.Reason)
	}
	if d.StartedHandoff {
		s.logf(h, "hands the VIP off to %s", orNone(p.owner))
	}
	// apply, then the chain's steps (reconcile.go's order), each
	// announcer call taking its time; then the pass's tail.
	rest := func() {
		s.stepForward(p, peers, func() {
			s.stepLinger(p, peers, func() {
				s.stepTakeover(p, peers)
				s.tail(p, q, d)
			})
		})
	}
	switch d.Do {
	case lifecycle.Claim:
		claim := func(then func()) {
			s.effect(p, func() {
				// callOffLinger: its connections are its own again.
				if s.takeLinger(p) != nil {
					s.logf(h, "lingering called off: holds the VIP again")
				}
				s.setAddr(h, true, "claim: "+d.Reason)
				h.lingerRoute = false
				p.held, p.silenced = true, false
				p.retryAt = time.Time{}
				s.startTakeover(p)
			}, then)
		}
		if s.o.Bug == simBugAnnounceFirst {
			claim(func() { s.startForward(p, peers, rest) })
		} else {
			s.startForward(p, peers, func() { claim(rest) })
		}
		return
	case lifecycle.Release:
		s.abandonLinger(p, "release: "+d.Reason, "the release cuts the linger short", func() {
			s.effect(p, func() {
				if d.CloseClients {
					// Before the address goes: the resets leave from it.
					s.destroy(h.idx, "closeClients at a release: "+d.Reason, s.closeExcuse(p))
				}
				if s.hasAddrNow(h) {
					s.setAddr(h, false, "release: "+d.Reason)
				}
				p.held, p.handoffStarted, p.drainStarted, p.silenced = false, time.Time{}, time.Time{}, false
				p.adopted = false
			}, func() {
				// handoff.go's release: the forwarding goes after the
				// address (seed 807).
				s.stopForward(p, "this node releases the VIP", rest)
			})
		})
		return
	case lifecycle.Quiesce:
		s.startLinger(p, d.Reason, rest)
		return
	case lifecycle.Keep, lifecycle.Reassert:
		if p.silenced || d.Do == lifecycle.Reassert {
			s.garp(h.idx) // reannounce
		}
		p.silenced = false
	case lifecycle.Handoff, lifecycle.Drain:
		p.silenced = true
	}
	rest()
}

// effect is an announcer call: the kernel's change comes after its
// time (longer on a slow host), then the pass goes on; a kill armed for
// this moment strikes between the two.
func (s *sim) effect(p *simProc, kernel, then func()) { s.effectR(p, s.rng, kernel, then) }

// effectR is effect with its time drawn from rng (the chain's calls draw
// from the clients' stream: a seed's faults stay what they were before
// the chain was modelled).
func (s *sim) effectR(p *simProc, rng *rand.Rand, kernel, then func()) {
	p.busy = true
	d := 200*time.Microsecond + time.Duration(rng.IntN(1800))*time.Microsecond + p.h.slow
	s.after(d, func() {
		if p.dead {
			return
		}
		kernel()
		if p.h.killAtEffect {
			p.h.killAtEffect = false
			s.crash(p.h, "killed between two effects")
			return
		}
		p.busy = false
		then()
		if p.passAfter {
			p.passAfter = false
			s.pass(p, "event during the call")
		}
	})
}

// tail is the end of reconcile: confirm an adoption, drive the lease,
// track quorum, publish the metadata, and set the loop's timer.
func (s *sim) tail(p *simProc, q lease.Quorum, d lifecycle.Decision) {
	h := p.h
	now := p.now()
	if p.adopted && p.held && lifecycle.ConfirmAdoption(d.Do, p.ls.CanHold(), p.ls.Adopting(), p.ls.Evidence()) {
		p.adopted = false
		if s.hasAddrNow(h) {
			h.addrUntil = 0
			s.logf(h, "adoption confirmed by the lease: address forever again")
		}
	}
	if !p.held {
		p.adopted = false
	}
	want := d.WantsFence || p.held
	if p.fence.SetDriving(want, now) {
		members := p.snapshot()
		addrs := map[string]netip.AddrPort{}
		for _, m := range members {
			addrs[m.Name] = netip.MustParseAddrPort(m.Address)
		}
		p.lease.SetBase(q.Base, q.Required, addrs, p.fence.Driving())
	}
	if !q.OK && q.Required {
		if !p.quorumLogged {
			s.logf(h, "no quorum: %d of %d", q.Alive, q.Known)
		}
		p.quorumLogged = true
	} else {
		if p.quorumLogged {
			s.logf(h, "quorum regained")
			p.quorumRegained = now
		}
		p.quorumLogged = false
	}
	if m := p.localMeta(); !sameSimMeta(m, p.meta) {
		p.meta = m
		h.metaVer++
		s.broadcast(p, false)
	}
	s.rearm(p)
	// loop.go's timer: Tick while something is time-driven, else IdleTick.
	next := simIdleTick
	if !p.handoffStarted.IsZero() || !p.retryAt.IsZero() || p.settling || p.adopted || p.shuttingDown {
		next = simTick
	}
	at := s.now + h.real(now.Add(next)) - h.real(now)
	if p.tickAt <= s.now || at < p.tickAt {
		p.tickGen++
		g := p.tickGen
		p.tickAt = at
		s.at(at, func() {
			if p.tickGen == g {
				s.pass(p, "timer")
			}
		})
	}
	if p.shuttingDown && (!p.held || !now.Before(p.shutdownBy)) {
		// run.go's shutdown: the lingering (stepLinger hurries it) gets
		// quiesceMax and its slack to close at idle moments.
		if p.linger != nil && p.shutLingerBy == 0 {
			p.shutLingerBy = s.now + quiesceMax + quiesceSlack
		}
		if p.linger == nil || s.now >= p.shutLingerBy {
			s.finishShutdown(p)
		}
	}
}

func sameSimMeta(a, b NodeMeta) bool {
	if a.Valid != b.Valid || a.Withdrawn != b.Withdrawn || a.Leaving != b.Leaving || a.Fenced != b.Fenced ||
		a.RestartGrace != b.RestartGrace || len(a.VIPs) != len(b.VIPs) {
		return false
	}
	for k, v := range a.VIPs {
		if b.VIPs[k] != v {
			return false
		}
	}
	return true
}

// --- stops ---

// stop is systemctl stop/restart: a restart in place when every member
// answers the announcement (restart.go), else (and for a stop) the
// shutdown handoff (run.go's shutdown).
func (s *sim) stop(h *simHost, restart bool) {
	p := h.proc
	if p == nil || p.dead || p.shuttingDown || h.restarts > 0 {
		return
	}
	if restart && p.handoffUnderway() && !p.finishing && s.o.Bug != simBugRestartMidHandoff {
		h.restarts++
		s.finishHandoffs(p, func(left bool) {
			h.restarts--
			if left {
				s.logf(h, "restart: a handoff did not finish in time: hands off instead")
				s.beginShutdown(p, true)
				return
			}
			s.stop(h, true)
		})
		return
	}
	if restart && p.held && !p.fence.Fenced() {
		var alive []string
		for _, m := range p.snapshot() {
			if m.State == StateAlive || m.State == StateSuspect {
				alive = append(alive, m.Name)
			}
		}
		s.logf(h, "restart in place: announces it to %v", alive)
		var first uint64
		deadline := s.now + restartAnnounceTimeout
		var round func()
		round = func() {
			if p.dead {
				return
			}
			missing := p.lease.RestartRound(simGrace, alive, &first)
			s.rearm(p)
			switch {
			case len(missing) == 0:
				s.exitForRestart(p)
			case s.now >= deadline:
				s.logf(h, "restart in place: no answer from %v: hands off instead", missing)
				s.beginShutdown(p, true)
			default:
				s.after(20*time.Millisecond, round)
			}
		}
		// The record and the address's lifetime come first.
		h.rec, h.recHeld, h.recHealthy, h.recUntil = true, true, p.healthy, p.now().Add(recordHold(simGrace))
		h.addrUntil = s.now + h.real(p.now().Add(restartLifetime(simGrace))) - h.real(p.now())
		round()
		return
	}
	s.beginShutdown(p, restart)
}

func (s *sim) exitForRestart(p *simProc) {
	h := p.h
	p.dead = true
	s.logf(h, "vipd exits for a restart in place (VIP kept, lifetime %s)", restartLifetime(simGrace))
	// Close removes the process's chain rules.
	s.rulesGone(h, "vipd exits")
	p.restartGrace = simGrace
	p.meta = p.localMeta()
	h.metaVer++
	s.broadcast(p, false)
	s.restartLater(h, 100*time.Millisecond+time.Duration(s.rng.IntN(2500))*time.Millisecond, "restart in place")
}

func (s *sim) beginShutdown(p *simProc, restart bool) {
	h := p.h
	if h.rec {
		h.rec = false
		if s.hasAddrNow(h) {
			h.addrUntil = 0 // undo: forever again
		}
	}
	p.shuttingDown = true
	p.shutdownBy = p.now().Add(simHandoffTO)
	s.logf(h, "shutting down: hands the VIP off")
	s.pass(p, "shutdown")
	if restart {
		h.restarts++
		s.after(simHandoffTO+2*time.Second, func() {
			h.restarts--
			s.start(h, "restart after a stop")
		})
	}
}

func (s *sim) finishShutdown(p *simProc) {
	h := p.h
	if p.dead {
		return
	}
	if p.linger != nil {
		l := p.linger
		l.gen++
		l.done = true
		s.destroy(h.idx, "shutting down", "a shutdown closes what is left after quiesceMax")
		s.takeLinger(p)
	}
	s.rulesGone(h, "vipd stops")
	p.fwd = nil
	if p.held && s.hasAddrNow(h) {
		s.setAddr(h, false, "shutting down")
	}
	p.held = false
	p.meta = p.localMeta()
	h.metaVer++
	s.broadcast(p, false)
	s.leave(p)
	p.dead = true
	s.logf(h, "vipd stopped")
	s.check()
}
