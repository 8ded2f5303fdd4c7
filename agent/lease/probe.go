package lease

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// probe connects to a silent member's membership port: a refusal is
// positive evidence its vipd is gone (the host answers, nothing listens).
// A timeout or a connection proves nothing either way.
func (r *Runner) probe(ctx context.Context, name string) {
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
		r.noteRefused(name)
	}
}

// noteRefused records that name's membership port refused a connection,
// and wakes the loop when that changed the state.
func (r *Runner) noteRefused(name string) {
	now := r.now()
	r.mu.Lock()
	r.tr.refused(name, now)
	changed := r.publishLocked(now)
	r.mu.Unlock()
	if changed {
		r.wake()
	}
}
