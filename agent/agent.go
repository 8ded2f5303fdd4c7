// Package agent is vipd's daemon: membership, election,
// health checks, state files, the local API and the reconcile loop that
// drives the network towards what the election decides.
//
// The data flow, file by file (docs/design.md has the long form; every
// file of the package is listed here, TestFileMap keeps it so):
//
//	agent.go      the Agent, its options, the announcer interfaces, per-VIP state
//	preflight.go  what start-up refuses short of binding, for vipd --check too
//	run.go        Run: start-up wiring, then the loop, then shutdown
//	loop.go       the one goroutine that owns the agent's state
//	members.go    the members' table entry, and the codec of their metadata
//	meta.go       what a node tells the others (NodeMeta, VIPMeta)
//	observe.go    read the world: links, addresses, routes
//	reconcile.go  one pass: observe, elect, the lifecycle's steps, execute;
//	              the lease's evidence (fence, quorum, the view)
//	election.go   the owner of a VIP, a pure function of the view
//	lifecycle.go  the lifecycle's inputs from the view (peersOf, electionOf)
//	handoff.go    execute a decision: claim, keep, hand off, release
//	chain.go      execute the daisy chain: forward, linger, their ends
//	clients.go    the VIPs' client connections: publish them, reset the
//	              previous holder's after a takeover, close this node's on
//	              a planned handoff (package conns does the work)
//	restart.go    restart in place: record, adopt, confirm, finish handoffs
//	health.go     health checks and their verdicts
//	node.go       this host's Kubernetes Node and the withdraw it makes
//	reload.go     SIGHUP
//	rejoin.go     the peer cache and the rejoin loop
//	state.go      state files in state_dir
//	conflicts.go  another host answering for a held VIP
//	withdraw.go   withdraw, restore, forget
//	status.go     the status snapshot the API serves
//	events.go     the event broker the API streams from
//	api.go        the gRPC server on the unix socket
//	notify.go     systemd READY/STATUS/WATCHDOG
//	hooks.go      [hooks]: a command run at each change of a VIP's state
//	metrics.go    Prometheus
//	cleanup.go    what vipd cleanup removes
//
// Four parts with their own invariants are packages of their own: the
// configuration (agent/config: the file's keys, defaults, positions and
// checks, and the host checks of vipd --check), the lease (agent/lease:
// fast failure detection and fencing, the safety argument in its doc.go),
// the lifecycle (agent/lifecycle: what this node does with one VIP at a
// pass, a pure step over its inputs; the agent executes its answers) and
// membership (agent/membership: memberlist and its transport behind
// members, metadata, messages and heartbeats). The agent uses only their
// APIs.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/agent/membership"
	"github.com/vipd/vipd/nodewatch"
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

// Forwarder is implemented by announcers that can pass the previous
// holders' connections on to them during and after a planned handoff (l2:
// nftables dup to each previous holder of the packets the host has no
// connection for: the daisy chain). Forward installs that for addr's TCP
// ports, to the hosts at to (a later call replaces it); StopForward
// removes it (no error when there is nothing). An error wrapping
// l2.ErrForwardUnsupported says it cannot be done here (IPv6, to not on the
// link): the handoff then goes as without a Forwarder.
type Forwarder interface {
	Forward(ctx context.Context, addr netip.Addr, ports []uint16, to ...netip.Addr) error
	StopForward(ctx context.Context, addr netip.Addr) error
}

// Lingerer is implemented by announcers that can take a VIP's address off
// the host while the host keeps serving the connections it has on it,
// which the holder forwards to it (l2: Linger, a local route, no ARP
// answers, the segments of connections it does not have dropped).
// StopLinger ends that; Withdraw and Announce end it too.
type Lingerer interface {
	Linger(ctx context.Context, addr netip.Addr) error
	StopLinger(ctx context.Context, addr netip.Addr) error
}

// Silencer is implemented by announcers that advertise a held VIP unasked
// (l2: the gratuitous ARP / NA burst and refresh, l2.refresh_interval).
// Silence stops that for addr and keeps the address; Announce starts it
// again. A holder handing the VIP off make-before-break calls it, so that
// its refresh cannot point the clients back at it after the successor
// announced the VIP, just before it releases.
type Silencer interface {
	Silence(ctx context.Context, addr netip.Addr) error
}

// ConflictWatcher is implemented by announcers that can see another host
// answering for a VIP (l2: ARP replies / neighbor advertisements from other
// MACs).
type ConflictWatcher interface {
	WatchConflicts(ctx context.Context, addr netip.Addr, fn func(mac net.HardwareAddr)) error
}

// Backends builds the announcers for a configuration. cmd/vipd builds the
// real l2 and bgp ones; tests substitute fakes.
type Backends interface {
	// Announcer returns the announcer of a VIP. It is called again after
	// a reload for every VIP, and may return the same value.
	Announcer(vip config.VIPConfig) (Announcer, error)
	// Reconfigure applies a reloaded configuration (BGP peers).
	Reconfigure(ctx context.Context, c *config.Config) error
	// BGPPeers reports BGP session state; nil without BGP.
	BGPPeers(ctx context.Context) []*apipb.BGPPeerStatus
	// Close releases sockets and stops speakers.
	Close() error
}

// Options are the agent's collaborators. Backends is required; the zero
// value of every other field selects the default given in brackets.
type Options struct {
	// Logger receives the agent's logs. [slog.Default()]
	Logger *slog.Logger
	// LogLevel, when set, is the level a reload applies from log_level.
	// [none: reload does not change the level]
	LogLevel *slog.LevelVar
	// Backends creates announcers. resume are the BGP VIPs this process
	// takes over from the previous one (a restart in place): the speaker
	// announces them before its first session is up. Required.
	Backends func(ctx context.Context, c *config.Config, lg *slog.Logger, resume []netip.Addr) (Backends, error)
	// StopKind is asked, when Run's context ends, what the stop is for: a
	// restart in place (the VIPs stay, cluster.restart_grace) or a stop
	// (they are handed off). [every stop hands off]
	StopKind func() StopKind
	// NextAdopts reports whether the vipd that starts next takes over VIPs
	// left for it (the binary on disk speaks RestartProtocol): a stop for
	// a restart hands off otherwise. [false]
	NextAdopts func() bool
	// Notify sends a systemd notification ("READY=1", "STATUS=...",
	// "WATCHDOG=1"). [sd_notify through $NOTIFY_SOCKET]
	Notify func(state string)
	// Now is the clock. It must carry a monotonic reading, as time.Now
	// does, so wall-clock steps do not reach the agent's timers. [time.Now]
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
	// [every link is up]
	LinkUp func(iface string) bool
	// RemoveAddresses removes addresses a previous run recorded as added
	// (state_dir/addresses.json) at start, so a VIP removed from the
	// configuration while vipd was down does not stay. [none]
	RemoveAddresses func(ctx context.Context, ts []CleanupTarget) error
	// LinkEvents calls changed with an interface's name whenever the
	// kernel reports a change to it (link or address), until ctx ends; the
	// loop then reads the world at once instead of at its next tick. [none:
	// the world is read at every tick only]
	LinkEvents func(ctx context.Context, changed func(iface string)) error
	// Conns opens what lists, closes and resets the VIPs' client
	// connections ([connections] in the configuration). When it fails,
	// vipd runs without it (and says so). [the kernel's: conns.Open and
	// conns.NewPoker in vipd's network namespace]
	Conns func() (ConnsBackend, error)
	// NodeWatch, when set, adjusts the configuration of the Kubernetes
	// Node watch before it starts (tests shorten its timers). [none]
	NodeWatch func(nodewatch.Config) nodewatch.Config
	// ConfigRules are the backends' rules a reload checks the file with,
	// as vipd --check and the start do (cmd/vipd passes
	// backendconfig.Rules). [none: the configuration's own rules; a
	// backend refuses what it refuses when it is reconfigured]
	ConfigRules config.BackendRules
}

// Agent is one vipd node. Create it with New and run it with Run.
type Agent struct {
	// Fixed by New.
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	grid    lease.Grid // periodic timers beat on it
	self    string     // node name
	metrics *metrics
	events  *broker
	// encodeMeta is NodeMeta.Encode; tests make a node speak another
	// metadata version.
	encodeMeta func(NodeMeta) ([]byte, error)
	// probeBind is probeBind; tests make the bind address missing.
	probeBind func(addr netip.Addr, port int) error

	// Channels into the loop.
	reqs      chan *loopRequest // run on the loop goroutine (Agent.do)
	reloadCh  chan struct{}
	health    chan healthResult
	conflicts chan conflict
	wake      chan struct{} // a VIP interface's link or addresses changed
	nodeCh    chan struct{} // the Node watch reported (nodeLatest)

	// nodeLatest is the Node watch's last report, for the loop.
	nodeMu     sync.Mutex
	nodeLatest nodeReport

	// Set by Run before the loop and the other goroutines start; read-only
	// afterwards.
	members  *membership.Membership[NodeMeta]
	backends Backends
	keyring  *memberlist.Keyring // nil without encryption
	lease    *lease.Runner
	clients  *clients // the VIPs' client connections (clients.go)

	// hooks runs [hooks] command at the VIPs' changes of state; set by New.
	hooks *hooks

	// Shared with the goroutines around the loop.
	cache      peerCache
	rejoinKick chan struct{}
	// rejoinEvery makes the next rejoin join every known peer, alive or
	// not: a full state exchange after a link came back.
	rejoinEvery atomic.Bool
	// rejoinAlso are addresses the next rejoin joins too, alive or not
	// (refreshFrom).
	rejoinAlso atomic.Pointer[[]string]
	peers      atomic.Pointer[[]string]        // cluster.peers, for the rejoin loop
	l2Ifaces   atomic.Pointer[map[string]bool] // interfaces of L2 VIPs, for the link watcher
	snapshot   atomic.Pointer[statusSnapshot]  // published by the loop for the API

	// goroutines counts every goroutine Run starts; Run waits for it.
	goroutines sync.WaitGroup

	// st is owned by the loop goroutine.
	st loopState
}

// loopState is the agent's mutable state. Only the loop goroutine reads or
// writes it (other goroutines send the loop events or closures).
type loopState struct {
	cfg       *config.Config
	vips      map[string]*vipState
	withdrawn bool
	// withdrawnSince is when the withdraw flag was set (its file's time
	// after a restart).
	withdrawnSince time.Time
	shuttingDown   bool
	// finishing: a restart in place waits for the handoffs under way
	// (finishHandoffs); lingering VIPs close what is left.
	finishing bool
	// decommissioned: this node is being removed for good (vipctl
	// decommission); its metadata says so until it stops.
	decommissioned bool
	waiters        []*withdrawWaiter
	checks         *healthChecks
	// recorded are the addresses this node added and has not removed,
	// saved in state_dir for vipd cleanup.
	recorded map[string]CleanupTarget
	// lease is the lease's state at the last pass: this node's fence and
	// the evidence about the other members.
	lease lease.State
	// fence: whether this node drives lease rounds (it holds a VIP or is
	// about to claim one), and whether it is fenced (it drove rounds and
	// has had no majority evidence for the lease's release time: it holds
	// nothing and tells the others it cannot carry the VIPs).
	fence lease.Fence

	ready        bool
	lastStatus   string
	lastPing     time.Time
	quorumLogged bool
	lastVerify   time.Time // when held VIPs were last read back
	verifyNow    bool      // an interface event: read held VIPs back now
	// quorumRegained is when this node last regained quorum; its view of
	// the other side is stale for a moment after that.
	quorumRegained time.Time
	// heardOnly are the members last counted alive only by their lease
	// heartbeats (membership said dead), for the log.
	heardOnly []string
	// restartGrace: this node is stopping for a restart in place, its
	// successor due within it (its metadata says so).
	restartGrace time.Duration
	// adoptUntil: the VIPs taken over from the previous process are held
	// on its record's word until then (zero: none).
	adoptUntil time.Time
	// fencedAt is when this node was last fenced.
	fencedAt time.Time
	// node is this host's Kubernetes Node and the withdraw it makes (never
	// persisted, apart from the withdraw flag).
	node nodeState
}

// vipState is what the loop knows and remembers of one VIP.
type vipState struct {
	// Configuration.
	cfg config.VIPConfig
	ann Announcer

	// What this node has and sees.
	held bool
	// adopted: held on the previous process's word (a restart in place),
	// its address still with the kernel lifetime that process gave it,
	// until this process's lease confirms it (confirmAdopted).
	adopted bool
	down    bool // the VIP's L2 interface is down or has no carrier
	healthy bool
	// healthDetail is the last verdict in words; healthSince when it
	// changed.
	healthDetail string
	healthSince  time.Time

	// The election as this node last saw it.
	owner, reason string
	bootstrap     bool // the last election used the bootstrap fallback
	contested     bool // another alive node reported holding it

	// Timers.
	eligibleSince  time.Time // zero while not eligible
	settling       bool
	settleStarted  time.Time // when the current settle period began
	lastEligible   []string  // the eligible list of the last pass
	handoffStarted time.Time // when this node began handing the VIP off
	drainStarted   time.Time // when the BGP graceful-shutdown announcement went out
	retryAt        time.Time // the next claim after a failed announce
	backoff        time.Duration
	// failing: the last announce failed; until retryAt this node tells the
	// others it cannot carry the VIP, so a peer takes over.
	failing      bool
	lastReassert time.Time
	// readySince is when this node last became able to carry the VIP
	// (lifecycle.PreemptReady; zero while it cannot); waiting is set while
	// its preempt delay runs from then (lifecycle.PreemptWaiting), and
	// published.
	readySince time.Time
	waiting    bool

	// stopWatch ends the conflict watcher while the VIP is held.
	stopWatch context.CancelFunc

	// lastHolder is the other member last seen holding the VIP (an alive
	// one first), whose connections a claim forwards to it (chain.go);
	// holdersSeen is every other member seen holding it in the last
	// lifecycle.TakeoverHorizon, and when last; takeovers are set when this
	// node claimed it, one per such member (clients.go).
	lastHolder  string
	holdersSeen map[string]time.Time
	takeovers   []*takeover

	// forward is set while this node, the VIP's holder, forwards the
	// previous holders' connections to them; linger while this node, a
	// previous holder, serves its connections without the address
	// (chain.go).
	forward *lifecycle.Forward
	linger  *linger
	// silenced: this node, handing v off, stopped advertising it
	// (Silencer); announcing it again ends that.
	silenced bool

	// For the hooks (hooks.go): the state the last change offered to them
	// was to ("" before the first); why this node last took the VIP,
	// released it, and failed to announce it; healthFailed: its check
	// failed (a check that has not risen yet since start is not a fault).
	hookState     string
	heldReason    string
	releaseReason string
	failReason    string
	healthFailed  bool
}

// conflict is another MAC answering for a VIP this node holds.
type conflict struct {
	vip string
	mac string
}

// New returns an agent for cfg. It checks that the required collaborators
// are there and applies defaults; Run does the work.
func New(cfg *config.Config, opts Options) (*Agent, error) {
	if cfg == nil {
		return nil, errors.New("agent: nil configuration")
	}
	if opts.Backends == nil {
		return nil, errors.New("agent: Options.Backends is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
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
	if opts.LinkUp == nil {
		opts.LinkUp = func(string) bool { return true }
	}
	if opts.Conns == nil {
		opts.Conns = openKernelConns
	}
	a := &Agent{
		opts:       opts,
		log:        opts.Logger,
		now:        opts.Now,
		grid:       lease.Grid{Base: opts.Now()},
		self:       cfg.NodeName,
		events:     newBroker(),
		encodeMeta: NodeMeta.Encode,
		probeBind:  membership.ProbeBind,
		reqs:       make(chan *loopRequest),
		reloadCh:   make(chan struct{}, 1),
		health:     make(chan healthResult, 16),
		conflicts:  make(chan conflict, 16),
		wake:       make(chan struct{}, 1),
		nodeCh:     make(chan struct{}, 1),
		rejoinKick: make(chan struct{}, 1),
		st:         loopState{cfg: cfg, vips: map[string]*vipState{}, recorded: map[string]CleanupTarget{}, node: nodeState{cfg: cfg.Kubernetes}},
	}
	peers := cfg.Cluster.PeerAddrs()
	a.peers.Store(&peers)
	a.metrics = newMetrics(a.bgpPeerMetrics)
	a.hooks = newHooks(a)
	a.hooks.configure(cfg.Hooks)
	return a, nil
}

// Reload asks the agent to re-read its configuration file. An invalid file
// keeps the running configuration; every problem is logged.
func (a *Agent) Reload() {
	select {
	case a.reloadCh <- struct{}{}:
	default:
	}
}

// bgpPeerMetrics feeds the BGP collector; backends are set once in Run.
func (a *Agent) bgpPeerMetrics(ctx context.Context) []bgpPeerMetric {
	if a.backends == nil {
		return nil
	}
	var out []bgpPeerMetric
	for _, p := range a.backends.BGPPeers(ctx) {
		out = append(out, bgpPeerMetric{Peer: p.Address, Established: p.State == "established", Received: p.Received, Advertised: p.Advertised})
	}
	return out
}
