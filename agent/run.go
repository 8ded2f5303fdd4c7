package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/agent/membership"
)

// Run runs the agent until ctx ends, then hands its VIPs off (bounded by
// cluster.handoff_timeout), leaves the cluster and returns. It returns
// only after every goroutine it started has ended.
func (a *Agent) Run(ctx context.Context) error {
	c := a.st.cfg
	if err := makeDir(c.StateDir, 0o750); err != nil {
		return fmt.Errorf("create state_dir: %w", err)
	}
	ws := loadWithdraw(c.StateDir)
	a.st.withdrawn, a.st.withdrawnSince = ws.Withdrawn, ws.Since
	if ws.Corrupt != nil {
		a.log.Error("withdraw flag unreadable; staying withdrawn until vipctl restore", "err", ws.Corrupt)
	} else if ws.Withdrawn {
		a.log.Info("starting withdrawn (flag set by vipctl withdraw; clear with vipctl restore)")
	}
	cache, err := loadPeerCache(c.StateDir)
	if err != nil {
		a.log.Error("peer cache", "err", err)
	}
	a.cache.set(cache)

	// Everything Run starts lives under bg, which ends after the shutdown
	// handoff (the handoff still needs membership, the announcers and the
	// API after ctx ended).
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		a.goroutines.Wait()
		if a.clients != nil && a.clients.backend != nil {
			a.clients.backend.Close()
		}
	}()
	defer stopBG()

	// What the previous process left for this one (a restart in place):
	// read before the announcers start, so the BGP speaker announces it
	// before its first session.
	ad := a.readAdoption(c)
	backends, err := a.opts.Backends(bg, c, a.log, ad.resumeRoutes(c))
	if err != nil {
		return fmt.Errorf("start announcers: %w", err)
	}
	a.backends = backends
	defer backends.Close()

	if err := a.setupVIPs(bg, c); err != nil {
		return err
	}
	// Leftovers from a crash or an earlier owner: no VIP is held until
	// this node has joined and won an election. That covers the addresses
	// a previous run recorded too, in case the configuration changed.
	if rec, err := loadRecorded(c.StateDir); err != nil {
		a.log.Warn("recorded VIP addresses", "err", err)
	} else if rec = slices.DeleteFunc(rec, func(t CleanupTarget) bool { _, kept := ad.vips[t.VIP]; return kept }); len(rec) > 0 && a.opts.RemoveAddresses != nil {
		if err := a.opts.RemoveAddresses(bg, rec); err != nil {
			a.log.Warn("remove recorded VIP addresses", "err", err)
		}
	}
	for _, v := range a.st.vips {
		if _, kept := ad.vips[v.cfg.Name]; kept {
			continue
		}
		if err := a.withdrawAddr(bg, v); err != nil {
			a.log.Warn("remove leftover VIP address", "vip", v.cfg.Name, "err", err)
		}
	}
	if err := saveRecorded(c.StateDir, nil); err != nil {
		a.log.Warn("record VIP addresses for cleanup", "err", err)
	}
	a.adopt(bg, ad)
	a.st.adoptUntil = ad.until

	if c.Cluster.KeyFile != "" {
		kr, err := membership.LoadKeyring(c.Cluster.KeyFile)
		if err != nil {
			return err
		}
		a.keyring = kr
	}
	ml, err := a.startMembership(ctx, bg)
	if err != nil {
		return err
	}
	if ml == nil {
		return nil // stopped while waiting for the bind address
	}
	a.members = ml
	a.goroutines.Go(func() { ml.RunPublisher(bg) })
	a.lease = lease.NewRunner(lease.Config{Self: a.self, Timers: leaseTimers(c.Cluster.FailureDetection), Grid: a.grid, Now: a.now,
		Send: ml.SendHeartbeat, Wake: a.wakeLoop, ValidName: config.ValidNodeName})
	ml.OnHeartbeat(a.lease.Receive)
	// Held on the previous process's word until its deadline: the peers
	// claim nothing before it.
	a.lease.HoldUntil(a.st.adoptUntil)
	a.goroutines.Go(func() { a.lease.Run(bg) })
	cb, err := a.opts.Conns()
	if err != nil {
		a.log.Warn("cannot read this host's TCP connections: the VIPs' clients are not reset or closed when a VIP moves", "err", err)
		cb = nil
	}
	a.clients = newClients(a, cb)
	ml.OnList(a.clients.receive)
	a.goroutines.Go(func() { a.clients.run(bg) })
	// A first status before the API serves: nothing held, nobody elected.
	members := ml.Members()
	q := hasQuorum(a.self, a.cache.get(), members, nil, c.Cluster.RequireQuorum)
	a.lease.SetBase(q.Base, q.Required, memberAddrs(members), false)
	a.st.lease = a.lease.State()
	a.publishSnapshot(members, a.view(members), q)

	api, err := a.serveAPI(bg)
	if err != nil {
		ml.Shutdown()
		return err
	}
	defer api.stop()

	if addr := c.API.MetricsAddress; addr != "" {
		if err := a.metrics.serve(bg, addr, &a.goroutines, func(err error) { a.log.Error("metrics server", "err", err) }); err != nil {
			ml.Shutdown()
			return err
		}
		a.log.Info("metrics listening", "address", addr)
	}

	a.st.checks = newHealthChecks(bg, a)
	a.st.checks.apply(a.st.vips)
	defer a.st.checks.stop()
	if a.opts.LinkEvents != nil {
		a.goroutines.Go(func() { a.watchLinks(bg) })
	}
	a.startNodeWatch(bg, c)

	a.joinAll(rejoinTargets(a.self, a.cache.get(), c.Cluster.PeerAddrs(), nil))
	a.goroutines.Go(func() { a.rejoinLoop(bg) })

	a.loop(ctx, bg)

	// Shutdown: make-before-break handoff, then leave.
	a.shutdown(bg)
	return nil
}

// bindRetry is how often start-up tries the bind address again while it is
// not configured yet; startExtend is how far each EXTEND_TIMEOUT_USEC pushes
// systemd's start timeout meanwhile.
const (
	bindRetry   = 250 * time.Millisecond
	startExtend = 60 * time.Second
)

// startMembership starts memberlist on cluster.bind_address. At boot the
// address may not be configured yet (network-online.target can be reached
// before DHCP or a network manager adds it): vipd then waits for it, saying
// so in its STATUS, instead of failing and running into systemd's start
// limit. It returns nil, nil when ctx ends while waiting. The first
// metadata is what this node holds once the address is there: VIPs taken
// over from the previous process that lapsed meanwhile are not in it
// (dropAdopted), so no peer hands its VIP to this node for them.
func (a *Agent) startMembership(ctx, work context.Context) (*membership.Membership[NodeMeta], error) {
	c := a.st.cfg
	waiting := false
	var extended time.Time
	t := time.NewTicker(bindRetry)
	defer t.Stop()
	for {
		// memberlist reports bind errors as text; try the port first to
		// tell "not configured yet" from "in use".
		err := a.probeBind(c.Cluster.BindAddr(), c.Cluster.BindPort)
		var ml *membership.Membership[NodeMeta]
		if err == nil {
			a.dropAdopted(work, true)
			var meta []byte
			if meta, err = a.encodeMeta(a.localMeta()); err != nil {
				return nil, err
			}
			ml, err = membership.New(c, membership.Options[NodeMeta]{Codec: metaCodec, Logger: a.log, Meta: meta, Keyring: a.keyring, Now: a.now,
				Rejected: func(reason string) { a.metrics.rejected.WithLabelValues(reason).Inc() }})
		}
		switch {
		case err == nil:
			if waiting {
				a.log.Info("cluster.bind_address is configured now", "address", c.Cluster.BindAddr())
			}
			return ml, nil
		case errors.Is(err, syscall.EADDRINUSE):
			return nil, fmt.Errorf("membership port %d on %s is in use by another process: find it with 'ss -ltnup sport = :%d', stop it, or set cluster.bind_port", c.Cluster.BindPort, c.Cluster.BindAddr(), c.Cluster.BindPort)
		case !errors.Is(err, syscall.EADDRNOTAVAIL):
			return nil, err
		}
		if !waiting {
			waiting = true
			msg := fmt.Sprintf("waiting for cluster.bind_address %s to be configured on an interface", c.Cluster.BindAddr())
			a.log.Warn(msg)
			a.opts.Notify("STATUS=" + msg)
		}
		// Tell systemd start-up goes on, so TimeoutStartSec does not kill
		// a vipd that waits for the network.
		if now := a.now(); now.Sub(extended) >= startExtend/2 {
			extended = now
			a.opts.Notify(fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", startExtend.Microseconds()))
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-t.C:
		}
	}
}

// shutdown hands every held VIP off (make-before-break), then leaves the
// cluster; or, when the stop is for a restart in place, leaves the VIPs to
// the next process (restartInPlace). It runs on the loop goroutine after
// the loop ended.
func (a *Agent) shutdown(ctx context.Context) {
	a.opts.Notify("STOPPING=1")
	if a.restartInPlace(ctx) {
		return
	}
	a.st.shuttingDown = true
	c := a.st.cfg
	limit := c.Cluster.HandoffTimeoutDuration()
	if c.BGP != nil {
		limit += c.BGP.GracefulShutdownDuration()
	}
	deadline := a.now().Add(limit)
	a.log.Info("shutting down: handing VIPs off", "timeout", limit)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for a.holdsAny() && a.now().Before(deadline) {
		a.reconcile(ctx)
		if !a.holdsAny() {
			break
		}
		select {
		case <-a.members.Changed():
		case <-t.C:
		}
	}
	// Lingering VIPs (handed off during the shutdown or before it) close
	// what is left at idle moments (stepLinger hurries them), within
	// quiesceMax: the connections go with this process.
	deadline = a.now().Add(quiesceMax + quiesceSlack)
	for a.lingersAny() && a.now().Before(deadline) {
		a.reconcile(ctx)
		if !a.lingersAny() {
			break
		}
		select {
		case <-a.members.Changed():
		case <-a.wake:
		case <-t.C:
		}
	}
	for _, v := range a.st.vips {
		if v.held {
			a.release(ctx, v, "shutting down")
		}
		a.abandonLinger(ctx, v, "shutting down")
	}
	a.noteHookStates()
	// The final metadata (leaving, holding nothing) must reach the others
	// before the leave message, or they record this node as dead instead
	// of left.
	if b, err := a.encodeMeta(a.localMeta()); err == nil {
		a.members.AdvertiseFinal(b, time.Second)
	}
	if err := a.members.Leave(2 * time.Second); err != nil {
		a.log.Warn("leave cluster", "err", err)
	}
	if err := a.members.Shutdown(); err != nil {
		a.log.Warn("stop memberlist", "err", err)
	}
	for _, w := range a.st.waiters {
		w.reply <- status.Error(codes.Aborted, "vipd is shutting down")
	}
	a.st.waiters = nil
	a.log.Info("stopped")
}

// lingersAny reports whether this node lingers on any VIP (chain.go).
func (a *Agent) lingersAny() bool {
	for _, v := range a.st.vips {
		if v.linger != nil {
			return true
		}
	}
	return false
}

func (a *Agent) holdsAny() bool {
	for _, v := range a.st.vips {
		if v.held {
			return true
		}
	}
	return false
}

// setupVIPs builds the VIP states of c, keeping the state of every VIP whose
// address, mode and interface are unchanged, and releasing VIPs that are
// removed or changed.
func (a *Agent) setupVIPs(ctx context.Context, c *config.Config) error {
	next := map[string]*vipState{}
	for _, vc := range c.VIPs {
		ann, err := a.backends.Announcer(vc)
		if err != nil {
			return fmt.Errorf("vip %s: %w", vc.Name, err)
		}
		st := a.st.vips[vc.Name]
		if st == nil || st.cfg.Addr() != vc.Addr() || st.cfg.Mode != vc.Mode || st.cfg.Interface != vc.Interface {
			if st != nil && st.held {
				a.release(ctx, st, "configuration changed")
				a.noteHookState(st)
			}
			if st != nil {
				a.abandonLinger(ctx, st, "configuration changed")
			}
			st = &vipState{healthy: vc.Health == nil, healthSince: a.now()}
		}
		st.cfg = vc
		st.ann = ann
		if vc.Health == nil {
			st.healthy, st.healthDetail = true, ""
		}
		next[vc.Name] = st
	}
	for name, st := range a.st.vips {
		if _, keep := next[name]; !keep && st.held {
			a.release(ctx, st, "removed from configuration")
			a.noteHookState(st)
		}
		if _, keep := next[name]; !keep {
			a.abandonLinger(ctx, st, "removed from configuration")
		}
	}
	a.st.vips = next
	a.setVIPInfo()
	ifaces := map[string]bool{}
	for _, v := range next {
		if v.cfg.Mode == config.ModeL2 {
			ifaces[v.cfg.Interface] = true
		}
	}
	a.l2Ifaces.Store(&ifaces)
	return nil
}

// localMeta is what this node advertises now.
func (a *Agent) localMeta() NodeMeta {
	fenced := a.st.fence.Fenced()
	m := NodeMeta{Valid: true, Withdrawn: a.st.withdrawn || a.st.shuttingDown, Leaving: a.st.shuttingDown, Fenced: fenced,
		Removed: a.st.decommissioned, NodeWithdrawn: a.st.node.withdrawn(), RestartAware: true, RestartGrace: a.st.restartGrace,
		PriorityAware: true, VIPs: map[uint32]VIPMeta{}}
	for _, v := range a.st.vips {
		down := v.down || v.failing || (fenced && v.cfg.Announce != config.AnnounceAll)
		vm := VIPMeta{Healthy: v.healthy && !down, Held: v.held, Down: down, Forwarding: v.held && v.forward != nil,
			Lingering: !v.held && v.linger != nil, EndLinger: v.held && v.forward != nil && a.st.finishing, Waiting: v.waiting}
		if p := v.cfg.Priority; p != config.DefaultPriority && p > 0 && p < 256 {
			vm.Priority = uint8(p)
		}
		if vm.Healthy || vm.Held || vm.Down || vm.Lingering || vm.Waiting || vm.Priority != 0 {
			m.VIPs[config.VIPKey(v.cfg.Name)] = vm
		}
	}
	return m
}

// leaseTimers are the lease's timers of a failure_detection mode.
func leaseTimers(mode string) lease.Timers {
	if mode == config.FailureDetectionLAN {
		return lease.LANTimers()
	}
	return lease.FastTimers()
}
