package agent

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/agent/lifecycle"
	"github.com/vipd/vipd/conns"
)

// The clients of the VIPs at a failover (docs/design.md, "Client
// connections at a failover"; the mechanisms are package conns):
//
//   - every node publishes, once a second, the established connections it
//     has on the VIPs it holds to every alive peer, as numbered deltas with
//     a full set now and then (conns.Feed), each on a TCP stream of its
//     own to the peer's membership port, from the publisher's bind
//     address, sealed under the cluster key like the rest of membership
//     (membership/transport.go); each peer keeps a copy per publisher
//     (conns.Mirror), taking a list only from the address of the member it
//     names;
//   - a node that claims a VIP other members held takes each one's list
//     for the VIP (every member seen holding it in the last
//     lifecycle.TakeoverHorizon: an old holder still releasing and a
//     successor that died mid-handoff both had clients), waits until that
//     member no longer holds it (it released it, or it is gone: dead for
//     the lease, left), then resets every connection on the list that it does not
//     have itself (conns.Pokable, conns.Poker), paced, in a goroutine,
//     and over the next seconds the ports just below each client's first
//     new connection to this node (conns.Unlisted): the connections the
//     client opened after the list;
//   - a node that hands a VIP over on purpose closes its own connections
//     on it once the successor holds it, before it takes the address away
//     (decision.CloseClients).

// ConnsBackend is what the agent needs of package conns: the host's
// connections to its VIPs and the resets. Run opens the kernel's
// (conns.Open, conns.NewPoker) unless Options.Conns gives another.
type ConnsBackend interface {
	// List returns the established connections f selects.
	List(f conns.Filter) (conns.Set, error)
	// Destroy closes them; it returns how many.
	Destroy(f conns.Filter) (int, error)
	// DestroyIdle closes them each at an idle moment, the rest when ctx
	// ends (conns.Table.DestroyIdle).
	DestroyIdle(ctx context.Context, f conns.Filter, c conns.IdleConfig) (conns.DestroyResult, error)
	// Poke resets the clients of cs (connections this host does not have).
	Poke(ctx context.Context, cs []conns.Conn, cfg conns.PokeConfig) (conns.PokeResult, error)
	// Close releases the backend.
	Close() error
}

// kernelConns is the host's ConnsBackend.
type kernelConns struct{ t *conns.Table }

func openKernelConns() (ConnsBackend, error) {
	t, err := conns.Open()
	if err != nil {
		return nil, err
	}
	return kernelConns{t}, nil
}

func (k kernelConns) List(f conns.Filter) (conns.Set, error) { return k.t.List(f) }
func (k kernelConns) Destroy(f conns.Filter) (int, error)    { return k.t.Destroy(f) }
func (k kernelConns) DestroyIdle(ctx context.Context, f conns.Filter, c conns.IdleConfig) (conns.DestroyResult, error) {
	return k.t.DestroyIdle(ctx, f, c)
}
func (k kernelConns) Close() error { return k.t.Close() }
func (k kernelConns) Poke(ctx context.Context, cs []conns.Conn, cfg conns.PokeConfig) (conns.PokeResult, error) {
	p, err := conns.NewPoker(cfg)
	if err != nil {
		return conns.PokeResult{Unsent: len(cs)}, err
	}
	return p.Poke(ctx, cs)
}

const (
	// publishEvery is how often a node lists and publishes its
	// connections: a takeover finds its list at most about this old.
	publishEvery = time.Second
	// fullEvery is how often the whole list goes out even without a gap.
	fullEvery = time.Minute
	// reconnectWindow is how long after a reset a client seen connected
	// to this node again counts as reconnected.
	reconnectWindow = time.Minute
	// mirrorKeep is how long a publisher's list is kept after it died or
	// left (a takeover takes its copy when it starts).
	mirrorKeep = time.Minute
	// askEvery bounds the requests for a full set to one publisher.
	askEvery = time.Second
)

// The messages (memberlist user messages):
//
//	byte 0   'C'
//	byte 1   1: a conns.Feed message follows; 2: "send me your full set"
//	byte 2   n, the length of the sender's node name
//	n bytes  the sender's node name
//	rest     the Feed message (kind 1)
const (
	clientsMagic    = 'C'
	clientsFeed     = 1
	clientsWantFull = 2
)

// clientsMessage frames a message from self.
func clientsMessage(kind byte, self string, body []byte) []byte {
	b := make([]byte, 0, 3+len(self)+len(body))
	b = append(b, clientsMagic, kind, byte(len(self)))
	b = append(b, self...)
	return append(b, body...)
}

// parseClientsMessage reads a message's kind, sender and body.
func parseClientsMessage(b []byte) (kind byte, from string, body []byte, err error) {
	if len(b) < 3 || b[0] != clientsMagic {
		return 0, "", nil, fmt.Errorf("not a client connections message")
	}
	n := int(b[2])
	if len(b) < 3+n {
		return 0, "", nil, fmt.Errorf("client connections message truncated")
	}
	from = string(b[3 : 3+n])
	if !config.ValidNodeName(from) {
		return 0, "", nil, fmt.Errorf("client connections message from an invalid node name")
	}
	switch b[1] {
	case clientsFeed, clientsWantFull:
	default:
		return 0, "", nil, fmt.Errorf("client connections message of kind %d", b[1])
	}
	return b[1], from, b[3+n:], nil
}

// publishSpec is what the publisher lists, set by the loop after each pass.
type publishSpec struct {
	filter conns.Filter
	names  map[netip.Addr]string // VIP address to VIP name, for the metrics
}

// clients is the agent's side of it: the publisher goroutine, the peers'
// lists (received in memberlist's goroutines), the resets and closes.
type clients struct {
	backend ConnsBackend // nil: the host's connections cannot be read
	self    string
	log     *slog.Logger
	metrics *metrics
	events  *broker
	now     func() time.Time
	grid    lease.Grid
	// members and send reach the other members (membership).
	members func() []memberInfo
	send    func(to memberInfo, msg []byte) error

	spec     atomic.Pointer[publishSpec]
	wantFull chan string // peers that asked for this node's full set
	askFull  chan string // publishers to ask for their full set

	mu      sync.Mutex
	mirrors map[string]*conns.Mirror
	asked   map[string]time.Time
	poked   map[netip.Addr]map[netip.Addr]time.Time // VIP, client address: until when a connection counts as a reconnect
}

func newClients(a *Agent, backend ConnsBackend) *clients {
	return &clients{
		backend: backend, self: a.self, log: a.log, metrics: a.metrics, events: a.events, now: a.now, grid: a.grid,
		members: a.members.Members, send: a.members.SendList,
		wantFull: make(chan string, 64), askFull: make(chan string, 64),
		mirrors: map[string]*conns.Mirror{}, asked: map[string]time.Time{}, poked: map[netip.Addr]map[netip.Addr]time.Time{},
	}
}

// receive takes a message from a peer, with the address it came from
// (the transport's stream). A message is taken only from the membership
// address of the member it names: a member cannot publish a list, or ask
// for one, in another's name.
func (c *clients) receive(b []byte, src netip.AddrPort) {
	kind, from, body, err := parseClientsMessage(b)
	if err != nil || from == c.self {
		c.log.Debug("client connections message dropped", "err", err)
		return
	}
	if !c.sentBy(from, src.Addr()) {
		c.log.Debug("client connections message dropped: not from the address of the member it names", "peer", from, "from", src)
		return
	}
	if kind == clientsWantFull {
		select {
		case c.wantFull <- from:
		default:
		}
		return
	}
	now := c.now()
	c.mu.Lock()
	m := c.mirrors[from]
	if m == nil {
		m = &conns.Mirror{}
		c.mirrors[from] = m
	}
	resync, err := m.Apply(body, now)
	ask := resync && now.Sub(c.asked[from]) >= askEvery
	if ask {
		c.asked[from] = now
	}
	c.mu.Unlock()
	if err != nil {
		c.log.Debug("client connections list not understood", "peer", from, "err", err)
	}
	if ask {
		select {
		case c.askFull <- from:
		default:
		}
	}
}

// sentBy reports whether addr is the membership address of the member
// named name.
func (c *clients) sentBy(name string, addr netip.Addr) bool {
	for _, m := range c.members() {
		if m.Name == name {
			ap, err := netip.ParseAddrPort(m.Address)
			return err == nil && ap.Addr().Unmap() == addr.Unmap()
		}
	}
	return false
}

// published returns what from last published of its connections to vip.
func (c *clients) published(from string, vip netip.Addr) conns.Set {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.mirrors[from]
	if m == nil {
		return conns.Set{}
	}
	s, _, _ := m.Set()
	return s.Filter(func(cn conns.Conn) bool { return cn.Local.Addr() == vip })
}

// run publishes this node's connections every publishEvery until ctx ends.
func (c *clients) run(ctx context.Context) {
	feed := conns.NewFeed(rand.Uint64(), fullEvery)
	synced := map[string]bool{} // peers that got every message since a full set
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.publish(feed, synced, c.now())
		now := c.now() // after the round: the next starts on the grid from here
		t.Reset(c.grid.After(now, publishEvery).Sub(now))
	}
}

// publish is one round: list, count reconnects, send the change (or the
// full set to a peer that needs it), ask for the full sets wanted, forget
// departed publishers.
func (c *clients) publish(feed *conns.Feed, synced map[string]bool, now time.Time) {
	spec := c.spec.Load()
	var set conns.Set
	if spec != nil && c.backend != nil && len(spec.filter.Addrs) > 0 {
		var err error
		if set, err = c.backend.List(spec.filter); err != nil {
			c.log.Warn("list the VIPs' client connections", "err", err)
			return
		}
	}
	c.observe(set, spec, now)
	msg := feed.Next(set, now)
	for _, p := range drain(c.wantFull) {
		delete(synced, p)
	}
	members := c.members()
	alive := map[string]memberInfo{}
	for _, m := range members {
		if m.Name != c.self && m.State == StateAlive {
			alive[m.Name] = m
		}
	}
	for p := range synced {
		if _, ok := alive[p]; !ok {
			delete(synced, p) // gone: it gets a full set when it is back
		}
	}
	// What each peer gets: the change, or the full set when it has not
	// had every message since one.
	type delivery struct {
		to  memberInfo
		msg []byte
	}
	var out []delivery
	for name, m := range alive {
		body := msg
		if !synced[name] {
			body = feed.Full()
		}
		if body != nil {
			out = append(out, delivery{m, clientsMessage(clientsFeed, c.self, body)})
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent int
	for _, d := range out {
		wg.Go(func() {
			err := c.send(d.to, d.msg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				delete(synced, d.to.Name)
				c.log.Debug("send client connections", "peer", d.to.Name, "err", err)
				return
			}
			synced[d.to.Name] = true
			sent += len(d.msg)
		})
	}
	for _, p := range drain(c.askFull) {
		if m, ok := alive[p]; ok {
			wg.Go(func() {
				if err := c.send(m, clientsMessage(clientsWantFull, c.self, nil)); err != nil {
					c.log.Debug("ask for client connections", "peer", p, "err", err)
				}
			})
		}
	}
	wg.Wait()
	c.metrics.clientPublishBytes.Add(float64(sent))
	c.forget(members, now)
}

// drain returns what ch holds now, without waiting.
func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			return out
		}
	}
}

// observe sets the published-connections gauge and counts the clients
// reset by this node that are connected to it again.
func (c *clients) observe(set conns.Set, spec *publishSpec, now time.Time) {
	per := map[netip.Addr]int{}
	c.mu.Lock()
	for cn := range set.All() {
		vip := cn.Local.Addr()
		per[vip]++
		if until, ok := c.poked[vip][cn.Remote.Addr()]; ok {
			delete(c.poked[vip], cn.Remote.Addr())
			if now.Before(until) && spec != nil {
				c.metrics.clientReconnects.WithLabelValues(spec.names[vip]).Inc()
			}
		}
	}
	for vip, clients := range c.poked {
		for a, until := range clients {
			if !now.Before(until) {
				delete(clients, a)
			}
		}
		if len(clients) == 0 {
			delete(c.poked, vip)
		}
	}
	c.mu.Unlock()
	if spec != nil {
		for vip, name := range spec.names {
			c.metrics.clientConns.WithLabelValues(name).Set(float64(per[vip]))
		}
	}
}

// forget drops the lists of publishers that are no longer members, or died
// or left more than mirrorKeep ago.
func (c *clients) forget(members []memberInfo, now time.Time) {
	known := map[string]memberInfo{}
	for _, m := range members {
		known[m.Name] = m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, mirror := range c.mirrors {
		m, ok := known[name]
		if !ok || ((m.State == StateDead || m.State == StateLeft) && now.Sub(m.Since) > mirrorKeep) {
			delete(c.mirrors, name)
			delete(c.asked, name)
			c.metrics.clientConnsKnown.DeleteLabelValues(name)
			continue
		}
		s, _, _ := mirror.Set()
		c.metrics.clientConnsKnown.WithLabelValues(name).Set(float64(s.Len()))
	}
}

// takeover is a VIP this node claimed while another member held it (or
// had held it last): the clients of that member's connections, to reset
// once it no longer holds the VIP.
type takeover struct {
	from  string
	since time.Time
	// conns is from's list for the VIP when this node claimed it (it may
	// close them and publish that before this node resets them).
	conns conns.Set
}

// canReset reports whether this node can reset the clients of v's lost
// holders ([connections] reset on, a VIP not announced by all: with
// announce = "all" every eligible node holds it, no holder's clients are
// lost).
func (a *Agent) canReset(v *vipState) bool {
	return a.clients != nil && a.st.cfg.Connections.Enabled() && v.cfg.Announce != config.AnnounceAll
}

// startTakeover records, when this node has just claimed v, whose clients
// it may have to reset (lifecycle.StartTakeovers), with their lists as
// they are now.
func (a *Agent) startTakeover(v *vipState) {
	v.takeovers = nil
	for _, name := range lifecycle.StartTakeovers(a.self, v.holdersSeen, a.canReset(v)) {
		v.takeovers = append(v.takeovers, &takeover{from: name, since: a.now(), conns: a.clients.published(name, v.cfg.Addr())})
	}
}

// takeOverFrom adds a takeover of name's clients on v, which this node
// holds: name lingered on v and is gone or done (chain.go), its
// connections with it.
func (a *Agent) takeOverFrom(v *vipState, name string) {
	v.takeovers = slices.DeleteFunc(v.takeovers, func(t *takeover) bool { return t.from == name })
	v.takeovers = append(v.takeovers, &takeover{from: name, since: a.now(), conns: a.clients.published(name, v.cfg.Addr())})
}

// stepTakeover moves v's takeovers on at a pass (lifecycle.TakeoverStep)
// and does what it answers; resets run under ctx.
func (a *Agent) stepTakeover(ctx context.Context, v *vipState, peers []lifecycle.Peer) {
	canReset := a.canReset(v)
	v.takeovers = slices.DeleteFunc(v.takeovers, func(t *takeover) bool {
		effects := lifecycle.TakeoverStep(a.now(), t.from, t.since, v.held, canReset, peers)
		for _, e := range effects {
			switch e.Kind {
			case lifecycle.ForgetClients:
				a.log.Info("not resetting the previous holder's clients", "vip", v.cfg.Name, "from", t.from, "reason", e.Reason)
			case lifecycle.ResetClients:
				a.resetClients(ctx, v, t, e.Lost)
			}
		}
		return len(effects) > 0
	})
}

// resetClients resets the clients of t's previous holder's connections
// to v, in a goroutine: its list as it is now, with what it had at the
// claim (it may have closed those itself, and published that,
// meanwhile).
func (a *Agent) resetClients(ctx context.Context, v *vipState, t *takeover, lost bool) {
	published := t.conns.Apply(conns.Delta{Added: a.clients.published(t.from, v.cfg.Addr())})
	cc := a.st.cfg.Connections
	cfg := conns.PokeConfig{Rate: cc.PokeRate, Timeout: cc.PokeTimeoutDuration()}
	name, addr, from := v.cfg.Name, v.cfg.Addr(), t.from
	a.goroutines.Go(func() { a.clients.poke(ctx, name, addr, from, published, cfg, lost) })
}

// poke resets the clients of from's connections to vip that this node
// does not have itself, and when from was lost (it did not hand the VIP
// over on purpose) those opened after its list (pokeUnlisted). It runs in
// a goroutine of its own.
func (c *clients) poke(ctx context.Context, name string, vip netip.Addr, from string, published conns.Set, cfg conns.PokeConfig, lost bool) {
	if c.backend == nil || published.Len() == 0 {
		return
	}
	own, err := c.backend.List(conns.Filter{Addrs: []netip.Addr{vip}})
	if err != nil {
		c.log.Warn("list this node's client connections before resetting the previous holder's", "vip", name, "err", err)
		return
	}
	cs := conns.Pokable(published, own, []conns.Takeover{{VIP: vip, Held: true}})
	if len(cs) == 0 {
		return
	}
	until := c.now().Add(reconnectWindow)
	c.mu.Lock()
	if c.poked[vip] == nil {
		c.poked[vip] = map[netip.Addr]time.Time{}
	}
	for _, cn := range cs {
		c.poked[vip][cn.Remote.Addr()] = until
	}
	c.mu.Unlock()
	res, err := c.backend.Poke(ctx, cs, cfg)
	c.metrics.clientResets.WithLabelValues(name, "sent").Add(float64(res.Sent))
	c.metrics.clientResets.WithLabelValues(name, "failed").Add(float64(res.Failed))
	c.metrics.clientResets.WithLabelValues(name, "unsent").Add(float64(res.Unsent))
	msg := fmt.Sprintf("reset %d of the %d client connections %s had (%d failed, %d not sent in time)", res.Sent, len(cs), from, res.Failed, res.Unsent)
	if err != nil {
		c.log.Warn("reset the previous holder's clients", "vip", name, "from", from, "sent", res.Sent, "failed", res.Failed, "unsent", res.Unsent, "err", err)
	} else {
		c.log.Info("reset the previous holder's clients", "vip", name, "from", from, "sent", res.Sent, "failed", res.Failed, "unsent", res.Unsent)
	}
	c.events.publish(&apipb.Event{Kind: "clients", Vip: name, Node: c.self, From: from, Message: msg})
	if lost {
		c.pokeUnlisted(ctx, name, vip, from, published, cfg)
	}
}

// pokeUnlisted resets, as the previous holder's clients come back to this
// node, the connections they opened after from's last list
// (conns.Unlisted): a kubectl's connection lives for one request, so a
// list a second old never has it, and one whose request from had taken
// but not answered waits for the client's own timeout (docs/design.md, "No
// request hangs after an unplanned failover"). It looks 0.1, 0.5, 1 and 3 s
// after the first poke; a port is poked once.
func (c *clients) pokeUnlisted(ctx context.Context, name string, vip netip.Addr, from string, published conns.Set, cfg conns.PokeConfig) {
	start := c.now()
	var done conns.Set
	// When to look: a client reset by the first poke reconnects within
	// milliseconds (a watch) or a second (client-go's reads).
	for _, after := range [...]time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second, 3 * time.Second} {
		t := time.NewTimer(start.Add(after).Sub(c.now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		own, err := c.backend.List(conns.Filter{Addrs: []netip.Addr{vip}})
		if err != nil {
			c.log.Warn("list this node's client connections before resetting the previous holder's unlisted ones", "vip", name, "err", err)
			return
		}
		var todo []conns.Conn
		for _, cn := range conns.Unlisted(published, own, conns.UnlistedSpan) {
			if !done.Contains(cn) {
				todo = append(todo, cn)
			}
		}
		cs := conns.Pokable(conns.NewSet(todo...), own, []conns.Takeover{{VIP: vip, Held: true}})
		if len(cs) == 0 {
			continue
		}
		done = done.Apply(conns.Delta{Added: conns.NewSet(cs...)})
		res, err := c.backend.Poke(ctx, cs, cfg)
		c.metrics.clientResets.WithLabelValues(name, "sent").Add(float64(res.Sent))
		c.metrics.clientResets.WithLabelValues(name, "failed").Add(float64(res.Failed))
		c.metrics.clientResets.WithLabelValues(name, "unsent").Add(float64(res.Unsent))
		if err != nil {
			c.log.Warn("reset the previous holder's clients' unlisted connections", "vip", name, "from", from, "ports", len(cs), "sent", res.Sent, "failed", res.Failed, "unsent", res.Unsent, "err", err)
			continue
		}
		c.log.Info("reset the previous holder's clients' unlisted connections", "vip", name, "from", from, "ports", len(cs), "sent", res.Sent)
	}
}

// closeClients closes this node's connections on v (a planned handoff,
// the successor holding it), before the address goes.
func (a *Agent) closeClients(v *vipState) {
	cc := a.st.cfg.Connections
	if a.clients == nil || a.clients.backend == nil || !cc.Enabled() {
		return
	}
	n, err := a.clients.backend.Destroy(conns.Filter{Addrs: []netip.Addr{v.cfg.Addr()}, Ports: cc.PortList()})
	a.metrics.clientsClosed.WithLabelValues(v.cfg.Name).Add(float64(n))
	if err != nil {
		a.log.Warn("close the VIP's client connections", "vip", v.cfg.Name, "closed", n, "err", err)
	}
	if n > 0 {
		a.log.Info("closed the VIP's client connections: they reconnect to the new holder", "vip", v.cfg.Name, "to", v.owner, "closed", n)
		a.events.publish(&apipb.Event{Kind: "clients", Vip: v.cfg.Name, Node: a.self, To: v.owner,
			Message: fmt.Sprintf("closed %d client connections for the new holder", n)})
	}
}

// closeOwnConnections closes this host's own connections to v's address
// that side selects, dead once the address moved: conns.Outbound after a
// claim (those to the VIP while another node served it: their segments now
// stay on this host, and the server's answers, from an address this host
// has, are dropped as martians), conns.Loopback once the address has gone
// (those to itself through it: this host can no longer send from it).
// Their clients (the kubelet, the controllers on this host) would
// otherwise wait out their own timeouts, 30 s or more, on a connection
// that can carry nothing; closed, they reconnect at once.
func (a *Agent) closeOwnConnections(v *vipState, side conns.Side) {
	cc := a.st.cfg.Connections
	if a.clients == nil || a.clients.backend == nil || !cc.Enabled() {
		return
	}
	n, err := a.clients.backend.Destroy(conns.Filter{Addrs: []netip.Addr{v.cfg.Addr()}, Ports: cc.PortList(), Side: side})
	what := "to the VIP another node served"
	if side == conns.Loopback {
		what = "to itself through the VIP"
	}
	if err != nil {
		a.log.Warn("close this host's own connections "+what, "vip", v.cfg.Name, "closed", n, "err", err)
	}
	if n > 0 {
		a.log.Info("closed this host's own connections "+what+": they reconnect", "vip", v.cfg.Name, "closed", n)
		a.events.publish(&apipb.Event{Kind: "clients", Vip: v.cfg.Name, Node: a.self,
			Message: fmt.Sprintf("closed %d of this host's own connections %s", n, what)})
	}
}

// setPublishSpec tells the publisher what to list after a pass: the held
// VIPs and those it lingers on (none when reset is off: the peers then drop this node's list).
func (a *Agent) setPublishSpec() {
	if a.clients == nil {
		return
	}
	cc := a.st.cfg.Connections
	spec := &publishSpec{filter: conns.Filter{Ports: cc.PortList()}, names: map[netip.Addr]string{}}
	for _, name := range a.vipNames() {
		v := a.st.vips[name]
		if (v.held || v.linger != nil) && cc.Enabled() {
			spec.filter.Addrs = append(spec.filter.Addrs, v.cfg.Addr())
		}
		spec.names[v.cfg.Addr()] = name
	}
	a.clients.spec.Store(spec)
}
