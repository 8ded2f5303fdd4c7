package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/conns"
	"github.com/vipd/vipd/internal/testkit"
)

// wire is a fake network shared by in-process agents: it records which
// node holds which address, and every moment two nodes held one at once.
type wire struct {
	mu      sync.Mutex
	holders map[netip.Addr]map[string]bool
	// expires are the kernel lifetimes set on held addresses
	// (SetLifetime): the wire drops an address when its time comes on
	// its clock (now: the agents' clock), as the kernel does, whether or
	// not an agent runs.
	expires map[netip.Addr]map[string]time.Time
	now     func() time.Time
	drains  map[string]int
	overlap int // announcements made while another node held the address
	// claims lists, in order, every node that put an address on the wire
	// when it did not have it.
	claims []string
	// stuck nodes cannot take their addresses off the wire (Withdraw
	// fails), as with a wedged netlink socket.
	stuck map[string]bool
	// steps are the chain announcers' steps, in order ("b forward to ...").
	steps []string
	// advertising: the node advertises the address unasked (the l2
	// refresh): from its Announce until its Silence, Withdraw or the end
	// of its process (Backends.Close).
	advertising map[netip.Addr]map[string]bool
}

// advertises reports whether node advertises a unasked.
func (w *wire) advertises(node string, a netip.Addr) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.advertising[a][node]
}

// setAdvertisingLocked records whether node advertises a (every address
// of node when a is not valid).
func (w *wire) setAdvertisingLocked(node string, a netip.Addr, on bool) {
	for addr, byNode := range w.advertising {
		if !a.IsValid() || addr == a {
			byNode[node] = on && addr == a
		}
	}
	if on && a.IsValid() {
		if w.advertising[a] == nil {
			w.advertising[a] = map[string]bool{}
		}
		w.advertising[a][node] = true
	}
}

// claimCount is how many claims the wire has seen.
func (w *wire) claimCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.claims)
}

// claimsSince returns the claims after the first n.
func (w *wire) claimsSince(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.claims[n:]...)
}

// remove takes node's address off the wire behind its agent's back, as
// `ip addr del` would.
func (w *wire) remove(node string, a netip.Addr) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.holders[a], node)
}

func newWire() *wire {
	return &wire{holders: map[netip.Addr]map[string]bool{}, drains: map[string]int{}, expires: map[netip.Addr]map[string]time.Time{}, stuck: map[string]bool{},
		advertising: map[netip.Addr]map[string]bool{}, now: time.Now}
}

// expireLocked drops the addresses whose lifetime has run out.
func (w *wire) expireLocked() {
	now := w.now()
	for a, byNode := range w.expires {
		for n, at := range byNode {
			if !now.Before(at) {
				delete(w.holders[a], n)
				delete(byNode, n)
			}
		}
	}
}

// expiring reports whether node holds a with a lifetime (SetLifetime).
func (w *wire) expiring(node string, a netip.Addr) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expireLocked()
	_, ok := w.expires[a][node]
	return ok
}

func (w *wire) holdersOf(a netip.Addr) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expireLocked()
	var out []string
	for n := range w.holders[a] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// fakeAnnouncer is one node's view of the wire.
type fakeAnnouncer struct {
	w    *wire
	node string
}

func (f *fakeAnnouncer) Announce(_ context.Context, a netip.Addr) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.expireLocked()
	if f.w.holders[a] == nil {
		f.w.holders[a] = map[string]bool{}
	}
	if !f.w.holders[a][f.node] {
		if len(f.w.holders[a]) > 0 {
			f.w.overlap++
		}
		f.w.claims = append(f.w.claims, f.node)
	}
	f.w.holders[a][f.node] = true
	f.w.setAdvertisingLocked(f.node, a, true)
	return nil
}

// Silence stops the node's advertisements of a and keeps the address, as
// the l2 announcer's does.
func (f *fakeAnnouncer) Silence(_ context.Context, a netip.Addr) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.setAdvertisingLocked(f.node, a, false)
	return nil
}

// Held reports whether the node's address is on the wire, whatever its
// lifetime.
func (f *fakeAnnouncer) Held(a netip.Addr) (bool, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.expireLocked()
	return f.w.holders[a][f.node], nil
}

// Verify reports whether the node's address is still on the wire as
// Announce leaves it: without a lifetime (as l2 reports an IPv6 VIP with
// one: not permanent).
func (f *fakeAnnouncer) Verify(_ context.Context, a netip.Addr) (bool, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.expireLocked()
	_, expiring := f.w.expires[a][f.node]
	return f.w.holders[a][f.node] && !expiring, nil
}

func (f *fakeAnnouncer) Withdraw(_ context.Context, a netip.Addr) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if f.w.stuck[f.node] {
		return errors.New("withdraw stuck (test)")
	}
	delete(f.w.holders[a], f.node)
	delete(f.w.expires[a], f.node)
	f.w.setAdvertisingLocked(f.node, a, false)
	return nil
}

// SetLifetime gives the node's address a lifetime (0: forever), as the
// kernel does.
func (f *fakeAnnouncer) SetLifetime(_ context.Context, a netip.Addr, life time.Duration) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.expireLocked()
	if !f.w.holders[a][f.node] {
		return fmt.Errorf("%s: %s is not held", f.node, a)
	}
	if f.w.expires[a] == nil {
		f.w.expires[a] = map[string]time.Time{}
	}
	if life == 0 {
		delete(f.w.expires[a], f.node)
	} else {
		f.w.expires[a][f.node] = f.w.now().Add(life)
	}
	return nil
}

// setStuck makes node's withdraws fail, or work again.
func (w *wire) setStuck(node string, stuck bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stuck[node] = stuck
}

func (f *fakeAnnouncer) Drain(_ context.Context, a netip.Addr) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.drains[f.node]++
	return nil
}

// fakeConns is one node's view of its client connections: what List
// returns for the VIPs it is asked about, and every reset and close.
type fakeConns struct {
	mu  sync.Mutex
	has []conns.Conn // the node's connections, on any VIP
	// busy are those of has that never have an idle moment (a request
	// always in flight): DestroyIdle closes them only when time is up.
	busy   []conns.Conn
	pokes  []conns.Conn
	closed int
	// idleCalls counts DestroyIdle's calls (a quiesce).
	idleCalls int
	// idleHold, when set, keeps the connections DestroyIdle is asked to
	// close busy until it is closed; busyClosed counts the busy ones
	// DestroyIdle closed when its time was up.
	idleHold   chan struct{}
	busyClosed int
	// onPoke, when set, runs at each Poke (with f's lock held).
	onPoke func()
}

func (f *fakeConns) set(cs ...conns.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.has = cs
}

func (f *fakeConns) poked() []conns.Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pokes)
}

func (f *fakeConns) List(flt conns.Filter) (conns.Set, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []conns.Conn
	for _, c := range f.has {
		if flt.Match(c) {
			out = append(out, c)
		}
	}
	return conns.NewSet(out...), nil
}

func (f *fakeConns) Destroy(flt conns.Filter) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.destroy(flt, func(conns.Conn) bool { return true }), nil
}

// destroy closes the connections flt selects for which which is true;
// f.mu is held.
func (f *fakeConns) destroy(flt conns.Filter, which func(conns.Conn) bool) int {
	keep, n := f.has[:0:0], 0
	for _, c := range f.has {
		if flt.Match(c) && which(c) {
			n++
			continue
		}
		keep = append(keep, c)
	}
	f.has, f.closed = keep, f.closed+n
	return n
}

// busyClosedCount returns how many busy connections DestroyIdle closed.
func (f *fakeConns) busyClosedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.busyClosed
}

// closedCount returns how many connections were closed.
func (f *fakeConns) closedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// DestroyIdle is the kernel's (conns.Table.DestroyIdle): it closes the
// idle connections at once and returns when none is left; the busy ones
// never turn idle, so it waits, as the kernel's polls do, until c.Until
// and closes them then (busyClosed), or until ctx ends (called off) and
// leaves them open. With idleHold set, every connection it is asked to
// close is busy until idleHold is closed.
func (f *fakeConns) DestroyIdle(ctx context.Context, flt conns.Filter, c conns.IdleConfig) (conns.DestroyResult, error) {
	matches := flt.Match
	left := func(which func(conns.Conn) bool) int {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, k := range f.has {
			if matches(k) && which(k) {
				n++
			}
		}
		return n
	}
	timer := time.NewTimer(time.Until(c.Until))
	defer timer.Stop()
	f.mu.Lock()
	f.idleCalls++
	hold := f.idleHold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return conns.DestroyResult{Left: left(func(conns.Conn) bool { return true })}, nil
		case <-timer.C:
			f.mu.Lock()
			n := f.destroy(flt, func(conns.Conn) bool { return true })
			f.busyClosed += n
			f.mu.Unlock()
			return conns.DestroyResult{Busy: n}, nil
		}
	}
	isBusy := func(k conns.Conn) bool { return slices.Contains(f.busy, k) }
	f.mu.Lock()
	res := conns.DestroyResult{Idle: f.destroy(flt, func(k conns.Conn) bool { return !isBusy(k) })}
	f.mu.Unlock()
	if left(isBusy) == 0 {
		return res, nil
	}
	select {
	case <-ctx.Done():
		res.Left = left(isBusy)
		return res, nil
	case <-timer.C:
	}
	f.mu.Lock()
	res.Busy = f.destroy(flt, isBusy)
	f.busyClosed += res.Busy
	f.mu.Unlock()
	return res, nil
}

func (f *fakeConns) Poke(_ context.Context, cs []conns.Conn, _ conns.PokeConfig) (conns.PokeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.onPoke != nil {
		f.onPoke()
	}
	f.pokes = append(f.pokes, cs...)
	return conns.PokeResult{Sent: len(cs)}, nil
}

func (f *fakeConns) Close() error { return nil }

// chainAnnouncer is a fakeAnnouncer that can forward and quiesce (the
// daisy chain), recording each step on the wire.
type chainAnnouncer struct{ *fakeAnnouncer }

func (f chainAnnouncer) step(format string, args ...any) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.steps = append(f.w.steps, f.node+" "+fmt.Sprintf(format, args...))
}

func (f chainAnnouncer) Announce(ctx context.Context, a netip.Addr) error {
	f.step("announce")
	return f.fakeAnnouncer.Announce(ctx, a)
}

func (f chainAnnouncer) Withdraw(ctx context.Context, a netip.Addr) error {
	f.step("withdraw")
	return f.fakeAnnouncer.Withdraw(ctx, a)
}

func (f chainAnnouncer) Forward(_ context.Context, _ netip.Addr, ports []uint16, to ...netip.Addr) error {
	f.step("forward to %v %v", to, ports)
	return nil
}

func (f chainAnnouncer) StopForward(context.Context, netip.Addr) error {
	f.step("stop forward")
	return nil
}

// Linger takes the address away as Withdraw does (the node no longer
// holds it on the wire) and records the step.
func (f chainAnnouncer) Linger(ctx context.Context, a netip.Addr) error {
	f.step("linger")
	return f.fakeAnnouncer.Withdraw(ctx, a)
}

func (f chainAnnouncer) StopLinger(context.Context, netip.Addr) error {
	f.step("stop linger")
	return nil
}

// stepsSince returns the wire's recorded chain steps from the n-th on.
func (w *wire) stepsSince(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.steps[min(n, len(w.steps)):])
}

type fakeBackends struct {
	ann Announcer
	fa  *fakeAnnouncer
}

// fakeBackendsFor gives node its view of the fake wire.
func fakeBackendsFor(w *wire, node string, chain bool) func(context.Context, *config.Config, *slog.Logger, []netip.Addr) (Backends, error) {
	return func(context.Context, *config.Config, *slog.Logger, []netip.Addr) (Backends, error) {
		fa := &fakeAnnouncer{w: w, node: node}
		if chain {
			return fakeBackends{chainAnnouncer{fa}, fa}, nil
		}
		return fakeBackends{fa, fa}, nil
	}
}

func (b fakeBackends) Announcer(config.VIPConfig) (Announcer, error)     { return b.ann, nil }
func (b fakeBackends) Reconfigure(context.Context, *config.Config) error { return nil }
func (b fakeBackends) BGPPeers(context.Context) []*apipb.BGPPeerStatus   { return nil }

// Close ends the process's advertisements (the addresses stay), as the
// l2 announcers' Close does.
func (b fakeBackends) Close() error {
	b.fa.w.mu.Lock()
	defer b.fa.w.mu.Unlock()
	b.fa.w.setAdvertisingLocked(b.fa.node, netip.Addr{}, false)
	return nil
}

// testNode is one in-process agent.
type testNode struct {
	name   string
	port   int
	cfg    *config.Config
	cancel context.CancelFunc
	done   chan error
	agent  *Agent
	// linkDown makes the VIP's interface look down (no carrier).
	linkDown atomic.Bool
	// idleTick, when set, is the agent's Options.IdleTick.
	idleTick time.Duration
	// linkChanged is the agent's Options.LinkEvents callback while it runs.
	linkChanged atomic.Pointer[func(string)]
	// conns are the node's client connections (Options.Conns).
	conns fakeConns
	// restart makes the next stop a restart in place (Options.StopKind),
	// with a successor that adopts (Options.NextAdopts).
	restart atomic.Bool
}

type testCluster struct {
	t     *testing.T
	log   *testWriter
	w     *wire
	dir   string
	nodes map[string]*testNode
	vip   netip.Addr
	// beforeRun, when set, is called with each agent before it runs.
	beforeRun func(name string, a *Agent)
	// rules are the nodes' Options.ConfigRules.
	rules config.BackendRules
	// vipExtra is appended to the VIP's table (a [vip.health] section).
	vipExtra string
	// tail, per node, is appended to its file (a [kubernetes] section).
	tail map[string]string
	// chain gives the nodes announcers that forward and quiesce.
	chain bool
}

func newTestCluster(t *testing.T, names ...string) *testCluster {
	c := &testCluster{t: t, w: newWire(), dir: t.TempDir(), nodes: map[string]*testNode{}, vip: netip.MustParseAddr("192.0.2.10")}
	// Registered first, so it runs after every node stopped.
	c.log = &testWriter{t: t}
	t.Cleanup(c.log.close)
	for _, n := range names {
		c.nodes[n] = &testNode{name: n, port: testkit.FreePort(t)}
	}
	for _, n := range names {
		c.nodes[n].cfg = c.config(n, "")
	}
	return c
}

// config writes and loads a node's configuration; extra is appended to
// the [cluster] table.
func (c *testCluster) config(name, extra string) *config.Config {
	c.t.Helper()
	n := c.nodes[name]
	var peers []string
	for _, o := range c.nodes {
		if o.name != name {
			peers = append(peers, fmt.Sprintf("%q", fmt.Sprintf("127.0.0.1:%d", o.port)))
		}
	}
	sort.Strings(peers)
	dir := filepath.Join(c.dir, name)
	text := fmt.Sprintf(`node_name = %q
state_dir = %q
[api]
socket = %q
[cluster]
bind_address = "127.0.0.1"
bind_port = %d
peers = [%s]
rejoin_interval = "1s"
handoff_timeout = "3s"
%s
[[vip]]
name = "apiserver"
address = %q
interface = "fake0"
%s
%s`, name, filepath.Join(dir, "state"), filepath.Join(dir, "api.sock"), n.port, strings.Join(peers, ", "), extra, c.vip, c.vipExtra, c.tail[name])
	path := filepath.Join(dir, "vipd.toml")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		c.t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		c.t.Fatalf("config for %s: %v", name, err)
	}
	return cfg
}

func (c *testCluster) start(name string) {
	c.t.Helper()
	n := c.nodes[name]
	lg := slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", name)
	a, err := New(n.cfg, Options{
		Logger:   lg,
		Backends: fakeBackendsFor(c.w, name, c.chain),
		Notify:   func(string) {},
		Now:      c.w.now,
		Tick:     50 * time.Millisecond,
		LinkUp:   func(string) bool { return !n.linkDown.Load() },
		LinkEvents: func(ctx context.Context, changed func(string)) error {
			n.linkChanged.Store(&changed)
			<-ctx.Done()
			return nil
		},
		IdleTick: n.idleTick,
		Conns:    func() (ConnsBackend, error) { return &n.conns, nil },
		StopKind: func() StopKind {
			if n.restart.Load() {
				return StopRestart
			}
			return StopHandoff
		},
		NextAdopts:  func() bool { return n.restart.Load() },
		ConfigRules: c.rules,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	if c.beforeRun != nil {
		c.beforeRun(name, a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.agent, n.cancel, n.done = a, cancel, make(chan error, 1)
	go func() { n.done <- a.Run(ctx) }()
	c.t.Cleanup(func() { c.stop(name) })
}

func (c *testCluster) stop(name string) {
	n := c.nodes[name]
	if n.cancel == nil {
		return
	}
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			c.t.Errorf("%s: Run: %v", name, err)
		}
	case <-time.After(20 * time.Second):
		c.t.Errorf("%s: Run did not return 20s after cancel", name)
	}
	n.cancel = nil
}

// waitHolders waits (bounded) until exactly the wanted nodes hold the VIP.
func (c *testCluster) waitHolders(timeout time.Duration, want func([]string) bool, what string) []string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var got []string
	for time.Now().Before(deadline) {
		got = c.w.holdersOf(c.vip)
		if want(got) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("%s: holders %v after %s", what, got, timeout)
	return nil
}

func exactlyOne(h []string) bool { return len(h) == 1 }

func (c *testCluster) client(name string) apipb.VipdClient {
	c.t.Helper()
	conn, err := grpc.NewClient("unix://"+c.nodes[name].cfg.API.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return apipb.NewVipdClient(conn)
}

// testWriter logs to the test until close. memberlist's suspicion timers
// outlive Shutdown and may report a peer's death after the test ended.
type testWriter struct {
	t      *testing.T
	mu     sync.Mutex
	closed bool
	text   strings.Builder // every line written, for seen
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text.Write(p)
	if !w.closed {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// count is how many lines logged hold every one of words.
func (w *testWriter) count(words ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, line := range strings.Split(w.text.String(), "\n") {
		all := len(words) > 0
		for _, word := range words {
			all = all && strings.Contains(line, word)
		}
		if all {
			n++
		}
	}
	return n
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

func TestClusterElectsOneHolderAndHandsOffOnWithdraw(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()

	// All nodes agree on the owner.
	for _, n := range []string{"a", "b", "c"} {
		c.waitOwner(n, owner)
	}

	resp, err := c.client(owner).Withdraw(context.Background(), &apipb.WithdrawRequest{Wait: true, TimeoutMs: 10000})
	if err != nil {
		t.Fatalf("withdraw --wait on owner %s: %v", owner, err)
	}
	if len(resp.HandedOver) != 1 || resp.HandedOver[0] != "apiserver" {
		t.Errorf("handed over = %v, want [apiserver]", resp.HandedOver)
	}
	h := c.w.holdersOf(c.vip)
	if len(h) != 1 || h[0] == owner {
		t.Fatalf("after withdraw --wait returned: holders %v, want one node other than %s", h, owner)
	}
	next := h[0]

	// The flag is persisted: restart the withdrawn node; it stays ineligible.
	c.stop(owner)
	if _, err := os.Stat(filepath.Join(c.nodes[owner].cfg.StateDir, withdrawFile)); err != nil {
		t.Fatalf("withdraw flag not persisted: %v", err)
	}
	c.start(owner)
	c.waitMember(next, owner, StateAlive)
	st, err := c.client(owner).Status(context.Background(), &apipb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Withdrawn {
		t.Errorf("%s restarted not withdrawn", owner)
	}
	if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != next {
		t.Errorf("after withdrawn node restarted: holders %v, want [%s]", h, next)
	}

	// Withdraw the second owner too, then the last eligible node refuses.
	if _, err := c.client(next).Withdraw(context.Background(), &apipb.WithdrawRequest{Wait: true, TimeoutMs: 10000}); err != nil {
		t.Fatalf("withdraw second owner: %v", err)
	}
	last := c.waitHolders(10*time.Second, exactlyOne, "after second withdraw")[0]
	_, err = c.client(last).Withdraw(context.Background(), &apipb.WithdrawRequest{Wait: true, TimeoutMs: 2000})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("withdraw on last eligible node: err %v, want FailedPrecondition", err)
	}
	// The refusal says why no other node can take over.
	msg := status.Convert(err).Message()
	for _, n := range []string{owner, next} {
		if !strings.Contains(msg, n+": withdrawn") {
			t.Errorf("refusal %q does not say %s is withdrawn", msg, n)
		}
	}
	if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != last {
		t.Errorf("refused withdraw changed holders: %v", h)
	}

	// Restore: without preempt the VIP stays where it is.
	if _, err := c.client(owner).Restore(context.Background(), &apipb.RestoreRequest{}); err != nil {
		t.Fatal(err)
	}
	c.waitWithdrawn(last, owner, false)
	if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != last {
		t.Errorf("restore without preempt moved the VIP: holders %v, want [%s]", h, last)
	}
}

func TestClusterOwnerStopHandsOff(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	c.stop(owner)
	h := c.waitHolders(10*time.Second, exactlyOne, "after owner stop")
	if h[0] == owner {
		t.Fatalf("stopped owner %s still holds the VIP", owner)
	}
	for _, n := range []string{"a", "b", "c"} {
		if n != owner {
			c.waitMember(n, owner, StateLeft)
		}
	}
}

// startSteady starts every node, waits until they all see each other and
// exactly one holds the VIP, and returns that one.
func (c *testCluster) startSteady() string {
	c.t.Helper()
	for _, name := range slices.Sorted(maps.Keys(c.nodes)) {
		c.start(name)
	}
	c.waitFormed()
	return c.waitHolders(10*time.Second, exactlyOne, "steady state")[0]
}

// waitFormed waits until every running node sees every other as alive:
// nodes started at once may first hold the VIP alone (bootstrap) until
// they find each other.
func (c *testCluster) waitFormed() {
	c.t.Helper()
	for name := range c.nodes {
		for other := range c.nodes {
			if other != name {
				c.waitMember(name, other, StateAlive)
			}
		}
	}
}

func (c *testCluster) waitOwner(node, owner string) {
	c.t.Helper()
	c.waitStatus(node, func(st *apipb.StatusResponse) bool {
		return len(st.Vips) == 1 && st.Vips[0].Owner == owner
	}, "owner "+owner)
}

func (c *testCluster) waitMember(node, member string, state MemberState) {
	c.t.Helper()
	c.waitStatus(node, func(st *apipb.StatusResponse) bool {
		for _, m := range st.Members {
			if m.Name == member && m.State == state.String() {
				return true
			}
		}
		return false
	}, member+" "+state.String())
}

func (c *testCluster) waitWithdrawn(node, member string, withdrawn bool) {
	c.t.Helper()
	c.waitStatus(node, func(st *apipb.StatusResponse) bool {
		for _, m := range st.Members {
			if m.Name == member && m.Withdrawn == withdrawn {
				return true
			}
		}
		return false
	}, fmt.Sprintf("%s withdrawn=%v", member, withdrawn))
}

func (c *testCluster) waitStatus(node string, ok func(*apipb.StatusResponse) bool, what string) {
	c.t.Helper()
	cl := c.client(node)
	var last *apipb.StatusResponse
	for i := 0; i < 200; i++ {
		st, err := cl.Status(context.Background(), &apipb.StatusRequest{})
		if err == nil {
			last = st
			if ok(st) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("%s never saw %s; last status %v", node, what, last)
}

// TestForget: a member removed without a clean stop (a "ghost" in the peer
// cache that never answers) can be forgotten; alive members cannot.
func TestForget(t *testing.T) {
	c := newTestCluster(t, "a", "b")
	state := c.nodes["a"].cfg.StateDir
	if err := savePeerCache(state, []CachedPeer{{Name: "ghost", Address: "127.0.0.1:9"}}); err != nil {
		t.Fatal(err)
	}
	c.start("a")
	c.start("b")
	c.waitFormed()
	cl := c.client("a")
	if _, err := cl.Forget(t.Context(), &apipb.ForgetRequest{Node: "b"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("forget alive member: %v, want FailedPrecondition", err)
	}
	if _, err := cl.Forget(t.Context(), &apipb.ForgetRequest{Node: "nobody"}); status.Code(err) != codes.NotFound {
		t.Errorf("forget unknown member: %v, want NotFound", err)
	}
	if _, err := cl.Forget(t.Context(), &apipb.ForgetRequest{Node: "ghost"}); err != nil {
		t.Fatalf("forget ghost: %v", err)
	}
	peers, err := loadPeerCache(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if p.Name == "ghost" {
			t.Errorf("ghost still cached: %v", peers)
		}
	}
	if len(peers) != 1 || peers[0].Name != "b" {
		t.Errorf("cache after forget = %v, want [b]", peers)
	}
}

// TestClusterInterfaceDown: an owner whose VIP interface goes down releases
// the VIP at once (no make-before-break through a dead link) and tells the
// others it cannot carry it; when the link returns it does not take the
// VIP back.
func TestClusterInterfaceDown(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	c.nodes[owner].linkDown.Store(true)
	h := c.waitHolders(5*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, "after owner link down")
	if c.w.overlap > 0 {
		t.Errorf("link-down handoff overlapped %d times; want release before the successor claims", c.w.overlap)
	}
	c.nodes[owner].linkDown.Store(false)
	// Watch past the returning node's settle: it must never take it back.
	deadline := time.Now().Add(lifecycle.ClaimSettle + time.Second)
	for time.Now().Before(deadline) {
		if got := c.w.holdersOf(c.vip); len(got) != 1 || got[0] != h[0] {
			t.Fatalf("after link returned: holders %v, want [%s] (no preempt)", got, h[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterLinkEvent: a link change reported by LinkEvents wakes the loop:
// with the idle tick an hour long, the owner releases the VIP as soon as its
// interface is reported down, not at the next tick.
func TestClusterLinkEvent(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	for _, n := range c.nodes {
		n.idleTick = time.Hour
	}
	owner := c.startSteady()
	n := c.nodes[owner]
	changed := n.linkChanged.Load()
	if changed == nil {
		t.Fatal("LinkEvents was not started")
	}
	// Let the claim's own gossip settle: from here on nothing but the link
	// event wakes the owner's loop.
	time.Sleep(1500 * time.Millisecond)
	n.linkDown.Store(true)
	(*changed)("other0") // not a VIP interface: no effect expected
	(*changed)("fake0")
	c.waitHolders(3*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, "after the owner's link-down event")
}

// TestClusterMixedMetadataVersions: during a rolling upgrade one node speaks
// a later metadata version (unknown flags and fields); every node still
// decodes it, counts it eligible and elects the same single owner, and a
// handoff to or from it works.
func TestClusterMixedMetadataVersions(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	c.beforeRun = func(name string, a *Agent) {
		if name == "a" {
			a.encodeMeta = func(m NodeMeta) ([]byte, error) { return metaV2(m), nil }
		}
	}
	owner := c.startSteady()
	for _, n := range []string{"a", "b", "c"} {
		c.waitOwner(n, owner)
		c.waitStatus(n, func(st *apipb.StatusResponse) bool {
			for _, e := range st.Vips[0].Eligibility {
				if !e.Eligible {
					return false
				}
			}
			return len(st.Vips[0].Eligibility) == 3
		}, "every node eligible")
	}
	// Hand the VIP to (or away from) the newer node: withdraw the owner.
	if _, err := c.client(owner).Withdraw(t.Context(), &apipb.WithdrawRequest{Wait: true, TimeoutMs: 10000}); err != nil {
		t.Fatalf("withdraw %s: %v", owner, err)
	}
	h := c.waitHolders(5*time.Second, exactlyOne, "after withdraw")
	if h[0] == owner {
		t.Fatalf("withdrawn owner %s still holds", owner)
	}
}

// TestClusterRepairsRemovedAddress: the owner's VIP removed behind its back
// (ip addr del, a network manager) is put back by the owner within a pass
// or two, without moving the VIP; an interface event makes it immediate.
func TestClusterRepairsRemovedAddress(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	claims := c.w.claimCount()
	c.w.remove(owner, c.vip)
	c.waitHolders(3*time.Second, func(h []string) bool { return len(h) == 1 && h[0] == owner }, "VIP put back by its owner")
	if got := c.w.claimsSince(claims); len(got) != 1 || got[0] != owner {
		t.Errorf("claims after the removal: %v, want only the owner's repair", got)
	}
	c.waitOwner(owner, owner)

	// With an hour-long idle tick only the interface event can start the
	// repair.
	n := c.nodes[owner]
	changed := n.linkChanged.Load()
	if changed == nil {
		t.Fatal("LinkEvents was not started")
	}
	n.agent.do(t.Context(), func() { n.agent.opts.IdleTick = time.Hour; n.agent.st.lastVerify = time.Now() })
	c.w.remove(owner, c.vip)
	(*changed)("fake0")
	c.waitHolders(2*time.Second, func(h []string) bool { return len(h) == 1 && h[0] == owner }, "VIP put back after the address event")
}

// withHealthFile gives every node's VIP a health check that passes while
// file exists (checked every 100ms, with rise and fall) and rewrites their
// configurations.
func (c *testCluster) withHealthFile(file string, rise, fall int) {
	c.t.Helper()
	c.vipExtra = fmt.Sprintf("[vip.health]\ncommand = [\"test\", \"-f\", %q]\ninterval = \"100ms\"\ntimeout = \"1s\"\nrise = %d\nfall = %d\n", file, rise, fall)
	for name := range c.nodes {
		c.nodes[name].cfg = c.config(name, "")
	}
}

// waitAllHealthy waits until every node reports itself healthy (or not).
func (c *testCluster) waitAllHealthy(healthy bool) {
	c.t.Helper()
	for name := range c.nodes {
		c.waitStatus(name, func(st *apipb.StatusResponse) bool {
			if st.Vips[0].Healthy != healthy {
				return false
			}
			for _, m := range st.Members {
				if m.Healthy != healthy {
					return false
				}
			}
			return true
		}, fmt.Sprintf("every member healthy=%v", healthy))
	}
}

// TestClusterHealthReturnsEverywhere: after the bootstrap fallback (no node
// healthy; one node holds the VIP anyway), every node turns healthy in the
// same check interval, as every apiserver does when etcd recovers. The
// holder keeps the VIP and no other node claims it, in each of 50 rounds.
func TestClusterHealthReturnsEverywhere(t *testing.T) {
	// 25 rounds of about 1.7 s: this test is the agent package's longest
	// and sets the length of make test's unit phase.
	rounds := 25
	if testing.Short() {
		rounds = 5
	}
	c := newTestCluster(t, "a", "b", "c")
	healthFile := filepath.Join(t.TempDir(), "ready")
	c.withHealthFile(healthFile, 1, 1)
	holder := c.startSteady()
	c.waitAllHealthy(false)
	c.waitStatus(holder, func(st *apipb.StatusResponse) bool {
		d := st.Vips[0].HealthDetail
		return strings.HasPrefix(d, "unhealthy since ") && strings.Contains(d, "exit status 1")
	}, "health detail: unhealthy since <time>: <why>")
	for round := range rounds {
		claims := c.w.claimCount()
		if err := os.WriteFile(healthFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		// Every node's settle period after the switch is lifecycle.ClaimSettle; sample
		// the wire past it.
		deadline := time.Now().Add(lifecycle.ClaimSettle + 500*time.Millisecond)
		for time.Now().Before(deadline) {
			if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != holder {
				t.Fatalf("round %d: holders %v, want only %s", round, h, holder)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := c.w.claimsSince(claims); len(got) > 0 {
			t.Fatalf("round %d: health returned everywhere and %v claimed the VIP held by %s", round, got, holder)
		}
		c.waitAllHealthy(true)
		if err := os.Remove(healthFile); err != nil {
			t.Fatal(err)
		}
		c.waitAllHealthy(false)
		// Failing everywhere may move the VIP: the holder whose check
		// fails first cannot know the others' will fail a moment later,
		// and hands it to one still healthy (make-before-break). What
		// this test is about is the way back: whoever holds it now keeps
		// it when health returns.
		holder = c.waitHolders(5*time.Second, exactlyOne, "one holder in the bootstrap fallback")[0]
	}
}

// TestReloadKeepsHolder: SIGHUP on the owner with a health check (rise 2,
// so a restarted checker would start unhealthy and hand the VIP off),
// first with an unchanged file, then with log_level changed: nothing moves.
func TestReloadKeepsHolder(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	healthFile := filepath.Join(t.TempDir(), "ready")
	if err := os.WriteFile(healthFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.withHealthFile(healthFile, 2, 3)
	owner := c.startSteady()
	c.waitAllHealthy(true)
	path := c.nodes[owner].cfg.Path
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range []struct{ what, text string }{
		{"unchanged file", string(orig)},
		{"log_level changed", strings.Replace(string(orig), "node_name", "log_level = \"debug\"\nnode_name", 1)},
	} {
		if err := os.WriteFile(path, []byte(edit.text), 0o644); err != nil {
			t.Fatal(err)
		}
		claims := c.w.claimCount()
		reloads := c.log.count("configuration reloaded", "node="+owner)
		c.nodes[owner].agent.Reload()
		waitFor(t, 5*time.Second, edit.what+": reloaded", func() bool { return c.log.count("configuration reloaded", "node="+owner) > reloads })
		// A checker restarted unhealthy would hand off within a check or
		// two (100ms each) plus the successor's claim; watch well past it.
		deadline := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(deadline) {
			if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != owner {
				t.Fatalf("%s: holders %v after reload, want only %s", edit.what, h, owner)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := c.w.claimsSince(claims); len(got) > 0 {
			t.Errorf("%s: reload moved the VIP: claims %v", edit.what, got)
		}
	}
	var lvl string
	a := c.nodes[owner].agent
	if err := a.do(t.Context(), func() { lvl = a.st.cfg.LogLevel }); err != nil {
		t.Fatal(err)
	}
	if lvl != "debug" {
		t.Errorf("log_level after reload = %q, want debug", lvl)
	}
}

// TestClusterDeafOwnerHandsOver: the owner stops hearing its peers (every
// membership and lease packet to it dropped; its own still go out, so the
// others keep hearing it). It fences itself and must stay fenced, not claim
// again, until a majority hears it: the others then see it fenced and one
// of them takes the VIP. Never two holders. When it hears again, the VIP
// stays where it went (no preemption).
func TestClusterDeafOwnerHandsOver(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	owner := c.startSteady()
	overlap := func() int {
		c.w.mu.Lock()
		defer c.w.mu.Unlock()
		return c.w.overlap
	}
	before := overlap()
	c.nodes[owner].agent.members.SetAllowed([]netip.Prefix{netip.MustParsePrefix("192.0.2.99/32")})
	got := c.waitHolders(10*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, "the deaf owner's VIP on another node")
	// Stays there for a while: the deaf node does not take it back.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if h := c.w.holdersOf(c.vip); len(h) > 1 || (len(h) == 1 && h[0] == owner) {
			t.Fatalf("holders %v while %s is deaf; %s took over", h, owner, got[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.nodes[owner].agent.members.SetAllowed(nil)
	c.waitMember(owner, got[0], StateAlive)
	deadline = time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if h := c.w.holdersOf(c.vip); len(h) != 1 || h[0] != got[0] {
			t.Fatalf("holders %v after %s hears again, want only %s", h, owner, got[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := overlap() - before; n > 0 {
		t.Errorf("%d announcements while another node held the VIP", n)
	}
}
