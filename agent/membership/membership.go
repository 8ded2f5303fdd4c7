// Package membership is vipd's cluster membership: memberlist, behind a
// narrow API. It keeps a table of every node seen (Members: dead and left
// ones too, which memberlist forgets) and signals its changes (Changed);
// publishes this node's metadata (SetMeta, pushed to every member at once,
// and AdvertiseFinal before leaving) and reads the others' with the
// caller's Codec; carries the messages that are not memberlist's (the
// lease's heartbeats, SendHeartbeat and OnHeartbeat; the lists of client
// connections, SendList and OnList) on its own transport, which drops
// whatever comes from outside the admitted networks before anything reads
// it and seals it under the cluster keys (LoadKeyring, RotateKeyring).
package membership

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/netip"
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

// Member is the membership table entry of one node; M is what its
// metadata says (Codec.Decode).
type Member[M any] struct {
	Name    string
	Address string // host:port
	State   State
	Meta    M
	// Since is when the member's state or metadata last changed.
	Since time.Time
	// MetaSince is when its metadata last changed (or was first seen).
	MetaSince time.Time
	raw       string // the metadata as received
}

// Codec reads the metadata the members publish.
type Codec[M any] struct {
	// Decode reads a member's metadata; a member whose metadata it
	// refuses is not admitted.
	Decode func(b []byte) (M, error)
	// Leaving reports whether a member said it was leaving: when it goes,
	// it left rather than died.
	Leaving func(m M) bool
}

// Membership wraps memberlist: it publishes this node's metadata, keeps a
// table of every node seen (including dead and left ones, which memberlist
// forgets), and signals changes on a channel.
type Membership[M any] struct {
	list  *memberlist.Memberlist
	self  string
	log   *slog.Logger
	now   func() time.Time
	codec Codec[M]

	metaMu sync.Mutex
	meta   []byte

	mu      sync.Mutex
	nodes   map[string]Member[M]
	changed chan struct{} // capacity 1: a pending "something changed"

	publish chan struct{} // capacity 1: metadata needs re-advertising
	pubMu   sync.Mutex    // held while advertising
	final   bool          // AdvertiseFinal ran: advertise nothing more

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

// DeadNodeReclaimTime is how long after its old entry died a node that
// restarts with the same name and a new address may take its name back.
const DeadNodeReclaimTime = 10 * time.Second

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
	mc.DeadNodeReclaimTime = DeadNodeReclaimTime
	// Our messages are a few hundred bytes at most; LZW costs a 64 KiB
	// table per packet (most of the idle CPU and garbage) and saves
	// nothing. Peers still read compressed messages from older versions.
	mc.EnableCompression = false
	return mc
}

// delegate is what memberlist calls (its Delegate, EventDelegate,
// AliveDelegate and MergeDelegate), kept off Membership's API.
type delegate[M any] struct{ *Membership[M] }

// Options are what New takes besides the configuration.
type Options[M any] struct {
	// Codec reads the members' metadata. Required.
	Codec Codec[M]
	// Logger receives membership's logs and memberlist's. Required.
	Logger *slog.Logger
	// Meta is this node's first metadata.
	Meta []byte
	// Keyring seals membership traffic (cluster.key_file). [none: in the
	// clear]
	Keyring *memberlist.Keyring
	// Now is the clock of Member.Since. Required.
	Now func() time.Time
	// Rejected counts a member or packet refused admission, by reason
	// ("name", "address", "network", "metadata", "packet"). Required.
	Rejected func(reason string)
	// Tune, when set, changes memberlist's configuration last (tests that
	// turn gossip and probes off).
	Tune func(*memberlist.Config)
}

// New starts memberlist for c.
func New[M any](c *config.Config, o Options[M]) (*Membership[M], error) {
	lg, meta, keyring, rejected, tune := o.Logger, o.Meta, o.Keyring, o.Rejected, o.Tune
	m := &Membership[M]{
		rejected:   rejected,
		advertised: netip.AddrPortFrom(c.Cluster.BindAddr().Unmap(), uint16(c.Cluster.BindPort)),
		self:       c.NodeName,
		log:        lg,
		now:        o.Now,
		codec:      o.Codec,
		meta:       meta,
		nodes:      map[string]Member[M]{},
		changed:    make(chan struct{}, 1),
		publish:    make(chan struct{}, 1),
	}
	nets := AdmissionNetworks(c)
	m.allowed.Store(&nets)
	mc := memberlistConfig(c)
	if tune != nil {
		tune(mc)
	}
	d := delegate[M]{m}
	mc.Delegate = d
	mc.Events = d
	mc.Alive = d
	mc.Merge = d
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

// ProbeBind tries the membership port (TCP and UDP) on addr and releases
// it: its errors carry the syscall error (EADDRNOTAVAIL, EADDRINUSE) that
// memberlist's own only names in text.
func ProbeBind(addr netip.Addr, port int) error {
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

// AdmissionNetworks are the networks whose hosts may take part in
// membership: cluster.allowed_networks when set; otherwise any address when a
// key_file authenticates members, and without one only this node's bind
// address and the configured peers' addresses (host names resolved now).
func AdmissionNetworks(c *config.Config) []netip.Prefix {
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

// SetAllowed replaces the admitted networks (reload).
func (m *Membership[M]) SetAllowed(nets []netip.Prefix) { m.allowed.Store(&nets) }

// admit decides whether a node may take part in membership: a valid name
// (so no name carries control characters into logs and status), an address
// in the admitted networks, and metadata that decodes. Members refused here
// never reach the membership table, the quorum base or the peer cache.
func (m *Membership[M]) admit(n *memberlist.Node) error {
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
	if _, err := m.codec.Decode(n.Meta); err != nil {
		m.rejected("metadata")
		return fmt.Errorf("node %s: metadata not understood: %w", n.Name, err)
	}
	return nil
}

// NotifyAlive implements memberlist.AliveDelegate: an alive message about a
// node that admit refuses is ignored.
func (m delegate[M]) NotifyAlive(n *memberlist.Node) error { return m.admit(n) }

// NotifyMerge implements memberlist.MergeDelegate: a push/pull exchange
// (join) that would bring in a node admit refuses is cancelled. A peer's
// state that has this node at another address sets misplaced.
func (m delegate[M]) NotifyMerge(peers []*memberlist.Node) error {
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

// SetMeta changes the metadata this node advertises; the publisher
// goroutine re-advertises it.
func (m *Membership[M]) SetMeta(b []byte) {
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

// RunPublisher re-advertises metadata when it changes, off the reconcile
// loop, and pushes the update to every member at once. It does not wait
// for the update to be gossiped (memberlist's UpdateNode can wait until
// every retransmission went out): a newer update replaces an older one
// still queued, and waiting would hold the newer one back, so a node's
// last word before leaving could reach a peer after its leave message.
func (m *Membership[M]) RunPublisher(ctx context.Context) {
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
func (m *Membership[M]) push(wg *sync.WaitGroup) {
	for _, n := range m.Members() {
		if n.Name == m.self || n.State != Alive {
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

// AdvertiseFinal makes b this node's last metadata before it leaves and
// pushes it to every alive member, waiting up to wait for their acks.
// Nothing is advertised after it: a newer queued update would replace b,
// and the leave message replaces any update still queued, so peers would
// see the node die rather than leave.
func (m *Membership[M]) AdvertiseFinal(b []byte, wait time.Duration) {
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

// Join joins the given addresses and returns how many answered.
func (m *Membership[M]) Join(addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	n, err := m.list.Join(addrs)
	if err != nil && n == 0 {
		return 0, fmt.Errorf("join %s: %w", strings.Join(addrs, ","), err)
	}
	return n, nil
}

// Members returns the membership table, sorted by name.
func (m *Membership[M]) Members() []Member[M] {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member[M], 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Changed is signalled (with capacity 1: one pending signal stands for
// any number of changes) when a member's state or metadata changes.
func (m *Membership[M]) Changed() <-chan struct{} { return m.changed }

// Advertised is this node's membership address.
func (m *Membership[M]) Advertised() netip.AddrPort { return m.advertised }

// TakeMisplaced reports, once, whether a state exchange showed a peer
// knowing this node at another address since the last call (it came back
// under a new one, and the peer still has its old process's entry): the
// caller joins again until the peers take it.
func (m *Membership[M]) TakeMisplaced() bool { return m.misplaced.Swap(false) }

// Forget removes a node from the table; it reappears if it joins again.
func (m *Membership[M]) Forget(name string) {
	m.mu.Lock()
	delete(m.nodes, name)
	m.mu.Unlock()
}

// Leave tells the members this node leaves, waiting up to timeout for the
// message to go out.
func (m *Membership[M]) Leave(timeout time.Duration) error {
	if err := m.list.Leave(timeout); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}

// Shutdown stops memberlist and the transport, without a leave message.
func (m *Membership[M]) Shutdown() error {
	return m.list.Shutdown()
}

func (m *Membership[M]) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// The memberlist.Delegate methods. Only NodeMeta carries vipd data.

// NodeMeta implements memberlist.Delegate.
func (m delegate[M]) NodeMeta(limit int) []byte {
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
func (m delegate[M]) NotifyMsg([]byte) {}

// OnList sets the handler of the client connections lists, with the
// address each came from.
func (m *Membership[M]) OnList(f func(b []byte, from netip.AddrPort)) { m.transport.list.Store(&f) }

// SendList sends msg (a client connections list) to a member on a
// stream of the transport (TCP, sealed under the cluster key when
// key_file is set).
func (m *Membership[M]) SendList(to Member[M], msg []byte) error {
	ap, err := netip.ParseAddrPort(to.Address)
	if err != nil {
		return fmt.Errorf("member %s: address %q: %w", to.Name, to.Address, err)
	}
	if err := m.transport.sendList(msg, ap); err != nil {
		return fmt.Errorf("send to %s: %w", to.Name, err)
	}
	return nil
}

// OnHeartbeat sets the handler of the lease's heartbeats.
func (m *Membership[M]) OnHeartbeat(f func(payload []byte, from netip.AddrPort)) {
	m.transport.heartbeat.Store(&f)
}

// SendHeartbeat sends a lease heartbeat to a member's membership address.
func (m *Membership[M]) SendHeartbeat(payload []byte, to netip.AddrPort) {
	if err := m.transport.sendHeartbeat(payload, to); err != nil {
		m.log.Debug("heartbeat", "peer", to, "err", err)
	}
}

// GetBroadcasts implements memberlist.Delegate.
func (m delegate[M]) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate.
func (m delegate[M]) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (m delegate[M]) MergeRemoteState(buf []byte, join bool) {}

// The memberlist.EventDelegate methods. They run with memberlist's locks
// held: record and signal, nothing else.

// NotifyJoin implements memberlist.EventDelegate.
func (m delegate[M]) NotifyJoin(n *memberlist.Node) { m.record(n, Alive) }

// NotifyUpdate implements memberlist.EventDelegate.
func (m delegate[M]) NotifyUpdate(n *memberlist.Node) { m.record(n, Alive) }

// NotifyLeave implements memberlist.EventDelegate. memberlist does not say
// whether the node left or died; a node leaving gracefully says so in its
// metadata first.
func (m delegate[M]) NotifyLeave(n *memberlist.Node) {
	m.mu.Lock()
	prev := m.nodes[n.Name]
	m.mu.Unlock()
	st := Dead
	if m.codec.Leaving(prev.Meta) {
		st = Left
	}
	m.record(n, st)
}

func (m *Membership[M]) record(n *memberlist.Node, st State) {
	meta, err := m.codec.Decode(n.Meta)
	if err != nil {
		m.log.Warn("ignoring undecodable metadata from peer", "peer", n.Name, "err", err)
	}
	info := Member[M]{
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
