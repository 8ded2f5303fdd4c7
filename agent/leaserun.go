package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/vipd/vipd/agent/apipb"
)

// leaseRunner runs this node's lease (lease.go): it ticks when the tracker
// has something to do (a driver's round, the alarm, a silent driver's
// deadline), answers heartbeats from the packet reader as they arrive,
// probes the membership port of members gone silent, and wakes the loop
// when this node's fence or the set of members gone changes. The loop
// reads its state each pass.
type leaseRunner struct {
	now  func() time.Time
	send func(payload []byte, to netip.AddrPort)
	wake func()

	mu       sync.Mutex
	tr       *leaseTracker
	base     []string // the quorum base, set by the loop
	required bool     // quorum required: the fence applies
	// requiredSince is when the fence last started to apply (the third
	// member joined): see stateLocked.
	requiredSince time.Time
	addrs         map[string]netip.AddrPort // member -> membership address
	probing       map[string]bool
	last          leaseState
	// alarm wakes run: at the tracker's next deadline, or at once after a
	// kick. kicked keeps a kick from being moved later by a heartbeat
	// that arrives before run took it.
	alarm  alarm
	kicked bool
	// armed is the deadline the alarm is set for (zero: disarmed, fired
	// or kicked). A heartbeat that leaves the next deadline where it was
	// (a driver's next round; most heartbeats, with many members) costs
	// no system call: on a virtual machine re-arming a kernel timer costs
	// a trip to the hypervisor.
	armed time.Time
}

// leaseState is what the loop needs of the lease.
type leaseState struct {
	required bool
	canHold  bool                 // fence valid now (or not required)
	evidence time.Time            // the newest majority evidence (zero: none)
	expired  map[string]time.Time // members gone, on positive evidence, and since when
	// lastGone is, for every member ever taken for gone (heard again
	// since or not), when it last was: whatever it published before then
	// about holding VIPs is no longer true (its fence had expired).
	lastGone map[string]time.Time
	// heard are the members whose heartbeat arrived less than Claim ago
	// (recentlyHeard). Not compared by sameAs: it changes with every
	// heartbeat, and only matters when membership changes, which wakes
	// the loop anyway.
	heard map[string]bool
}

func (s leaseState) sameAs(o leaseState) bool {
	if s.canHold != o.canHold || s.required != o.required || len(s.expired) != len(o.expired) {
		return false
	}
	for n := range s.expired {
		if _, ok := o.expired[n]; !ok {
			return false
		}
	}
	return true
}

func newLeaseRunner(self string, cfg leaseConfig, g grid, now func() time.Time, send func([]byte, netip.AddrPort), wake func()) *leaseRunner {
	r := &leaseRunner{
		now: now, send: send, wake: wake,
		tr:      newLeaseTracker(self, cfg, now(), rand.Uint64()),
		addrs:   map[string]netip.AddrPort{},
		probing: map[string]bool{},
		alarm:   newAlarm(),
	}
	r.tr.grid = g
	return r
}

// setBase tells the lease the quorum base, whether quorum is required,
// where members listen and whether this node drives rounds (it holds a VIP
// or is about to claim one). The loop calls it every pass.
func (r *leaseRunner) setBase(base []string, required bool, members []memberInfo, driver bool) {
	r.mu.Lock()
	grown := !slices.Equal(r.base, base)
	if grown {
		r.base = slices.Clone(base)
	}
	if required && !r.required {
		r.requiredSince = r.now()
	}
	r.required = required
	for _, m := range members {
		if ap, err := netip.ParseAddrPort(m.Address); err == nil {
			r.addrs[m.Name] = ap
		}
	}
	// A new base (a member joined or left) runs a tick at once: a driver's
	// first heartbeat to a new member, and its answer, should not wait
	// for the next beat.
	if driver != r.tr.driver || grown {
		r.kicked, r.armed = true, time.Time{}
		r.alarm.set(0)
	}
	r.tr.setDriver(driver)
	r.mu.Unlock()
}

// recentlyHeard returns the members whose heartbeat arrived less than
// Claim ago, sorted: direct evidence that they are alive and reach this
// node (hasQuorum counts them alive whatever membership says). A holder
// hears each member at least every two rounds (with three members it asks
// one per round, in turn; with more, all), so Claim (four rounds) leaves
// room for a loaded host. It decides nothing about safety: the fence does.
func (r *leaseRunner) recentlyHeard() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tr.heardWithin(r.tr.cfg.Claim, r.now())
}

// state computes the lease's state now.
func (r *leaseRunner) state() leaseState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(r.now())
}

func (r *leaseRunner) stateLocked(now time.Time) leaseState {
	st := leaseState{required: r.required, expired: map[string]time.Time{}, lastGone: map[string]time.Time{}, heard: map[string]bool{}}
	for _, n := range r.tr.heardWithin(r.tr.cfg.Claim, now) {
		st.heard[n] = true
	}
	st.canHold, st.evidence = r.tr.fence(r.base, r.required, now)
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
			st.expired[n] = r.tr.peers[n].goneAt
		}
		if p := r.tr.peers[n]; n != r.tr.self && p != nil && !p.goneAt.IsZero() {
			st.lastGone[n] = p.goneAt
		}
	}
	return st
}

// publishLocked records the state and reports whether the loop should
// know.
func (r *leaseRunner) publishLocked(now time.Time) bool {
	st := r.stateLocked(now)
	changed := !st.sameAs(r.last)
	r.last = st
	return changed
}

// receive takes a heartbeat from the packet reader, answers it at once if
// it asks, and reschedules the tick (a heartbeat from a driver moves its
// silence deadline).
func (r *leaseRunner) receive(b []byte, from netip.AddrPort) {
	hb, err := decodeHeartbeat(b)
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
func (r *leaseRunner) resetLocked(next, now time.Time) {
	switch {
	case r.kicked, next.Equal(r.armed):
	case next.IsZero():
		r.alarm.stop()
	default:
		r.alarm.set(next.Sub(now))
	}
	if !r.kicked {
		r.armed = next
	}
}

// run ticks until ctx ends.
func (r *leaseRunner) run(ctx context.Context, goroutines *sync.WaitGroup) {
	defer r.alarm.close()
	defer context.AfterFunc(ctx, r.alarm.close)()
	for r.alarm.wait() {
		now := r.now()
		r.mu.Lock()
		r.kicked, r.armed = false, time.Time{} // a one-shot alarm that fired is disarmed
		sends, next := r.tr.tick(r.base, now)
		silent := r.tr.silent(r.base, now)
		changed := r.publishLocked(now)
		var probes []string
		for _, n := range silent {
			if r.addrs[n].IsValid() && !r.probing[n] {
				r.probing[n] = true
				probes = append(probes, n)
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
		for _, n := range probes {
			goroutines.Go(func() { r.probe(ctx, n) })
		}
	}
}

// probe connects to a silent member's membership port: a refusal is
// positive evidence its vipd is gone (the host answers, nothing listens).
// A timeout or a connection proves nothing either way.
func (r *leaseRunner) probe(ctx context.Context, name string) {
	r.mu.Lock()
	addr := r.addrs[name]
	timeout := r.tr.cfg.Interval
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.probing, name)
		r.mu.Unlock()
	}()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(pctx, "tcp", addr.String())
	if err == nil {
		conn.Close()
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		now := r.now()
		r.mu.Lock()
		r.tr.refused(name, now)
		changed := r.publishLocked(now)
		r.mu.Unlock()
		if changed {
			r.wake()
		}
	}
}

// fenceStatus is the fence as `vipctl status` shows it.
func (s leaseState) fenceStatus(cfg leaseConfig, now time.Time) *apipb.FenceStatus {
	fs := &apipb.FenceStatus{ReleaseAfterMs: cfg.Release.Milliseconds(), EvidenceAgeMs: -1}
	switch {
	case !s.required:
		fs.State = "off"
	case s.canHold:
		fs.State = "held"
	default:
		fs.State = "expired"
	}
	if !s.evidence.IsZero() {
		fs.EvidenceAgeMs = now.Sub(s.evidence).Milliseconds()
	}
	return fs
}
