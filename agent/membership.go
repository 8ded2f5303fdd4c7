package agent

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/vipd/vipd/agent/config"
)

// memberInfo is the membership table entry of one node.
type memberInfo struct {
	Name    string
	Address string // host:port
	State   MemberState
	Meta    NodeMeta
	// Since is when the member's state or metadata last changed.
	Since time.Time
	// MetaSince is when its metadata last changed (or was first seen).
	MetaSince time.Time
	raw       string // the metadata as received
}

// membership wraps memberlist: it publishes this node's metadata, keeps a
// table of every node seen (including dead and left ones, which memberlist
// forgets), and signals changes on a channel.
type membership struct {
	list *memberlist.Memberlist
	self string
	log  *slog.Logger
	now  func() time.Time

	metaMu sync.Mutex
	meta   []byte

	mu      sync.Mutex
	nodes   map[string]memberInfo
	changed chan struct{} // capacity 1: a pending "something changed"

	publish chan struct{} // capacity 1: metadata needs re-advertising
	pubMu   sync.Mutex    // held while advertising
	final   bool          // advertiseFinal ran: advertise nothing more

	// allowed are the networks whose members are admitted (nil: any);
	// replaced on reload.
	allowed atomic.Pointer[[]netip.Prefix]
	// rejected counts members refused admission, by reason.
	rejected  func(reason string)
	transport *transport
	// advertised is this node's membership address; misplaced is set when
	// a state exchange shows a peer knowing this node at another one (it
	// came back under a new address, and the peer still has its old
	// process's entry): the rejoin loop then exchanges state again.
	advertised netip.AddrPort
	misplaced  atomic.Bool
}

// memberlistConfig builds memberlist's configuration from ours.
func memberlistConfig(c *config.Config) *memberlist.Config {
	// Failure detection that matters for the VIP is the lease's
	// (agent/lease: a holder's rounds every 100 ms, a holder fenced within
	// 300 ms, a member taken for gone within 400 ms on positive evidence).
	// memberlist keeps its LAN defaults (a probe a second, a suspicion of
	// several seconds with Lifeguard), robust on loaded hosts and lossy
	// links: it declares members dead for membership's bookkeeping (status,
	// rejoin), not for failover. A metadata change is pushed to every
	// member at once (push), so gossip only repeats it: every 500 ms (each
	// wake-up costs an idle node CPU), with enough retransmissions left
	// after the pushes to reach members that missed theirs.
	mc := memberlist.DefaultLANConfig()
	mc.GossipInterval = 500 * time.Millisecond
	mc.RetransmitMult = 8
	if c.Cluster.FailureDetection == config.FailureDetectionFast {
		mc.PushPullInterval = 10 * time.Second
		mc.TCPTimeout = 2 * time.Second
	}
	mc.Name = c.NodeName
	mc.BindAddr = c.Cluster.BindAddr().String()
	mc.BindPort = c.Cluster.BindPort
	mc.AdvertiseAddr = c.Cluster.BindAddr().String()
	mc.AdvertisePort = c.Cluster.BindPort
	// A node that restarts with the same name and a new address may take
	// its old name back after this long.
	mc.DeadNodeReclaimTime = 10 * time.Second
	// Our messages are a few hundred bytes at most; LZW costs a 64 KiB
	// table per packet (most of the idle CPU and garbage) and saves
	// nothing. Peers still read compressed messages from older versions.
	mc.EnableCompression = false
	return mc
}

// newMembership starts memberlist for c. tune, when set, changes
// memberlist's configuration last (tests that turn gossip and probes off).
func newMembership(c *config.Config, lg *slog.Logger, meta []byte, keyring *memberlist.Keyring, now func() time.Time, rejected func(string), tune func(*memberlist.Config)) (*membership, error) {
	m := &membership{
		rejected:   rejected,
		advertised: netip.AddrPortFrom(c.Cluster.BindAddr().Unmap(), uint16(c.Cluster.BindPort)),
		self:       c.NodeName,
		log:        lg,
		now:        now,
		meta:       meta,
		nodes:      map[string]memberInfo{},
		changed:    make(chan struct{}, 1),
		publish:    make(chan struct{}, 1),
	}
	nets := admissionNetworks(c)
	m.allowed.Store(&nets)
	mc := memberlistConfig(c)
	if tune != nil {
		tune(mc)
	}
	mc.Delegate = m
	mc.Events = m
	mc.Alive = m
	mc.Merge = m
	mc.Logger = log.New(newSlogWriter(lg.With("component", "memberlist"), time.Now), "", 0)
	if keyring != nil {
		mc.Keyring = keyring
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	// vipd's transport: packets and streams from outside the admitted
	// networks are dropped before memberlist reads them, and the lease's
	// heartbeats are taken off the port (transport.go).
	tr, err := newTransport(netip.AddrPortFrom(c.Cluster.BindAddr(), uint16(c.Cluster.BindPort)), mc.Logger,
		&m.allowed, func() { rejected("packet") }, keyring)
	if err != nil {
		return nil, fmt.Errorf("start memberlist on %s:%d: %w", mc.BindAddr, mc.BindPort, err)
	}
	m.transport = tr
	mc.Transport = tr
	ml, err := memberlist.Create(mc)
	if err != nil {
		tr.Shutdown()
		return nil, fmt.Errorf("start memberlist on %s:%d: %w", mc.BindAddr, mc.BindPort, err)
	}
	m.list = ml
	return m, nil
}

// probeBind tries the membership port (TCP and UDP) on addr and releases
// it: its errors carry the syscall error (EADDRNOTAVAIL, EADDRINUSE) that
// memberlist's own only names in text.
func probeBind(addr netip.Addr, port int) error {
	ap := netip.AddrPortFrom(addr, uint16(port)).String()
	l, err := net.Listen("tcp", ap)
	if err != nil {
		return fmt.Errorf("membership port %s: %w", ap, err)
	}
	l.Close()
	u, err := net.ListenPacket("udp", ap)
	if err != nil {
		return fmt.Errorf("membership port %s: %w", ap, err)
	}
	u.Close()
	return nil
}

// admissionNetworks are the networks whose hosts may take part in
// membership: cluster.allowed_networks when set; otherwise any address when a
// key_file authenticates members, and without one only this node's bind
// address and the configured peers' addresses (host names resolved now).
func admissionNetworks(c *config.Config) []netip.Prefix {
	host := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()) }
	if len(c.Cluster.AllowedPrefixes()) > 0 {
		return append(slices.Clone(c.Cluster.AllowedPrefixes()), host(c.Cluster.BindAddr()))
	}
	if c.Cluster.KeyFile != "" {
		return nil
	}
	out := []netip.Prefix{host(c.Cluster.BindAddr())}
	for _, hp := range c.Cluster.PeerAddrs() {
		h, _, err := net.SplitHostPort(hp)
		if err != nil {
			continue
		}
		if a, err := netip.ParseAddr(h); err == nil {
			out = append(out, host(a))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
		cancel()
		for _, a := range ips {
			out = append(out, host(a))
		}
		_ = err // an unresolvable peer is not admitted; the rejoin loop logs it
	}
	return out
}

// setAllowed replaces the admitted networks (reload).
func (m *membership) setAllowed(nets []netip.Prefix) { m.allowed.Store(&nets) }

// admit decides whether a node may take part in membership: a valid name
// (so no name carries control characters into logs and status), an address
// in the admitted networks, and metadata that decodes. Members refused here
// never reach the membership table, the quorum base or the peer cache.
func (m *membership) admit(n *memberlist.Node) error {
	if n.Name == m.self {
		return nil
	}
	if !config.ValidNodeName(n.Name) {
		m.rejected("name")
		return fmt.Errorf("invalid node name %q", n.Name)
	}
	a, ok := netip.AddrFromSlice(n.Addr)
	if !ok {
		m.rejected("address")
		return fmt.Errorf("node %s: invalid address", n.Name)
	}
	if nets := *m.allowed.Load(); len(nets) > 0 && !slices.ContainsFunc(nets, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) }) {
		m.rejected("network")
		return fmt.Errorf("node %s at %s: not in cluster.allowed_networks (default without key_file: the configured peers)", n.Name, a.Unmap())
	}
	if _, err := DecodeMeta(n.Meta); err != nil {
		m.rejected("metadata")
		return fmt.Errorf("node %s: metadata not understood: %w", n.Name, err)
	}
	return nil
}

// NotifyAlive implements memberlist.AliveDelegate: an alive message about a
// node that admit refuses is ignored.
func (m *membership) NotifyAlive(n *memberlist.Node) error { return m.admit(n) }

// NotifyMerge implements memberlist.MergeDelegate: a push/pull exchange
// (join) that would bring in a node admit refuses is cancelled. A peer's
// state that has this node at another address sets misplaced.
func (m *membership) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if n.Name != m.self {
			continue
		}
		if a, ok := netip.AddrFromSlice(n.Addr); ok && netip.AddrPortFrom(a.Unmap(), n.Port) != m.advertised {
			m.misplaced.Store(true)
		}
	}
	for _, n := range peers {
		if err := m.admit(n); err != nil {
			return fmt.Errorf("merge refused: %w", err)
		}
	}
	return nil
}

// setMeta changes the metadata this node advertises; the publisher
// goroutine re-advertises it.
func (m *membership) setMeta(b []byte) {
	m.metaMu.Lock()
	same := bytes.Equal(m.meta, b)
	m.meta = b
	m.metaMu.Unlock()
	if !same {
		select {
		case m.publish <- struct{}{}:
		default:
		}
	}
}

// runPublisher re-advertises metadata when it changes, off the reconcile
// loop, and pushes the update to every member at once. It does not wait
// for the update to be gossiped (memberlist's UpdateNode can wait until
// every retransmission went out): a newer update replaces an older one
// still queued, and waiting would hold the newer one back, so a node's
// last word before leaving could reach a peer after its leave message.
func (m *membership) runPublisher(ctx context.Context) {
	var pushes sync.WaitGroup
	defer pushes.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.publish:
			m.pubMu.Lock()
			if !m.final {
				// Queued now; the wait only bounds the call.
				_ = m.list.UpdateNode(time.Millisecond)
				m.push(&pushes)
			}
			m.pubMu.Unlock()
		}
	}
}

// push sends this node's queued metadata update to every other alive member
// now, rather than at the next gossip round: a memberlist ping carries the
// queued broadcasts with it, so "I hold the VIP now" (the old owner may
// release) or "I am unhealthy" (the next one may claim) arrives in one round
// trip. Gossip still repeats the update for a member that missed the ping.
// Each ping waits for its ack (at most memberlist's probe timeout) in a
// goroutine counted by wg.
//
// The members come from this node's own table: memberlist's Members()
// hands out pointers to nodes it keeps changing (a data race).
func (m *membership) push(wg *sync.WaitGroup) {
	for _, n := range m.snapshot() {
		if n.Name == m.self || n.State != StateAlive {
			continue
		}
		ap, err := netip.ParseAddrPort(n.Address)
		if err != nil {
			continue
		}
		name, addr := n.Name, net.UDPAddrFromAddrPort(ap)
		wg.Go(func() { _, _ = m.list.Ping(name, addr) })
	}
}

// advertiseFinal makes b this node's last metadata before it leaves and
// pushes it to every alive member, waiting up to wait for their acks.
// Nothing is advertised after it: a newer queued update would replace b,
// and the leave message replaces any update still queued, so peers would
// see the node die rather than leave.
func (m *membership) advertiseFinal(b []byte, wait time.Duration) {
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	m.final = true
	m.metaMu.Lock()
	m.meta = b
	m.metaMu.Unlock()
	_ = m.list.UpdateNode(time.Millisecond)
	var pushes sync.WaitGroup
	m.push(&pushes)
	done := make(chan struct{})
	go func() { pushes.Wait(); close(done) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// The pings end by themselves within memberlist's probe timeout.
		m.log.Debug("final metadata may not have reached every member before leaving")
	}
}

// join joins the given addresses and returns how many answered.
func (m *membership) join(addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	n, err := m.list.Join(addrs)
	if err != nil && n == 0 {
		return 0, fmt.Errorf("join %s: %w", strings.Join(addrs, ","), err)
	}
	return n, nil
}

// snapshot returns the membership table, sorted by name.
func (m *membership) snapshot() []memberInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]memberInfo, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// forget removes a node from the table; it reappears if it joins again.
func (m *membership) forget(name string) {
	m.mu.Lock()
	delete(m.nodes, name)
	m.mu.Unlock()
}

func (m *membership) leave(timeout time.Duration) error {
	if err := m.list.Leave(timeout); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}

func (m *membership) shutdown() error {
	return m.list.Shutdown()
}

func (m *membership) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// The memberlist.Delegate methods. Only NodeMeta carries vipd data.

// NodeMeta implements memberlist.Delegate.
func (m *membership) NodeMeta(limit int) []byte {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	if len(m.meta) > limit {
		return nil
	}
	return append([]byte(nil), m.meta...)
}

// NotifyMsg implements memberlist.Delegate. vipd sends no memberlist user
// messages: the lists of client connections go on streams of the
// transport, which knows where they came from (transport.go). An older
// release's lists, which came this way without a sender, are dropped.
func (m *membership) NotifyMsg([]byte) {}

// setOnList sets the handler of the client connections lists, with the
// address each came from.
func (m *membership) setOnList(f func(b []byte, from netip.AddrPort)) { m.transport.list.Store(&f) }

// sendReliable sends msg (a client connections list) to a member on a
// stream of the transport (TCP, sealed under the cluster key when
// key_file is set).
func (m *membership) sendReliable(to memberInfo, msg []byte) error {
	ap, err := netip.ParseAddrPort(to.Address)
	if err != nil {
		return fmt.Errorf("member %s: address %q: %w", to.Name, to.Address, err)
	}
	if err := m.transport.sendList(msg, ap); err != nil {
		return fmt.Errorf("send to %s: %w", to.Name, err)
	}
	return nil
}

// setOnHeartbeat sets the handler of the lease's heartbeats.
func (m *membership) setOnHeartbeat(f func(payload []byte, from netip.AddrPort)) {
	m.transport.heartbeat.Store(&f)
}

// sendHeartbeat sends a lease heartbeat to a member's membership address.
func (m *membership) sendHeartbeat(payload []byte, to netip.AddrPort) {
	if err := m.transport.sendHeartbeat(payload, to); err != nil {
		m.log.Debug("heartbeat", "peer", to, "err", err)
	}
}

// GetBroadcasts implements memberlist.Delegate.
func (m *membership) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate.
func (m *membership) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (m *membership) MergeRemoteState(buf []byte, join bool) {}

// The memberlist.EventDelegate methods. They run with memberlist's locks
// held: record and signal, nothing else.

// NotifyJoin implements memberlist.EventDelegate.
func (m *membership) NotifyJoin(n *memberlist.Node) { m.record(n, StateAlive) }

// NotifyUpdate implements memberlist.EventDelegate.
func (m *membership) NotifyUpdate(n *memberlist.Node) { m.record(n, StateAlive) }

// NotifyLeave implements memberlist.EventDelegate. memberlist does not say
// whether the node left or died; a node leaving gracefully says so in its
// metadata first.
func (m *membership) NotifyLeave(n *memberlist.Node) {
	m.mu.Lock()
	prev := m.nodes[n.Name]
	m.mu.Unlock()
	st := StateDead
	if prev.Meta.Leaving {
		st = StateLeft
	}
	m.record(n, st)
}

func (m *membership) record(n *memberlist.Node, st MemberState) {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		m.log.Warn("ignoring undecodable metadata from peer", "peer", n.Name, "err", err)
	}
	info := memberInfo{
		Name:    n.Name,
		Address: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		State:   st,
		Meta:    meta,
		raw:     string(n.Meta),
	}
	m.mu.Lock()
	prev, seen := m.nodes[n.Name]
	info.Since, info.MetaSince = prev.Since, prev.MetaSince
	if !seen || prev.State != st || prev.raw != info.raw {
		info.Since = m.now()
	}
	if !seen || prev.raw != info.raw {
		info.MetaSince = info.Since
	}
	m.nodes[n.Name] = info
	m.mu.Unlock()
	if !seen || prev.State != st {
		m.log.Info("member state", "member", n.Name, "peer", info.Address, "state", st.String())
	}
	m.signal()
}

// sendFailureEvery is how often one kind of memberlist warning or error is
// logged: while a link is down memberlist fails to send gossip and probes
// several times a second, and a host sending garbage to the membership port
// makes one error per packet.
const sendFailureEvery = 10 * time.Second

// slogWriter adapts memberlist's log lines ("[WARN] memberlist: ...") to
// slog levels. Warnings and errors are logged each kind (logKind) at most
// once per sendFailureEvery, with the number of lines left out since; send
// failures ("Failed to send gossip to ...: ... network is unreachable") at
// WARN.
type slogWriter struct {
	lg  *slog.Logger
	now func() time.Time

	mu         sync.Mutex
	lastLogged map[string]time.Time // kind -> when last logged
	suppressed map[string]int
	// The budget: at most logBudget lines per window of sendFailureEvery
	// whatever their kinds (text a sender chooses, a label or a node name,
	// makes new kinds); the rest are counted in overBudget.
	windowStart time.Time
	inWindow    int
	overBudget  int
}

// logBudget bounds memberlist warnings and errors per sendFailureEvery,
// all kinds together.
const logBudget = 20

// maxLogKinds bounds the kinds remembered; older ones are forgotten first.
const maxLogKinds = 256

func newSlogWriter(lg *slog.Logger, now func() time.Time) *slogWriter {
	return &slogWriter{lg: lg, now: now, lastLogged: map[string]time.Time{}, suppressed: map[string]int{}}
}

func (w *slogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	level := slog.LevelDebug
	for prefix, l := range map[string]slog.Level{"[ERR]": slog.LevelError, "[WARN]": slog.LevelWarn, "[INFO]": slog.LevelDebug} {
		if strings.HasPrefix(s, prefix) {
			level = l
			s = strings.TrimSpace(strings.TrimPrefix(s, prefix))
		}
	}
	s = strings.TrimPrefix(s, "memberlist: ")
	if level < slog.LevelWarn {
		w.lg.Log(context.Background(), level, s)
		return len(p), nil
	}
	kind, sendFailure := sendFailureKind(s)
	if sendFailure {
		level = slog.LevelWarn
	} else {
		kind = logKind(s)
	}
	n, logNow := w.throttle(kind)
	if !logNow {
		return len(p), nil
	}
	if n > 0 {
		w.lg.Log(context.Background(), level, s, "suppressed", n)
	} else {
		w.lg.Log(context.Background(), level, s)
	}
	return len(p), nil
}

// quoted, nodeName and number match what varies in memberlist's messages:
// quoted text (a node name, a label a sender chose), an unquoted node name,
// a number (an address, a port, a message type).
var (
	quoted   = regexp.MustCompile(`'[^']*'|"[^"]*"`)
	nodeName = regexp.MustCompile(`\bnode \S+`)
	number   = regexp.MustCompile(`[0-9]+`)
)

// logKind is what a warning or error is about, without what varies (the
// peer, the address, the detail): "Failed to decode ping request" for
// "Failed to decode ping request: msgpack ... from=203.0.113.9:7946", so a
// flood of garbage packets logs one line per kind every sendFailureEvery.
func logKind(s string) string {
	// Quoted text first: a label can hold ": ".
	s = nodeName.ReplaceAllString(quoted.ReplaceAllString(s, "'*'"), "node *")
	if i := strings.Index(s, ": "); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, " from="); i >= 0 {
		s = s[:i]
	}
	return number.ReplaceAllString(s, "N")
}

// sendFailureKind returns "Failed to send gossip" for "Failed to send
// gossip to 192.0.2.12:7946: ...".
func sendFailureKind(s string) (string, bool) {
	const prefix = "Failed to send "
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return "", false
	}
	if i := strings.IndexByte(rest, ':'); i >= 0 {
		rest = rest[:i]
	}
	rest, _, _ = strings.Cut(rest, " to ")
	return prefix + rest, true
}

// throttle reports whether a line of kind is logged now and how many of
// its kind were left out since the last one logged.
func (w *slogWriter) throttle(kind string) (int, bool) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.windowStart) >= sendFailureEvery || now.Before(w.windowStart) {
		if w.overBudget > 0 {
			w.lg.Warn("memberlist warnings and errors left out (over the log budget)", "suppressed", w.overBudget, "budget", logBudget, "per", sendFailureEvery)
		}
		w.windowStart, w.inWindow, w.overBudget = now, 0, 0
	}
	if last, ok := w.lastLogged[kind]; ok && now.Sub(last) < sendFailureEvery && now.Sub(last) >= 0 {
		w.suppressed[kind]++
		return 0, false
	}
	if w.inWindow >= logBudget {
		w.overBudget++
		return 0, false
	}
	w.inWindow++
	if len(w.lastLogged) >= maxLogKinds {
		w.prune(now)
	}
	n := w.suppressed[kind]
	w.lastLogged[kind], w.suppressed[kind] = now, 0
	return n, true
}

// prune forgets kinds not logged for a window (then the oldest half), so
// text chosen by senders cannot grow the maps without bound.
func (w *slogWriter) prune(now time.Time) {
	for k, t := range w.lastLogged {
		if now.Sub(t) >= sendFailureEvery {
			delete(w.lastLogged, k)
			delete(w.suppressed, k)
		}
	}
	for k := range w.lastLogged {
		if len(w.lastLogged) < maxLogKinds/2 {
			break
		}
		delete(w.lastLogged, k)
		delete(w.suppressed, k)
	}
}
