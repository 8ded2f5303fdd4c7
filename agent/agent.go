package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
)

// Announcer puts a VIP on the network and takes it off. The l2 and bgp
// packages implement it; both methods are idempotent.
type Announcer interface {
	Announce(ctx context.Context, addr netip.Addr) error
	Withdraw(ctx context.Context, addr netip.Addr) error
}

// Verifier is implemented by announcers that can read back what the network
// actually has. Verify reports whether addr is still announced the way
// Announce left it (the address on its interface, the route in the speaker's
// RIB); the agent calls Announce again when it is not, so Announce must
// restore whatever is missing rather than trust its own memory.
type Verifier interface {
	Verify(ctx context.Context, addr netip.Addr) (bool, error)
}

// Drainer is implemented by announcers that can tell the network a VIP is
// about to go before withdrawing it (BGP GRACEFUL_SHUTDOWN).
type Drainer interface {
	Drain(ctx context.Context, addr netip.Addr) error
}

// Backends builds the announcers for a configuration. Tests substitute
// fakes; cmd/vipd builds the real l2 and bgp ones.
type Backends interface {
	// Announcer returns the announcer of a VIP. It is called again after
	// a reload for every VIP, and may return the same value.
	Announcer(vip VIPConfig) (Announcer, error)
	// Reconfigure applies a reloaded configuration (BGP peers).
	Reconfigure(ctx context.Context, c *Config) error
	// BGPPeers reports BGP session state; nil without BGP.
	BGPPeers(ctx context.Context) []*apipb.BGPPeerStatus
	// Close releases sockets and stops speakers.
	Close() error
}

// Options are the agent's collaborators; zero values select the real ones.
type Options struct {
	Logger *slog.Logger
	// Backends creates announcers. Required.
	Backends func(ctx context.Context, c *Config, lg *slog.Logger) (Backends, error)
	// Notify sends a systemd notification ("READY=1", "STATUS=...",
	// "WATCHDOG=1"). [sd_notify through $NOTIFY_SOCKET]
	Notify func(state string)
	// Now is the clock. [time.Now]
	Now func() time.Time
	// Version is reported in status.
	Version string
	// Tick is the reconcile period while something is time-driven (a
	// handoff, a BGP drain, a claim settling, an announce retry, a withdraw
	// waiter); when nothing is, the loop wakes every IdleTick. Events wake it
	// at once either way. [100ms]
	Tick time.Duration
	// IdleTick is the reconcile period when nothing is pending. [1s]
	IdleTick time.Duration
	// LinkUp reports whether an L2 VIP's interface is up with carrier.
	// [/sys/class/net/IFACE/flags (IFF_UP) and carrier]
	LinkUp func(iface string) bool
	// LinkEvents calls changed with an interface's name whenever the
	// kernel reports a change to it, until ctx ends; the loop then reads
	// LinkUp at once instead of at its next tick. [none: links are read
	// at every tick only]
	LinkEvents func(ctx context.Context, changed func(iface string)) error
}

// Agent is one vipd node. Create it with New and run it with Run.
type Agent struct {
	opts Options
	log  *slog.Logger
	now  func() time.Time

	cfg      *Config // owned by the loop
	ml       *membership
	backends Backends

	reqs     chan func() // run on the loop goroutine
	reloadCh chan struct{}
	health   chan healthResult
	events   *broker

	cacheMu sync.Mutex
	cache   []CachedPeer

	// Loop-owned state.
	vips         map[string]*vipState
	withdrawn    bool
	withdrawErr  error
	shuttingDown bool
	waiters      []*withdrawWaiter
	healthCancel context.CancelFunc
	healthWG     sync.WaitGroup
	ready        bool
	lastStatus   string
	quorumLogged bool
	lastNow      time.Time // the clock at the previous pass
	// quorumRegained is when this node last regained quorum; its view of
	// the other side is stale for a moment after that.
	quorumRegained time.Time
	lastPing       time.Time

	self string // node name; fixed for the agent's life

	keyring    *memberlist.Keyring // nil without encryption
	metrics    *metrics
	conflicts  chan conflict
	rejoinKick chan struct{}
	linkCh     chan struct{}                   // an L2 VIP's interface changed
	l2Ifaces   atomic.Pointer[map[string]bool] // interfaces of L2 VIPs
	peers      atomic.Pointer[[]string]        // cluster.peers, for the rejoin loop
	// rejoinEvery makes the next rejoin join every known peer, alive or
	// not: a full state exchange after a link came back.
	rejoinEvery atomic.Bool
	watchWG     sync.WaitGroup
}

// conflict is another MAC answering for a VIP this node holds.
type conflict struct {
	vip string
	mac string
}

// ConflictWatcher is implemented by announcers that can see another host
// answering for a VIP (l2: ARP replies / neighbor advertisements from other
// MACs).
type ConflictWatcher interface {
	WatchConflicts(ctx context.Context, addr netip.Addr, fn func(mac net.HardwareAddr)) error
}

// vipState is the loop's actual and remembered state of one VIP.
type vipState struct {
	cfg       VIPConfig
	ann       Announcer
	held      bool
	healthy   bool
	owner     string
	reason    string
	release   time.Time // when this node started handing the VIP off
	drainFrom time.Time // when the BGP graceful-shutdown announcement went out
	// eligibleSince is when this node last became eligible for the VIP
	// (zero while it is not).
	eligibleSince time.Time
	// retryAt delays the next announce after a failure (backoff).
	retryAt time.Time
	backoff time.Duration
	// stopWatch ends the conflict watcher while the VIP is held.
	stopWatch    context.CancelFunc
	lastReassert time.Time
	// othersHeld: at the last pass another alive node reported holding it.
	othersHeld bool
	// down: the VIP's L2 interface is down or has no carrier.
	down bool
	// settling: this node waits out claimSettle before claiming it.
	settling bool
}

// claimSettle is how long a node that has just become eligible (start,
// restore, health recovered) waits before claiming a VIP by rank. Gossip
// reaches every node within a few gossip intervals; waiting lets the node
// see that another node already holds the VIP, so it does not take it away
// (a second interruption) when preempt is off. Failover is not delayed:
// the successor of a failed owner has been eligible all along.
const claimSettle = time.Second

// staleHolderSettle replaces claimSettle, for a node that has just regained
// quorum, when a member it last saw holding the VIP is dead in its view:
// after a partition heals, the returning side's view of the other side is
// stale until the rejoin's state exchange and the refutations arrive, and
// the "dead" holder may well be alive and serving.
const staleHolderSettle = 3 * time.Second

type withdrawWaiter struct {
	vips     []string
	force    bool // done once released here, even if no node takes over
	deadline time.Time
	reply    chan error
}

// New validates the collaborators; Run does the work.
func New(cfg *Config, opts Options) (*Agent, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Backends == nil {
		return nil, errors.New("agent: Options.Backends is required")
	}
	if opts.Notify == nil {
		opts.Notify = sdNotify
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Tick == 0 {
		opts.Tick = 100 * time.Millisecond
	}
	if opts.IdleTick == 0 {
		opts.IdleTick = time.Second
	}
	a := &Agent{
		opts:       opts,
		log:        opts.Logger,
		now:        opts.Now,
		cfg:        cfg,
		reqs:       make(chan func()),
		reloadCh:   make(chan struct{}, 1),
		health:     make(chan healthResult, 16),
		events:     newBroker(),
		vips:       map[string]*vipState{},
		self:       cfg.NodeName,
		conflicts:  make(chan conflict, 16),
		rejoinKick: make(chan struct{}, 1),
		linkCh:     make(chan struct{}, 1),
	}
	a.peers.Store(&cfg.Cluster.peerAddrs)
	a.metrics = newMetrics(a.bgpPeerMetrics)
	return a, nil
}

// bgpPeerMetrics feeds the BGP collector; backends are set once in Run.
func (a *Agent) bgpPeerMetrics(ctx context.Context) []bgpPeerMetric {
	b := a.backends
	if b == nil {
		return nil
	}
	var out []bgpPeerMetric
	for _, p := range b.BGPPeers(ctx) {
		out = append(out, bgpPeerMetric{Peer: p.Address, Established: p.State == "established", Received: p.Received, Advertised: p.Advertised})
	}
	return out
}

// Reload asks the agent to re-read its configuration file. An invalid file
// keeps the running configuration; every problem is logged.
func (a *Agent) Reload() {
	select {
	case a.reloadCh <- struct{}{}:
	default:
	}
}

// Run runs the agent until ctx ends, then hands its VIPs off (bounded by
// cluster.handoff_timeout), leaves the cluster and returns. It returns
// only after every goroutine it started has ended.
func (a *Agent) Run(ctx context.Context) error {
	c := a.cfg
	if err := os.MkdirAll(c.StateDir, 0o750); err != nil {
		return fmt.Errorf("create state_dir: %w", err)
	}
	ws := loadWithdraw(c.StateDir)
	a.withdrawn, a.withdrawErr = ws.Withdrawn, ws.Corrupt
	if ws.Corrupt != nil {
		a.log.Error("withdraw flag unreadable; staying withdrawn until vipctl restore", "err", ws.Corrupt)
	} else if ws.Withdrawn {
		a.log.Info("starting withdrawn (flag set by vipctl withdraw; clear with vipctl restore)")
	}
	cache, err := loadPeerCache(c.StateDir)
	if err != nil {
		a.log.Error("peer cache", "err", err)
	}
	a.setCache(cache)

	// Background work that lives as long as Run: its own context, so the
	// shutdown handoff can still use it after ctx ends.
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()

	backends, err := a.opts.Backends(bg, c, a.log)
	if err != nil {
		return fmt.Errorf("start announcers: %w", err)
	}
	a.backends = backends
	defer backends.Close()

	if err := a.setupVIPs(bg, c); err != nil {
		return err
	}
	// Leftovers from a crash or an earlier owner: no VIP is held until
	// this node has joined and won an election.
	for _, v := range a.vips {
		if err := v.ann.Withdraw(bg, v.cfg.addr); err != nil {
			a.log.Warn("remove leftover VIP address", "vip", v.cfg.Name, "err", err)
		}
	}

	var keyring *memberlist.Keyring
	if c.Cluster.KeyFile != "" {
		keyring, err = loadKeyring(c.Cluster.KeyFile)
		if err != nil {
			return err
		}
		a.keyring = keyring
	}
	meta, err := a.localMeta().Encode()
	if err != nil {
		return err
	}
	ml, err := newMembership(c, a.log, meta, keyring)
	if err != nil {
		return err
	}
	a.ml = ml

	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopBG()
	wg.Add(1)
	go func() { defer wg.Done(); ml.runPublisher(bg) }()

	api, err := a.serveAPI(bg, &wg)
	if err != nil {
		ml.shutdown()
		return err
	}
	defer api.stop()

	if addr := c.API.MetricsAddress; addr != "" {
		if err := a.metrics.serve(bg, addr, &wg, func(err error) { a.log.Error("metrics server", "err", err) }); err != nil {
			ml.shutdown()
			return err
		}
		a.log.Info("metrics listening", "address", addr)
	}

	a.startHealth(bg)
	defer a.stopHealth()
	defer a.watchWG.Wait()
	if a.opts.LinkEvents != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.watchLinks(bg) }()
	}

	a.joinAll(rejoinTargets(c.NodeName, a.getCache(), c.Cluster.peerAddrs, nil))
	wg.Add(1)
	go func() { defer wg.Done(); a.rejoinLoop(bg) }()

	a.loop(ctx)

	// Shutdown: make-before-break handoff, then leave.
	a.shutdown()
	return nil
}

// loop is the one goroutine that owns the agent's state.
func (a *Agent) loop(ctx context.Context) {
	t := time.NewTimer(a.opts.Tick)
	defer t.Stop()
	a.reconcile()
	a.markReady()
	for {
		t.Reset(a.nextTick())
		select {
		case <-ctx.Done():
			return
		case <-a.ml.changed:
		case <-t.C:
		case r := <-a.health:
			a.onHealth(r)
		case cf := <-a.conflicts:
			a.onConflict(cf)
		case <-a.linkCh:
		case f := <-a.reqs:
			f()
		case <-a.reloadCh:
			a.reload()
		}
		a.reconcile()
	}
}

// maxPassGap is the longest plausible time between two passes of the loop
// (it wakes at least every IdleTick); a larger step is a clock jump.
const maxPassGap = 10 * time.Second

// checkClock notices the clock stepping (backwards, or forwards by more
// than maxPassGap between passes) and moves every remembered instant by the
// same step, so timers neither stall (a handoff or claim waiting an hour
// after a backward step) nor fire early. time.Now carries a monotonic
// reading, so the default clock never steps; an injected one may.
func (a *Agent) checkClock(now time.Time) {
	prev := a.lastNow
	a.lastNow = now
	if prev.IsZero() {
		return
	}
	step := now.Sub(prev)
	if step >= 0 && step <= maxPassGap {
		return
	}
	a.log.Warn("clock jumped; shifting timers by the jump", "jump", step)
	shift := func(t *time.Time) {
		if !t.IsZero() {
			*t = t.Add(step)
		}
	}
	for _, v := range a.vips {
		shift(&v.eligibleSince)
		shift(&v.release)
		shift(&v.drainFrom)
		shift(&v.retryAt)
		shift(&v.lastReassert)
	}
	for _, w := range a.waiters {
		shift(&w.deadline)
	}
	shift(&a.quorumRegained)
	shift(&a.lastPing)
}

// nextTick is how long the loop may sleep when no event comes: short while
// a timer-driven step is pending, IdleTick otherwise (which keeps an idle
// agent's CPU use low and still pings the watchdog).
func (a *Agent) nextTick() time.Duration {
	if len(a.waiters) > 0 || a.shuttingDown {
		return a.opts.Tick
	}
	for _, v := range a.vips {
		if !v.release.IsZero() || !v.drainFrom.IsZero() || !v.retryAt.IsZero() || v.settling {
			return a.opts.Tick
		}
	}
	return max(a.opts.IdleTick, a.opts.Tick)
}

// do runs f on the loop goroutine and waits for it.
func (a *Agent) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case a.reqs <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Agent) markReady() {
	if !a.ready {
		a.ready = true
		a.opts.Notify("READY=1")
		a.log.Info("vipd ready", "members", len(a.ml.snapshot()))
	}
}

func (a *Agent) setupVIPs(ctx context.Context, c *Config) error {
	next := map[string]*vipState{}
	for _, vc := range c.VIPs {
		ann, err := a.backends.Announcer(vc)
		if err != nil {
			return fmt.Errorf("vip %s: %w", vc.Name, err)
		}
		st := a.vips[vc.Name]
		if st == nil || st.cfg.addr != vc.addr || st.cfg.Mode != vc.Mode || st.cfg.Interface != vc.Interface {
			if st != nil && st.held {
				a.releaseNow(ctx, st, "configuration changed")
			}
			st = &vipState{healthy: vc.Health == nil}
		}
		st.cfg = vc
		st.ann = ann
		if vc.Health == nil {
			st.healthy = true
		}
		next[vc.Name] = st
	}
	for name, st := range a.vips {
		if _, keep := next[name]; !keep && st.held {
			a.releaseNow(ctx, st, "removed from configuration")
		}
	}
	a.vips = next
	ifaces := map[string]bool{}
	for _, v := range next {
		if v.cfg.Mode == ModeL2 {
			ifaces[v.cfg.Interface] = true
		}
	}
	a.l2Ifaces.Store(&ifaces)
	return nil
}

// localMeta is what this node advertises now.
func (a *Agent) localMeta() NodeMeta {
	m := NodeMeta{Valid: true, Withdrawn: a.withdrawn || a.shuttingDown, Leaving: a.shuttingDown, VIPs: map[uint32]VIPMeta{}}
	for _, v := range a.vips {
		vm := VIPMeta{Healthy: v.healthy && !v.down, Held: v.held, Down: v.down}
		if vm.Healthy || vm.Held || vm.Down {
			m.VIPs[vipKey(v.cfg.Name)] = vm
		}
	}
	return m
}

// view is the election's input: every member, with this node's entry taken
// from its own current state rather than from gossip.
func (a *Agent) view(members []memberInfo) []Member {
	out := make([]Member, 0, len(members)+1)
	for _, m := range members {
		if m.Name == a.cfg.NodeName {
			continue
		}
		out = append(out, Member{Name: m.Name, State: m.State, Meta: m.Meta})
	}
	return append(out, Member{Name: a.cfg.NodeName, State: StateAlive, Meta: a.localMeta()})
}

// reconcile drives actual state towards desired state: the election
// result, the withdraw flag, health and quorum.
func (a *Agent) reconcile() {
	ctx := context.Background()
	now := a.now()
	a.checkClock(now)
	self := a.cfg.NodeName
	members := a.ml.snapshot()
	quorum, required, alive, known := hasQuorum(self, a.getCache(), members, a.cfg.Cluster.RequireQuorum)

	names := make([]string, 0, len(a.vips))
	for n := range a.vips {
		names = append(names, n)
	}
	sort.Strings(names)
	links := map[string]bool{} // interface -> up, read once per pass
	for _, name := range names {
		v := a.vips[name]
		down := false
		if v.cfg.Mode == ModeL2 {
			up, seen := links[v.cfg.Interface]
			if !seen {
				up = a.linkUp(v.cfg.Interface)
				links[v.cfg.Interface] = up
			}
			down = !up
		}
		if down != v.down {
			if !down {
				// Back from a dead link: this node's view of the others
				// is stale (it may not know who took the VIP over).
				// Exchange state with the peers now, before its claim
				// settles, rather than waiting for gossip to mend it.
				a.rejoinEvery.Store(true)
				a.kickRejoin()
			}
			v.down = down
			a.log.Warn("VIP interface state", "vip", name, "interface", v.cfg.Interface, "down", down)
			a.events.publish(&apipb.Event{Kind: "health", Vip: name, Node: self, Message: fmt.Sprintf("interface %s down=%v", v.cfg.Interface, down)})
		}
		if down && v.held {
			// Nobody can reach the VIP through a dead link, and the
			// successor cannot tell this node it holds the VIP: no
			// make-before-break.
			a.releaseNow(ctx, v, "interface "+v.cfg.Interface+" is down")
		}
	}
	// One view for the pass: a VIP's election depends only on its own entry
	// in this node's metadata, which changes only when that VIP is handled.
	view := a.view(members)
	for _, name := range names {
		v := a.vips[name]
		ev := ElectionVIP{Name: name, Preempt: v.cfg.Preempt}
		res := Elect(view, ev)
		eligible := res.Eligible
		switch {
		case !slices.Contains(eligible, self) || !quorum:
			v.eligibleSince = time.Time{}
		case v.eligibleSince.IsZero():
			v.eligibleSince = now
		}
		want := res.Owner == self
		if v.cfg.Announce == "all" {
			want = slices.Contains(eligible, self)
		}
		settling := false
		if want && !v.held && !v.eligibleSince.IsZero() {
			// Even a node that sees itself alone waits: at cluster start
			// its peers may be a moment from joining, and claiming every
			// VIP first would leave them all on it (preempt is off).
			settle := claimSettle
			if staleHolder(view, name) && !a.quorumRegained.IsZero() && now.Sub(a.quorumRegained) < staleHolderSettle {
				settle = staleHolderSettle
			}
			if now.Sub(v.eligibleSince) < settle {
				// Just became eligible (or regained quorum): let gossip
				// and the rejoin show who holds the VIP first.
				want = false
				settling = true
			}
		}
		v.settling = settling
		othersHold := heldElsewhere(self, name, view)
		if !quorum {
			want = false
		}
		if res.Owner != v.owner {
			reason := res.Reason
			a.log.Info("ownership change", "vip", name, "from", orNone(v.owner), "to", orNone(res.Owner), "reason", reason)
			a.events.publish(&apipb.Event{Kind: "ownership", Vip: name, From: v.owner, To: res.Owner, Reason: reason})
			a.metrics.ownershipChanges.WithLabelValues(name, reason).Inc()
			v.owner = res.Owner
		}
		v.reason = res.Reason
		switch {
		case want && !v.held:
			if now.Before(v.retryAt) {
				continue
			}
			if err := v.ann.Announce(ctx, v.cfg.addr); err != nil {
				v.backoff = min(max(2*v.backoff, time.Second), 30*time.Second)
				v.retryAt = now.Add(v.backoff)
				a.metrics.announceErrors.WithLabelValues(name, "announce").Inc()
				a.log.Error("announce VIP", "vip", name, "err", err, "retry_in", v.backoff)
				// A half-done announce (address added, advertisement
				// failed) must not leave the address up while this node
				// tells the others it does not hold the VIP.
				if werr := v.ann.Withdraw(ctx, v.cfg.addr); werr != nil {
					a.log.Error("undo failed announce", "vip", name, "err", werr)
				}
				continue
			}
			v.held, v.release, v.drainFrom = true, time.Time{}, time.Time{}
			v.backoff, v.retryAt = 0, time.Time{}
			a.startWatch(v)
			a.log.Info("holding VIP", "vip", name, "address", v.cfg.addr, "mode", v.cfg.Mode, "reason", res.Reason)
			a.events.publish(&apipb.Event{Kind: "hold", Vip: name, Node: self, Reason: res.Reason})
		case want && v.held:
			v.release, v.drainFrom = time.Time{}, time.Time{}
			if v.othersHeld && !othersHold && v.cfg.Mode == ModeL2 {
				// A contest ended in this node's favour: the loser's
				// gratuitous ARPs may have pointed clients at it, so point
				// them back now.
				a.log.Info("re-announcing VIP after duplicate holder released it", "vip", name)
				if err := v.ann.Announce(ctx, v.cfg.addr); err != nil {
					a.log.Warn("re-announce VIP", "vip", name, "err", err)
				}
			}
		}
		v.othersHeld = othersHold
		switch {
		case !want && v.held:
			if !quorum {
				a.releaseNow(ctx, v, fmt.Sprintf("lost quorum: %d of %d known members alive", alive, known))
				continue
			}
			a.handOff(ctx, v, view, res, now)
		}
	}
	if !quorum && required {
		a.logQuorumOnce(alive, known)
	} else {
		if a.quorumLogged {
			a.log.Info("quorum regained", "alive", alive, "known", known)
			a.quorumRegained = now
			a.kickRejoin()
		}
		a.quorumLogged = false
	}

	if b, err := a.localMeta().Encode(); err == nil {
		a.ml.setMeta(b)
	} else {
		a.log.Error("encode metadata", "err", err)
	}
	a.updateMetrics(members, quorum)
	a.updateCache(members)
	a.checkWaiters(view, now)
	a.notifyStatus()
}

// handOff releases a VIP this node should no longer hold, make-before-break:
// it keeps the VIP until the successor reports holding it (or, in BGP, the
// graceful-shutdown announcement has been up for graceful_shutdown), or
// until handoff_timeout passes, or at once when there is no successor.
func (a *Agent) handOff(ctx context.Context, v *vipState, view []Member, res Result, now time.Time) {
	if v.release.IsZero() {
		v.release = now
		a.log.Info("handing VIP off", "vip", v.cfg.Name, "to", orNone(res.Owner))
	}
	if v.cfg.Mode == ModeBGP && a.cfg.BGP != nil && a.cfg.BGP.gracefulShutdown > 0 && (a.withdrawn || a.shuttingDown) {
		if d, ok := v.ann.(Drainer); ok {
			if v.drainFrom.IsZero() {
				if err := d.Drain(ctx, v.cfg.addr); err != nil {
					a.log.Warn("graceful shutdown announcement", "vip", v.cfg.Name, "err", err)
				}
				v.drainFrom = now
			}
			if now.Sub(v.drainFrom) < a.cfg.BGP.gracefulShutdown {
				return
			}
		}
	}
	successorHolds := false
	for _, m := range view {
		if m.Name != a.self && m.Name == res.Owner && m.Meta.VIP(vipKey(v.cfg.Name)).Held {
			successorHolds = true
		}
	}
	switch {
	case res.Owner == "" && v.cfg.Announce != "all":
		a.releaseNow(ctx, v, "no eligible node")
	case v.cfg.Announce == "all":
		a.releaseNow(ctx, v, "not eligible")
	case successorHolds:
		a.releaseNow(ctx, v, "successor "+res.Owner+" holds it")
	case now.Sub(v.release) >= a.cfg.Cluster.handoffTimeout:
		a.releaseNow(ctx, v, "handoff timeout; successor "+orNone(res.Owner)+" did not confirm")
	}
}

func (a *Agent) releaseNow(ctx context.Context, v *vipState, reason string) {
	a.stopWatch(v)
	if err := v.ann.Withdraw(ctx, v.cfg.addr); err != nil {
		a.metrics.announceErrors.WithLabelValues(v.cfg.Name, "withdraw").Inc()
		a.log.Error("withdraw VIP", "vip", v.cfg.Name, "err", err)
		return
	}
	v.held, v.release, v.drainFrom = false, time.Time{}, time.Time{}
	a.log.Info("released VIP", "vip", v.cfg.Name, "reason", reason)
	a.events.publish(&apipb.Event{Kind: "release", Vip: v.cfg.Name, Node: a.cfg.NodeName, Reason: reason})
}

func (a *Agent) logQuorumOnce(alive, known int) {
	if !a.quorumLogged {
		a.quorumLogged = true
		a.log.Warn("no quorum: not holding any VIP", "alive", alive, "known", known)
		a.events.publish(&apipb.Event{Kind: "membership", Node: a.cfg.NodeName, Message: fmt.Sprintf("no quorum: %d of %d known members alive", alive, known)})
	}
}

func (a *Agent) onHealth(r healthResult) {
	v := a.vips[r.VIP]
	if v == nil || v.healthy == r.Healthy {
		return
	}
	v.healthy = r.Healthy
	msg := "healthy"
	if !r.Healthy {
		msg = "unhealthy"
		if r.Err != nil {
			msg += ": " + r.Err.Error()
		}
	}
	a.log.Info("health change", "vip", r.VIP, "healthy", r.Healthy, "detail", msg)
	a.events.publish(&apipb.Event{Kind: "health", Vip: r.VIP, Node: a.cfg.NodeName, Message: msg})
}

func (a *Agent) startHealth(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	a.healthCancel = cancel
	// VIPs with the same check (typically every VIP of one apiserver)
	// share one checker.
	groups := map[string][]string{}
	checks := map[string]*HealthConfig{}
	for _, v := range a.vips {
		if h := v.cfg.Health; h != nil {
			k := h.key()
			groups[k] = append(groups[k], v.cfg.Name)
			checks[k] = h
		}
	}
	for k, names := range groups {
		sort.Strings(names)
		h := checks[k]
		probe, err := newProbe(h)
		if err != nil {
			a.log.Error("health check not started; VIPs stay unhealthy", "vips", strings.Join(names, ","), "err", err)
			continue
		}
		a.healthWG.Add(1)
		go func() {
			defer a.healthWG.Done()
			runHealth(ctx, names, h, probe, a.health, a.log, a.metrics)
		}()
	}
}

// stopHealth ends the health goroutines; results they are sending are
// drained so none blocks.
func (a *Agent) stopHealth() {
	if a.healthCancel == nil {
		return
	}
	a.healthCancel()
	done := make(chan struct{})
	go func() { a.healthWG.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return
		case <-a.health:
		}
	}
}

func (a *Agent) reload() {
	c, err := Load(a.cfg.Path)
	if err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				a.log.Error("reload refused, keeping running configuration", "problem", p.Error())
			}
		} else {
			a.log.Error("reload refused, keeping running configuration", "err", err)
		}
		return
	}
	old := a.cfg
	if a.keyring != nil && c.Cluster.KeyFile == old.Cluster.KeyFile {
		changed, err := rotateKeyring(a.keyring, c.Cluster.KeyFile)
		if err != nil {
			a.log.Error("reload refused: cluster key_file", "err", err)
			return
		}
		if changed {
			a.log.Info("membership keys rotated from key_file", "keys", len(a.keyring.GetKeys()))
		}
	}
	if c.NodeName != old.NodeName || c.Cluster.BindAddress != old.Cluster.BindAddress ||
		c.Cluster.BindPort != old.Cluster.BindPort || c.Cluster.FailureDetection != old.Cluster.FailureDetection ||
		c.Cluster.KeyFile != old.Cluster.KeyFile || c.StateDir != old.StateDir || c.API != old.API {
		a.log.Warn("reload: node_name, state_dir, [api], cluster bind address/port, failure_detection and the key_file path (turning encryption on or off) take effect after a restart; edits to the key_file's keys apply now")
		c.NodeName, c.StateDir, c.API = old.NodeName, old.StateDir, old.API
		c.Cluster.BindAddress, c.Cluster.BindPort, c.Cluster.bindAddr = old.Cluster.BindAddress, old.Cluster.BindPort, old.Cluster.bindAddr
		c.Cluster.FailureDetection, c.Cluster.KeyFile = old.Cluster.FailureDetection, old.Cluster.KeyFile
	}
	ctx := context.Background()
	if err := a.backends.Reconfigure(ctx, c); err != nil {
		a.log.Error("reload: reconfigure announcers", "err", err)
		return
	}
	a.cfg = c
	a.peers.Store(&c.Cluster.peerAddrs)
	a.stopHealth()
	if err := a.setupVIPs(ctx, c); err != nil {
		a.log.Error("reload: set up VIPs", "err", err)
	}
	a.startHealth(context.Background())
	a.log.Info("configuration reloaded", "path", c.Path, "vips", len(c.VIPs))
}

// shutdown hands every held VIP off (make-before-break), then leaves the
// cluster. It runs on the loop goroutine after the loop ended.
func (a *Agent) shutdown() {
	a.opts.Notify("STOPPING=1")
	a.shuttingDown = true
	limit := a.cfg.Cluster.handoffTimeout
	if a.cfg.BGP != nil {
		limit += a.cfg.BGP.gracefulShutdown
	}
	deadline := a.now().Add(limit)
	a.log.Info("shutting down: handing VIPs off", "timeout", limit)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for a.holdsAny() && a.now().Before(deadline) {
		a.reconcile()
		if !a.holdsAny() {
			break
		}
		select {
		case <-a.ml.changed:
		case <-t.C:
		}
	}
	for _, v := range a.vips {
		if v.held {
			a.releaseNow(context.Background(), v, "shutting down")
		}
	}
	// The final metadata (leaving, holding nothing) must reach the others
	// before the leave message, or they record this node as dead instead
	// of left (and count it against quorum).
	if b, err := a.localMeta().Encode(); err == nil {
		a.ml.advertiseFinal(b, time.Second)
	}
	if err := a.ml.leave(2 * time.Second); err != nil {
		a.log.Warn("leave cluster", "err", err)
	}
	if err := a.ml.shutdown(); err != nil {
		a.log.Warn("stop memberlist", "err", err)
	}
	for _, w := range a.waiters {
		w.reply <- status.Error(codes.Aborted, "vipd is shutting down")
	}
	a.waiters = nil
	a.log.Info("stopped")
}

func (a *Agent) holdsAny() bool {
	for _, v := range a.vips {
		if v.held {
			return true
		}
	}
	return false
}

func (a *Agent) notifyStatus() {
	var held []string
	for _, v := range a.vips {
		if v.held {
			held = append(held, v.cfg.Name)
		}
	}
	sort.Strings(held)
	s := "holding no VIP"
	if len(held) > 0 {
		s = "holding " + strings.Join(held, ", ")
	}
	if a.withdrawn {
		s += " (withdrawn)"
	}
	if s != a.lastStatus {
		a.lastStatus = s
		a.opts.Notify("STATUS=" + s)
	}
	// The watchdog ping proves the loop runs; once per idle tick (1 s) is plenty
	// for WatchdogSec of a few seconds.
	if now := a.now(); now.Sub(a.lastPing) >= 500*time.Millisecond {
		a.lastPing = now
		a.opts.Notify("WATCHDOG=1")
	}
}

func (a *Agent) setCache(c []CachedPeer) {
	a.cacheMu.Lock()
	a.cache = c
	a.cacheMu.Unlock()
}

func (a *Agent) getCache() []CachedPeer {
	a.cacheMu.Lock()
	defer a.cacheMu.Unlock()
	return a.cache
}

func (a *Agent) updateCache(members []memberInfo) {
	old := a.getCache()
	next := nextPeerCache(a.cfg.NodeName, old, members)
	if slices.Equal(old, next) {
		return
	}
	a.setCache(next)
	if err := savePeerCache(a.cfg.StateDir, next); err != nil {
		a.log.Error("save peer cache (kept in memory)", "err", err)
	}
}

// joinAll joins addresses in parallel: memberlist joins a list one by one
// and an unreachable cached peer would hold the others up for its timeout.
func (a *Agent) joinAll(addrs []string) int {
	if len(addrs) == 0 {
		return 0
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	joined := 0
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := a.ml.join([]string{addr})
			if err != nil {
				a.log.Debug("join", "peer", addr, "err", err)
			}
			mu.Lock()
			joined += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	a.log.Info("join", "tried", len(addrs), "joined", joined)
	return joined
}

// rejoinLoop joins, every rejoin_interval, the known peers that are not
// alive members, so a node cut off for a while comes back by itself.
func (a *Agent) rejoinLoop(ctx context.Context) {
	var interval time.Duration
	if err := a.do(ctx, func() { interval = a.cfg.Cluster.rejoinInterval }); err != nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.rejoinKick:
		}
		// Read without a request to the loop: a rejoin tick that finds
		// every peer alive must not wake it.
		members := a.ml.snapshot()
		if a.rejoinEvery.Swap(false) {
			members = nil // every known peer, alive ones included
		}
		targets := rejoinTargets(a.self, a.getCache(), *a.peers.Load(), members)
		if len(targets) == 0 {
			continue
		}
		a.log.Info("rejoin", "peers", strings.Join(targets, ","))
		a.metrics.rejoinAttempts.Add(float64(len(targets)))
		a.metrics.rejoinJoined.Add(float64(a.joinAll(targets)))
	}
}

// kickRejoin makes the rejoin loop run now (after quorum is regained, the
// state exchange of a join brings this node's stale view up to date).
func (a *Agent) kickRejoin() {
	select {
	case a.rejoinKick <- struct{}{}:
	default:
	}
}

// watchLinks wakes the loop whenever an L2 VIP's interface changes, so a
// link going down releases the VIP at once rather than at the next tick. A
// failed subscription is started again after a pause; the loop's ticks read
// the link state meanwhile.
func (a *Agent) watchLinks(ctx context.Context) {
	for {
		err := a.opts.LinkEvents(ctx, func(iface string) {
			if m := a.l2Ifaces.Load(); m == nil || !(*m)[iface] {
				return
			}
			select {
			case a.linkCh <- struct{}{}:
			default:
			}
		})
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("watching interface changes; retrying in 1s", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		select {
		case a.linkCh <- struct{}{}: // changes may have been missed
		default:
		}
	}
}

// linkUp reports whether an interface is administratively up and has
// carrier. [Options.LinkUp]
func (a *Agent) linkUp(iface string) bool {
	if a.opts.LinkUp != nil {
		return a.opts.LinkUp(iface)
	}
	return sysfsLinkUp("/sys/class/net", iface)
}

// sysfsLinkUp reads the interface's flags (IFF_UP) and carrier from sysfs:
// two small reads, where a netlink query would dump every interface.
func sysfsLinkUp(root, iface string) bool {
	b, err := os.ReadFile(filepath.Join(root, iface, "flags"))
	if err != nil {
		return false
	}
	flags, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")), 16, 32)
	if err != nil || flags&1 == 0 { // IFF_UP
		return false
	}
	c, err := os.ReadFile(filepath.Join(root, iface, "carrier"))
	return err == nil && strings.TrimSpace(string(c)) == "1"
}

// staleHolder reports whether a member that is dead in this view last
// reported holding vip.
func staleHolder(view []Member, vip string) bool {
	for _, m := range view {
		if m.State == StateDead && m.Meta.VIP(vipKey(vip)).Held {
			return true
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// startWatch starts duplicate-owner detection for a VIP this node now
// holds, when its announcer supports it.
func (a *Agent) startWatch(v *vipState) {
	w, ok := v.ann.(ConflictWatcher)
	if !ok || v.stopWatch != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	v.stopWatch = cancel
	name, addr := v.cfg.Name, v.cfg.addr
	a.watchWG.Add(1)
	go func() {
		defer a.watchWG.Done()
		// The watcher's socket dies with its link; start it again (with a
		// pause) for as long as the VIP is held.
		for ctx.Err() == nil {
			err := w.WatchConflicts(ctx, addr, func(mac net.HardwareAddr) {
				select {
				case a.conflicts <- conflict{vip: name, mac: mac.String()}:
				default:
				}
			})
			if ctx.Err() != nil {
				return
			}
			a.log.Debug("duplicate-owner detection interrupted; restarting", "vip", name, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
}

func (a *Agent) stopWatch(v *vipState) {
	if v.stopWatch != nil {
		v.stopWatch()
		v.stopWatch = nil
	}
}

// onConflict handles another MAC answering for a VIP this node holds. When
// the other host is a vipd node, its metadata shows the claim and the
// election resolves it (the highest ranked holder keeps the VIP). While this
// node is still the elected owner it re-asserts the VIP (a new gratuitous
// ARP / NA burst, at most once a second) so clients point back at it.
func (a *Agent) onConflict(c conflict) {
	v := a.vips[c.vip]
	if v == nil || !v.held {
		return
	}
	if v.owner != a.self {
		// This node is handing the VIP off (make-before-break) or lost
		// a contest: the new owner's announcements are expected.
		a.log.Debug("VIP announced by its new owner while handing off", "vip", c.vip, "mac", c.mac, "owner", v.owner)
		return
	}
	a.metrics.conflicts.WithLabelValues(c.vip).Inc()
	a.log.Warn("duplicate owner: another host answers for a held VIP", "vip", c.vip, "mac", c.mac, "owner", v.owner)
	a.events.publish(&apipb.Event{Kind: "conflict", Vip: c.vip, Node: a.self, Message: "another host answers for the VIP from MAC " + c.mac})
	now := a.now()
	if now.Sub(v.lastReassert) >= time.Second {
		v.lastReassert = now
		if err := v.ann.Announce(context.Background(), v.cfg.addr); err != nil {
			a.log.Warn("re-assert VIP", "vip", c.vip, "err", err)
		}
	}
}

func (a *Agent) updateMetrics(members []memberInfo, quorum bool) {
	m := a.metrics
	for name, v := range a.vips {
		m.held.WithLabelValues(name).Set(b2f(v.held))
		m.owner.WithLabelValues(name).Set(b2f(v.owner == a.self))
		m.healthUp.WithLabelValues(name).Set(b2f(v.healthy))
	}
	counts := map[MemberState]int{StateAlive: 1} // this node
	for _, mb := range members {
		if mb.Name != a.self {
			counts[mb.State]++
		}
	}
	for _, st := range []MemberState{StateAlive, StateSuspect, StateDead, StateLeft} {
		m.members.WithLabelValues(st.String()).Set(float64(counts[st]))
	}
	m.quorum.Set(b2f(quorum))
	m.withdrawn.Set(b2f(a.withdrawn))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
