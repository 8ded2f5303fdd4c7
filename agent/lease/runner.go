package lease

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Config configures a Runner.
type Config struct {
	// Self is this node's name.
	Self string
	// Timers are the lease's timers (FastTimers, LANTimers).
	Timers Timers
	// Grid is the beat the rounds fall on. [a grid from NewRunner's call]
	Grid Grid
	// Now is the clock; it must carry a monotonic reading, as time.Now
	// does. [time.Now]
	Now func() time.Time
	// Send sends a heartbeat's payload to a member's membership address.
	// It must not block for long: it is called from Receive (an answer)
	// and from the runner's goroutine. Required.
	Send func(payload []byte, to netip.AddrPort)
	// Wake is called when this node's fence or the set of members gone
	// changed: the agent's loop then takes a State at once. It must not
	// block. Required.
	Wake func()
	// ValidName reports whether a name a heartbeat carries can name a
	// member; a heartbeat with another name is dropped. [any non-empty
	// name]
	ValidName func(string) bool
}

// Runner runs this node's lease: it ticks when the tracker has something
// to do (a driver's round, the alarm, a silent driver's deadline), answers
// heartbeats from the packet reader as they arrive, probes the membership
// port of members gone silent, and wakes the agent's loop when this node's
// fence or the set of members gone changes. The loop tells it the quorum
// base every pass (SetBase) and reads its State. Its methods are safe for
// concurrent use.
type Runner struct {
	now       func() time.Time
	send      func(payload []byte, to netip.AddrPort)
	wake      func()
	validName func(string) bool

	mu       sync.Mutex
	tr       *tracker
	base     []string // the quorum base, set by the loop
	required bool     // quorum required: the fence applies
	// requiredSince is when the fence last started to apply (the third
	// member joined): see stateLocked.
	requiredSince time.Time
	addrs         map[string]netip.AddrPort // member -> membership address
	probing       map[string]bool
	last          State
	// alarm wakes run: at the tracker's next deadline, or at once after a
	// kick. kicked keeps a kick from being moved later by a heartbeat
	// that arrives before run took it.
	alarm  Alarm
	kicked bool
	// holdUntil: this node may hold VIPs without evidence until then
	// (HoldUntil).
	holdUntil time.Time
	// armed is the deadline the alarm is set for (zero: disarmed, fired
	// or kicked). A heartbeat that leaves the next deadline where it was
	// (a driver's next round; most heartbeats, with many members) costs
	// no system call: on a virtual machine re-arming a kernel timer costs
	// a trip to the hypervisor.
	armed time.Time
}

// NewRunner returns the runner of this node's lease, with a new epoch (a
// restarted process numbers its heartbeats afresh). Run runs it.
func NewRunner(c Config) *Runner {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ValidName == nil {
		c.ValidName = func(s string) bool { return s != "" }
	}
	r := &Runner{
		now: c.Now, send: c.Send, wake: c.Wake, validName: c.ValidName,
		tr:      newTracker(c.Self, c.Timers, c.Now(), rand.Uint64()),
		addrs:   map[string]netip.AddrPort{},
		probing: map[string]bool{},
		alarm:   NewAlarm(),
	}
	if !c.Grid.Base.IsZero() {
		r.tr.grid = c.Grid
	}
	return r
}

// SetBase tells the lease the quorum base (every known member's name,
// this node's included), whether quorum is required (the fence applies),
// where members listen (their membership addresses) and whether this node
// drives rounds (it holds a VIP or is about to claim one: Fence.Driving).
// The loop calls it every pass.
func (r *Runner) SetBase(base []string, required bool, addrs map[string]netip.AddrPort, driver bool) {
	r.mu.Lock()
	grown := !slices.Equal(r.base, base)
	if grown {
		r.base = slices.Clone(base)
	}
	if required && !r.required {
		r.requiredSince = r.now()
	}
	r.required = required
	for n, ap := range addrs {
		if ap.IsValid() {
			r.addrs[n] = ap
		}
	}
	// A new base (a member joined or left) runs a tick at once: a driver's
	// first heartbeat to a new member, and its answer, should not wait
	// for the next beat.
	if driver != r.tr.driver || grown {
		r.kicked, r.armed = true, time.Time{}
		r.alarm.Set(0)
	}
	r.tr.setDriver(driver)
	r.mu.Unlock()
}

// HoldUntil lets this node hold VIPs without evidence until t: it adopted
// them from its previous process, which told the peers it was restarting
// in place and its successor would be back by t, so none of them claims
// before then. After t the fence applies as to any holder, and so it does
// from this process's first majority evidence on: the members that
// answered heard its new epoch, which ended their grace.
func (r *Runner) HoldUntil(t time.Time) {
	r.mu.Lock()
	r.holdUntil = t
	r.mu.Unlock()
}

// MarkRestarting records that name said, in its metadata, that it is
// restarting in place with grace: as its heartbeat saying so would, it is
// taken for alive and holding until its next process is heard or the
// grace ends. The grace counts from now (this node's clock), and a
// repeat does not stretch it.
func (r *Runner) MarkRestarting(name string, grace time.Duration) {
	now := r.now()
	r.mu.Lock()
	r.tr.markRestarting(name, grace, now)
	changed := r.publishLocked(now)
	r.resetLocked(r.tr.next(r.base, now), now)
	r.mu.Unlock()
	if changed {
		r.wake()
	}
}

// AnnounceRestart tells every member that this node is exiting for a
// restart in place and its next process will be back within grace: from
// now on each heartbeat it sends says so, and it asks all to answer,
// again every announceRetry, until every member in want has answered (an
// answer to a heartbeat that said so: the member has taken it) or ctx
// ends. It returns the members of want that did not answer.
func (r *Runner) AnnounceRestart(ctx context.Context, grace time.Duration, want []string) (missing []string) {
	t := time.NewTicker(announceRetry)
	defer t.Stop()
	var first uint64
	for {
		if missing = r.restartRound(grace, want, &first); len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return missing
		case <-t.C:
		}
	}
}

// restartRound is one round of AnnounceRestart: it returns the members of
// want that have not answered a heartbeat saying so since the first
// (*first, set by the first round) and, while some have not, sends every
// member another.
func (r *Runner) restartRound(grace time.Duration, want []string, first *uint64) (missing []string) {
	now := r.now()
	r.mu.Lock()
	r.tr.restart = grace
	hb := r.tr.heartbeat(r.base, "", true, false, now)
	if *first == 0 {
		*first = hb.Seq
	}
	var targets []netip.AddrPort
	for _, n := range r.base {
		if a := r.addrs[n]; n != r.tr.self && a.IsValid() {
			targets = append(targets, a)
		}
	}
	for _, n := range want {
		if p := r.tr.peers[n]; n != r.tr.self && (p == nil || p.ackedSeq < *first) {
			missing = append(missing, n)
		}
	}
	r.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	if p, err := hb.encode(); err == nil {
		for _, a := range targets {
			r.send(p, a)
		}
	}
	return missing
}

// announceRetry is how often AnnounceRestart asks again.
const announceRetry = 20 * time.Millisecond

// RecentlyHeard returns the members whose heartbeat arrived less than
// Claim ago, sorted: direct evidence that they are alive and reach this
// node (CountQuorum counts them alive whatever membership says). A holder
// hears each member at least every two rounds (with three members it asks
// one per round, in turn; with more, all), so Claim (four rounds) leaves
// room for a loaded host. It decides nothing about safety: the fence does.
func (r *Runner) RecentlyHeard() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tr.heardWithin(r.tr.cfg.Claim, r.now())
}

// State returns the lease's state now.
func (r *Runner) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(r.now())
}

func (r *Runner) stateLocked(now time.Time) State {
	// The maps are made when they get an entry (a nil map reads as
	// empty): the state is built at every heartbeat received, and most
	// of them stay empty.
	st := State{timers: r.tr.cfg, required: r.required}
	for n, p := range r.tr.peers {
		if p.heardWithin(r.tr.cfg.Claim, now) {
			put(&st.heard, n, true)
		}
		if p.restarting(now) {
			put(&st.restarting, n, true)
		}
	}
	st.canHold, st.evidence = r.tr.fence(r.base, r.required, now)
	if st.canHold && r.required && !st.evidence.IsZero() {
		// A majority answered this process: they heard its epoch, which
		// ended their restart grace, so from now on it holds only with
		// evidence, like any holder, however far HoldUntil's deadline.
		r.holdUntil = time.Time{}
	}
	if !st.canHold && now.Before(r.holdUntil) {
		// VIPs adopted from this node's previous process (HoldUntil):
		// the peers wait for it until then.
		st.canHold, st.adopting = true, true
	}
	if !st.canHold && r.required && now.Sub(r.requiredSince) < r.tr.cfg.Interval {
		// The fence has just started to apply (a cluster of two grew to
		// three): a holder has had no reason to collect a majority's
		// answers yet. One interval for its first round's answers (a
		// millisecond on a LAN), instead of releasing at once and
		// moving the VIP because a member joined. Nobody can claim in
		// that time: that needs a majority's votes after Claim (> Release
		// > Interval) of silence.
		st.canHold = true
	}
	for _, n := range r.base {
		if n != r.tr.self && r.tr.expired(n, r.base, r.required, now) {
			put(&st.expired, n, r.tr.peers[n].goneAt)
		}
		if p := r.tr.peers[n]; n != r.tr.self && p != nil && !p.goneAt.IsZero() {
			put(&st.lastGone, n, p.goneAt)
		}
		if p := r.tr.peers[n]; n != r.tr.self && p != nil && p.driver && !p.gone {
			put(&st.drivers, n, true)
		}
	}
	return st
}

// put sets (*m)[k] = v, making the map first if it is nil.
func put[V any](m *map[string]V, k string, v V) {
	if *m == nil {
		*m = map[string]V{}
	}
	(*m)[k] = v
}

// publishLocked records the state and reports whether the loop should
// know.
func (r *Runner) publishLocked(now time.Time) bool {
	st := r.stateLocked(now)
	changed := !st.sameAs(r.last)
	r.last = st
	return changed
}

// Receive takes a heartbeat's payload from the packet reader, answers it
// at once if it asks, and reschedules the tick (a heartbeat from a driver
// moves its silence deadline). A payload that does not decode is dropped.
func (r *Runner) Receive(b []byte, from netip.AddrPort) {
	hb, err := decodeHeartbeat(b, r.validName)
	if err != nil {
		return // not a heartbeat: membership admitted the sender
	}
	now := r.now()
	r.mu.Lock()
	reply, ok := r.tr.receive(hb, r.base, now)
	changed := r.publishLocked(now)
	r.resetLocked(r.tr.next(r.base, now), now)
	r.mu.Unlock()
	if ok {
		if p, err := reply.encode(); err == nil {
			r.send(p, from)
		}
	}
	if changed {
		r.wake()
	}
}

// resetLocked arms the alarm for next (zero: disarms it), unless a kick
// is pending or it is armed for next already.
func (r *Runner) resetLocked(next, now time.Time) {
	switch {
	case r.kicked, next.Equal(r.armed):
	case next.IsZero():
		r.alarm.Stop()
	default:
		r.alarm.Set(next.Sub(now))
	}
	if !r.kicked {
		r.armed = next
	}
}

// Run ticks until ctx ends, and returns after the probes it started have
// ended too.
func (r *Runner) Run(ctx context.Context) {
	var probes sync.WaitGroup
	defer probes.Wait()
	defer r.alarm.Close()
	defer context.AfterFunc(ctx, r.alarm.Close)()
	for r.alarm.Wait() {
		for _, n := range r.fire() {
			probes.Go(func() { r.probe(ctx, n) })
		}
	}
}

// fire is one tick of the alarm: it sends the heartbeats due, wakes the
// loop when the state changed, and returns the silent members to probe
// (marked as being probed).
func (r *Runner) fire() (silentProbes []string) {
	now := r.now()
	r.mu.Lock()
	r.kicked, r.armed = false, time.Time{} // a one-shot alarm that fired is disarmed
	sends, next := r.tr.tick(r.base, now)
	silent := r.tr.silent(r.base, now)
	changed := r.publishLocked(now)
	for _, n := range silent {
		if r.addrs[n].IsValid() && !r.probing[n] {
			r.probing[n] = true
			silentProbes = append(silentProbes, n)
		}
	}
	var targets []netip.AddrPort
	for _, n := range r.base {
		if a := r.addrs[n]; n != r.tr.self && a.IsValid() {
			targets = append(targets, a)
		}
	}
	r.resetLocked(next, now)
	r.mu.Unlock()
	for _, s := range sends {
		p, err := s.HB.encode()
		if err != nil {
			continue
		}
		for _, a := range targets {
			r.send(p, a)
		}
	}
	if changed {
		r.wake()
	}
	return silentProbes
}
