package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/vipd/vipd/agent/apipb"
)

// leaseRunner runs this node's lease (lease.go): it sends a heartbeat to
// every member each interval, takes theirs from membership, probes the
// membership port of members gone silent, and wakes the loop when this
// node's fence or the set of members gone changes. The loop reads its
// state each pass.
type leaseRunner struct {
	now  func() time.Time
	send func([]byte)
	wake func()

	mu       sync.Mutex
	tr       *leaseTracker
	base     []string          // the quorum base, set by the loop
	required bool              // quorum required: the fence applies
	addrs    map[string]string // member -> membership address, for probes
	probing  map[string]bool
	last     leaseState
}

// leaseState is what the loop needs of the lease.
type leaseState struct {
	required bool
	fenced   bool
	evidence time.Time       // the newest majority evidence (zero: none)
	expired  map[string]bool // members gone, on positive evidence
}

func (s leaseState) sameAs(o leaseState) bool {
	return s.fenced == o.fenced && s.required == o.required && len(s.expired) == len(o.expired) &&
		func() bool {
			for n := range s.expired {
				if !o.expired[n] {
					return false
				}
			}
			return true
		}()
}

func newLeaseRunner(self string, cfg leaseConfig, now func() time.Time, send func([]byte), wake func()) *leaseRunner {
	return &leaseRunner{
		now: now, send: send, wake: wake,
		tr:      newLeaseTracker(self, cfg, now(), rand.Uint64()),
		addrs:   map[string]string{},
		probing: map[string]bool{},
	}
}

// setBase tells the lease the quorum base, whether quorum is required and
// where members listen (the loop calls it every pass).
func (r *leaseRunner) setBase(base []string, required bool, members []memberInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.base, base) {
		r.base = slices.Clone(base)
	}
	r.required = required
	for _, m := range members {
		r.addrs[m.Name] = m.Address
	}
}

// state computes the lease's state now.
func (r *leaseRunner) state() leaseState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(r.now())
}

func (r *leaseRunner) stateLocked(now time.Time) leaseState {
	st := leaseState{required: r.required, expired: map[string]bool{}}
	ok, ev := r.tr.fence(r.base, r.required, now)
	st.fenced, st.evidence = !ok, ev
	for _, n := range r.base {
		if n != r.tr.self && r.tr.expired(n, r.base, r.required, now) {
			st.expired[n] = true
		}
	}
	return st
}

// receive takes a heartbeat from membership.
func (r *leaseRunner) receive(b []byte) {
	hb, err := decodeHeartbeat(b)
	if err != nil {
		return // not a heartbeat, or garbage: membership admitted the sender
	}
	r.mu.Lock()
	r.tr.receive(hb, r.now())
	r.mu.Unlock()
}

// run beats every interval until ctx ends.
func (r *leaseRunner) run(ctx context.Context, goroutines *sync.WaitGroup) {
	t := time.NewTicker(r.tr.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := r.now()
		r.mu.Lock()
		hb := r.tr.beat(r.base, now)
		silent := r.tr.silent(r.base, now)
		st := r.stateLocked(now)
		changed := !st.sameAs(r.last)
		r.last = st
		var probes []string
		for _, n := range silent {
			if addr := r.addrs[n]; addr != "" && !r.probing[n] {
				r.probing[n] = true
				probes = append(probes, n)
			}
		}
		r.mu.Unlock()
		if b, err := hb.encode(); err == nil {
			r.send(b)
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
	timeout := 2 * r.tr.cfg.Interval
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.probing, name)
		r.mu.Unlock()
	}()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(pctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		r.mu.Lock()
		r.tr.refused(name, r.now())
		st := r.stateLocked(r.now())
		changed := !st.sameAs(r.last)
		r.last = st
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
	case s.fenced:
		fs.State = "expired"
	default:
		fs.State = "held"
	}
	if !s.evidence.IsZero() {
		fs.EvidenceAgeMs = now.Sub(s.evidence).Milliseconds()
	}
	return fs
}
