package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/conns"
)

// lingerConns is a ConnsBackend for lingerOn: List returns counts[i]
// connections at its i-th call (the last one after that), DestroyIdle
// records its calls and closes what is left.
type lingerConns struct {
	ConnsBackend
	mu      sync.Mutex
	counts  []int
	lists   int
	destroy []conns.IdleConfig
}

func (f *lingerConns) List(conns.Filter) (conns.Set, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.counts[min(f.lists, len(f.counts)-1)]
	f.lists++
	var cs []conns.Conn
	for i := range n {
		cs = append(cs, conns.Conn{Local: netip.MustParseAddrPort("192.0.2.10:6443"),
			Remote: netip.AddrPortFrom(netip.MustParseAddr("198.51.100.7"), uint16(40000+i))})
	}
	return conns.NewSet(cs...), nil
}

func (f *lingerConns) DestroyIdle(_ context.Context, _ conns.Filter, c conns.IdleConfig) (conns.DestroyResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroy = append(f.destroy, c)
	return conns.DestroyResult{Idle: f.counts[len(f.counts)-1]}, nil
}

// lingerClock is a clock whose timers fire when the test lets time pass:
// after returns a channel that fires once tick has moved the clock past
// its deadline.
type lingerClock struct {
	mu     sync.Mutex
	t      time.Time
	timers []lingerTimer
}

type lingerTimer struct {
	at time.Time
	c  chan time.Time
}

func (c *lingerClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *lingerClock) after(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, lingerTimer{at: c.t.Add(d), c: ch})
	return ch
}

// waiting reports whether a timer is pending (the goroutine waits on it).
func (c *lingerClock) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers) > 0
}

// advance moves the clock to the first pending timer and fires it.
func (c *lingerClock) advance() {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := c.timers[0]
	c.timers = c.timers[1:]
	if tm.at.After(c.t) {
		c.t = tm.at
	}
	tm.c <- c.t
}

// TestLingerOn: a lingering node counts its connections every lingerPoll
// and stops when none is left, closing nothing; at linger_max, when
// hurried (a shutdown, a restart) or with linger_max 0 it closes what is
// left at idle moments within quiesceMax; called off (ctx), it closes
// nothing.
func TestLingerOn(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	cases := []struct {
		name   string
		counts []int
		max    time.Duration
		hurry  bool
		cancel bool
		// want: DestroyIdle's calls, with Until after the start; the
		// clock when it returned.
		destroys int
		until    time.Duration
		took     time.Duration
	}{
		{name: "connections end by themselves", counts: []int{2, 2, 1, 0}, max: time.Minute, took: 3 * lingerPoll},
		{name: "none to start with", counts: []int{0}, max: time.Minute},
		{name: "linger_max passes", counts: []int{2}, max: 10 * time.Second, destroys: 1, until: 10*time.Second + quiesceMax, took: 10 * time.Second},
		{name: "hurried", counts: []int{2}, max: time.Minute, hurry: true, destroys: 1, until: quiesceMax},
		{name: "linger_max 0", counts: []int{2}, max: 0, destroys: 1, until: quiesceMax},
		{name: "called off", counts: []int{2}, max: time.Minute, cancel: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &lingerConns{counts: tc.counts}
			clk := &lingerClock{t: t0}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hurry := make(chan struct{})
			if tc.hurry {
				close(hurry)
			}
			if tc.cancel {
				cancel()
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = lingerOn(ctx, b, conns.Filter{}, hurry, tc.max, clk.now, clk.after)
			}()
			// Let time pass whenever the goroutine waits, until it ends
			// (bounded: linger_max's worth of polls and some).
			for i := 0; ; i++ {
				if i > 10000 {
					t.Fatal("lingerOn did not return")
				}
				select {
				case <-done:
				default:
					if clk.waiting() {
						clk.advance()
					} else {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				break
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if len(b.destroy) != tc.destroys {
				t.Fatalf("DestroyIdle called %d times, want %d", len(b.destroy), tc.destroys)
			}
			if tc.destroys > 0 {
				if got := b.destroy[0].Until.Sub(t0); got != tc.until {
					t.Errorf("DestroyIdle until start+%v, want start+%v", got, tc.until)
				}
				if b.destroy[0].Quiet != quiesceQuiet || b.destroy[0].Poll != quiescePoll {
					t.Errorf("DestroyIdle %+v", b.destroy[0])
				}
			}
			if got := clk.now().Sub(t0); got != tc.took {
				t.Errorf("took %v on the clock, want %v", got, tc.took)
			}
		})
	}
}

// TestClusterLingerChain: two planned moves in a row, a to b to c, with
// each old holder's connections open: the third holder forwards to both
// lingering nodes (the connection accepted two moves ago still works);
// when the first one's connections end it stops lingering and the holder
// forwards to the second only, then to none. Nothing is closed, and there
// is one holder throughout.
func TestClusterLingerChain(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	c.chain = true
	first := c.startSteady()
	vip := c.vip
	conn := func(client string, port uint16) conns.Conn {
		return conns.Conn{Local: netip.AddrPortFrom(vip, 6443), Remote: netip.AddrPortFrom(netip.MustParseAddr(client), port)}
	}
	c.nodes[first].conns.set(conn("198.51.100.7", 40000))
	mark := len(c.w.stepsSince(0))
	if _, err := c.client(first).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		t.Fatal(err)
	}
	second := c.waitHolders(15*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != first }, "the second holder")[0]
	waitSteps(t, c.w, mark, first+" linger")
	c.nodes[second].conns.set(conn("198.51.100.8", 40001))
	mark = len(c.w.stepsSince(0))
	if _, err := c.client(second).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		t.Fatal(err)
	}
	third := c.waitHolders(15*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != first && h[0] != second }, "the third holder")[0]
	// The third holder forwards to both before it announces; the second
	// hands its forwarding over and lingers too.
	// The third holder forwards before it announces, to both lingering
	// nodes (to the first one from its claim, or as soon as its metadata
	// says it lingers); the second hands its forwarding over and lingers
	// too.
	waitSteps(t, c.w, mark, third+" announce", third+" forward to [127.0.0.1 127.0.0.1] []", second+" stop forward", second+" linger")
	steps := c.w.stepsSince(mark)
	if i := slices.IndexFunc(steps, func(s string) bool { return strings.HasPrefix(s, third+" forward to ") }); i < 0 || i > slices.Index(steps, third+" announce") {
		t.Errorf("steps %q: the third holder announced before it forwarded", steps)
	}
	// The second stops forwarding only once its address has gone: a
	// client whose ARP cache still names it would otherwise be reset on
	// the first node's connection (the cluster simulator's seeds 47 and
	// 862).
	if slices.Index(steps, second+" stop forward") < slices.Index(steps, second+" linger") {
		t.Errorf("steps %q: the second holder stopped forwarding before its address went", steps)
	}
	time.Sleep(2 * lingerPoll)
	if h := c.w.holdersOf(vip); !slices.Equal(h, []string{third}) {
		t.Fatalf("holders %v with two nodes lingering, want [%s]", h, third)
	}
	if got := c.w.stepsSince(mark); slices.Contains(got, first+" stop linger") || slices.Contains(got, second+" stop linger") {
		t.Fatalf("steps %q: a lingering node stopped with its connections open", got)
	}

	// The first one's connection ends (a GOAWAY): it stops lingering, the
	// holder forwards to the second only.
	mark = len(c.w.stepsSince(0))
	c.nodes[first].conns.set()
	waitSteps(t, c.w, mark, first+" stop linger", third+" forward to [127.0.0.1] []")
	mark = len(c.w.stepsSince(0))
	c.nodes[second].conns.set()
	waitSteps(t, c.w, mark, second+" stop linger", third+" stop forward")
	for _, n := range []string{first, second} {
		if k := c.nodes[n].conns.closedCount(); k != 0 {
			t.Errorf("%s closed %d connections, want none: they ended by themselves", n, k)
		}
	}
}

// forwardRecorder is an announcer that records what it forwards to.
type forwardRecorder struct {
	Announcer
	mu      sync.Mutex
	to      [][]netip.Addr
	stopped int
}

func (f *forwardRecorder) Forward(_ context.Context, _ netip.Addr, _ []uint16, to ...netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.to = append(f.to, slices.Clone(to))
	return nil
}

func (f *forwardRecorder) StopForward(context.Context, netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped++
	return nil
}

func lingers(m *Member) { setVIP(m, func(v *VIPMeta) { v.Lingering = true }) }

// TestStepForwardTargets: the holder forwards to each lingering member
// until it is gone (then at once, and its clients are to be reset: a
// takeover) or has stopped lingering (ForwardGrace later, with a
// takeover of whatever it still listed); it adds a member that starts
// lingering while it forwards; it stops when none is left.
func TestStepForwardTargets(t *testing.T) {
	cfg, err := config.Parse("a.toml", []byte("node_name = \"a\"\n[cluster]\nbind_address = \"192.0.2.11\"\npeers = [\"192.0.2.12\"]\n"+
		"[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	a := &Agent{self: "a", now: func() time.Time { return now }, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		st: loopState{cfg: cfg}, clients: &clients{mirrors: map[string]*conns.Mirror{}}}
	fw := &forwardRecorder{}
	b, c, d := netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("192.0.2.13"), netip.MustParseAddr("192.0.2.14")
	v := &vipState{cfg: cfg.VIPs[0], ann: fw, held: true,
		forward: &lifecycle.Forward{Since: now, Targets: map[string]netip.Addr{"b": b, "c": c}, Gone: map[string]time.Time{}}}
	addrs := map[string]netip.AddrPort{"b": netip.AddrPortFrom(b, 7946), "c": netip.AddrPortFrom(c, 7946), "d": netip.AddrPortFrom(d, 7946)}
	from := func() []string {
		var out []string
		for _, tk := range v.takeovers {
			out = append(out, tk.from)
		}
		return out
	}
	last := func() []netip.Addr {
		fw.mu.Lock()
		defer fw.mu.Unlock()
		if len(fw.to) == 0 {
			return nil
		}
		return fw.to[len(fw.to)-1]
	}

	// b is gone: dropped at once, its clients to be reset.
	a.stepForward(context.Background(), v, peersOf([]Member{node("a", holds), node("b", lingers, dead), node("c", lingers)}, "api", addrs))
	if got := slices.Collect(maps.Keys(v.forward.Targets)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("targets %v after b died, want [c]", got)
	}
	if !slices.Equal(last(), []netip.Addr{c}) || !slices.Equal(from(), []string{"b"}) {
		t.Fatalf("forwarding to %v, takeovers from %v; want [%s], [b]", last(), from(), c)
	}
	// d starts lingering (it held the VIP after this node): added.
	a.stepForward(context.Background(), v, peersOf([]Member{node("a", holds), node("c", lingers), node("d", lingers)}, "api", addrs))
	if !slices.Equal(last(), []netip.Addr{c, d}) {
		t.Fatalf("forwarding to %v, want [%s %s]", last(), c, d)
	}
	// c stops lingering: kept ForwardGrace, then dropped.
	n := len(fw.to)
	a.stepForward(context.Background(), v, peersOf([]Member{node("a", holds), node("c"), node("d", lingers)}, "api", addrs))
	now = now.Add(lifecycle.ForwardGrace - time.Millisecond)
	a.stepForward(context.Background(), v, peersOf([]Member{node("a", holds), node("c"), node("d", lingers)}, "api", addrs))
	if len(fw.to) != n {
		t.Fatalf("forwarding changed to %v before ForwardGrace", last())
	}
	now = now.Add(time.Millisecond)
	a.stepForward(context.Background(), v, peersOf([]Member{node("a", holds), node("c"), node("d", lingers)}, "api", addrs))
	if !slices.Equal(last(), []netip.Addr{d}) || !slices.Equal(from(), []string{"b", "c"}) {
		t.Fatalf("forwarding to %v, takeovers from %v; want [%s], [b c]", last(), from(), d)
	}
	// d left: nothing left to forward to.
	a.stepForward(context.Background(), v, peersOf([]Member{node("a", holds), node("c"), node("d", lingers, left)}, "api", addrs))
	if v.forward != nil || fw.stopped != 1 {
		t.Fatalf("forward %v, StopForward called %d times; want stopped once", v.forward, fw.stopped)
	}
}

// TestMetaLingerBits: the lingering and ending-lingering flags travel in
// the metadata (a VIP's bits 5 and 6).
func TestMetaLingerBits(t *testing.T) {
	m := NodeMeta{Valid: true, VIPs: map[uint32]VIPMeta{
		config.VIPKey("a"): {Healthy: true, Lingering: true}, config.VIPKey("b"): {Held: true, Forwarding: true, EndLinger: true},
	}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.VIPs, m.VIPs) {
		t.Fatalf("decoded %+v, want %+v", got.VIPs, m.VIPs)
	}
}

// has returns the connections f's node still has.
func (f *fakeConns) hasConns() []conns.Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.has)
}

// TestClusterOwnConnectionsToTheVIP: a node's own connections to the VIP
// (its kubelet's) cannot survive the address moving: the new holder's to
// the old holder go deaf once the address is its own (what it sends stays
// on the host; the answers come from an address it has, and are dropped
// as martians), the old holder's to itself through the VIP die when the
// address (or, lingering, its local route) goes. Each node closes them
// then, so their clients reconnect at once instead of waiting out their
// timeouts; nothing else is closed, and nothing before its time.
func TestClusterOwnConnectionsToTheVIP(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	c.chain = true
	first := c.startSteady()
	vip := c.vip
	ap := func(a string, port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(a), port) }
	vipAt := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(vip, port) }
	served := conns.Conn{Local: vipAt(6443), Remote: ap("198.51.100.7", 40000)}
	// The holder's kubelet through the VIP: both ends of one connection.
	loop := []conns.Conn{{Local: vipAt(40010), Remote: vipAt(6443)}, {Local: vipAt(6443), Remote: vipAt(40010)}}
	c.nodes[first].conns.set(append([]conns.Conn{served}, loop...)...)
	// The others' kubelets reach the VIP on the holder, and elsewhere.
	toVIP := func(n string) conns.Conn {
		return conns.Conn{Local: ap("198.51.100.1", 40020+uint16(n[0])), Remote: vipAt(6443)}
	}
	elsewhere := conns.Conn{Local: ap("198.51.100.1", 40030), Remote: ap("192.0.2.99", 6443)}
	for name, n := range c.nodes {
		if name != first {
			n.conns.set(toVIP(name), elsewhere)
		}
	}

	mark := len(c.w.stepsSince(0))
	if _, err := c.client(first).Withdraw(context.Background(), &apipb.WithdrawRequest{}); err != nil {
		t.Fatal(err)
	}
	second := c.waitHolders(15*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != first }, "the successor")[0]
	waitSteps(t, c.w, mark, first+" linger")
	var bystander string
	for name := range c.nodes {
		if name != first && name != second {
			bystander = name
		}
	}
	// The successor's own connection to the VIP is closed at its claim;
	// its other one and the bystander's stay.
	deadline := time.Now().Add(5 * time.Second)
	for slices.Contains(c.nodes[second].conns.hasConns(), toVIP(second)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds the VIP and still has its own connection to it, served by %s: %v", second, first, c.nodes[second].conns.hasConns())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := c.nodes[second].conns.hasConns(); !slices.Equal(got, []conns.Conn{elsewhere}) {
		t.Errorf("%s after its claim has %v, want only its connection elsewhere", second, got)
	}
	if got := c.nodes[bystander].conns.hasConns(); !slices.Equal(got, []conns.Conn{toVIP(bystander), elsewhere}) {
		t.Errorf("%s, not holding, has %v, want both its connections", bystander, got)
	}
	// The lingering node serves its own connection through the VIP (the
	// local route) as long as it lingers: it is not closed yet.
	time.Sleep(2 * lingerPoll)
	if got := c.nodes[first].conns.hasConns(); !slices.Equal(got, append([]conns.Conn{served}, loop...)) {
		t.Fatalf("lingering %s has %v, want all three connections still", first, got)
	}
	// Its clients' connection ends: it stops lingering, and closes its
	// own through the VIP then.
	mark = len(c.w.stepsSince(0))
	c.nodes[first].conns.set(loop...)
	waitSteps(t, c.w, mark, first+" stop linger")
	deadline = time.Now().Add(5 * time.Second)
	for len(c.nodes[first].conns.hasConns()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s stopped lingering and still has %v: its own connection through the VIP it no longer has", first, c.nodes[first].conns.hasConns())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// orderRecorder is an announcer that records the order of its calls, and
// can fail its Withdraw.
type orderRecorder struct {
	mu           sync.Mutex
	calls        []string
	withdrawFail error
}

func (f *orderRecorder) note(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *orderRecorder) Announce(context.Context, netip.Addr) error { f.note("announce"); return nil }
func (f *orderRecorder) Withdraw(context.Context, netip.Addr) error {
	f.note("withdraw")
	return f.withdrawFail
}
func (f *orderRecorder) Forward(context.Context, netip.Addr, []uint16, ...netip.Addr) error {
	f.note("forward")
	return nil
}
func (f *orderRecorder) StopForward(context.Context, netip.Addr) error {
	f.note("stop forward")
	return nil
}

// TestReleaseStopsForwardingAfterTheAddress: a holder that forwards the
// connections of members lingering from earlier handoffs and releases
// the VIP (here: the election went back to a member that still holds it)
// removes its address first and its forwarding after. In between, the
// address still on this host and the rule gone, a client whose ARP cache
// names this node would be reset on a lingering member's connection (the
// cluster simulator's seed 807). A withdraw that fails keeps the VIP
// held, and its forwarding with it.
func TestReleaseStopsForwardingAfterTheAddress(t *testing.T) {
	cfg, err := config.Parse("a.toml", []byte("node_name = \"a\"\n[cluster]\nbind_address = \"192.0.2.11\"\npeers = [\"192.0.2.12\"]\n"+
		"[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name        string
		fail        error
		want        []string
		held, fwdOn bool
	}{
		{name: "withdrawn", want: []string{"withdraw", "stop forward"}},
		{name: "withdraw fails", fail: errors.New("netlink: device busy"), want: []string{"withdraw"}, held: true, fwdOn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{self: "a", now: func() time.Time { return now }, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				st: loopState{cfg: cfg, recorded: map[string]CleanupTarget{}}, events: newBroker(),
				metrics: newMetrics(nil), clients: &clients{mirrors: map[string]*conns.Mirror{}}}
			ann := &orderRecorder{withdrawFail: tc.fail}
			v := &vipState{cfg: cfg.VIPs[0], ann: ann, held: true,
				forward: &lifecycle.Forward{Since: now, Targets: map[string]netip.Addr{"b": netip.MustParseAddr("192.0.2.12")}, Gone: map[string]time.Time{}}}
			a.release(context.Background(), v, "successor b holds it")
			if !slices.Equal(ann.calls, tc.want) {
				t.Errorf("calls %q, want %q: the forwarding must outlive the address", ann.calls, tc.want)
			}
			if v.held != tc.held || (v.forward != nil) != tc.fwdOn {
				t.Errorf("held %v, forwarding %v; want %v, %v", v.held, v.forward != nil, tc.held, tc.fwdOn)
			}
		})
	}
}
