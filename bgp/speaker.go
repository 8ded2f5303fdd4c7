// Package bgp advertises virtual IP addresses as host routes to BGP routers
// with an embedded GoBGP v4 speaker.
//
// A Speaker originates addr/32 (IPv4) or addr/128 (IPv6, MP-BGP) with next hop
// self. IPv4 routes go to IPv4 peers and IPv6 routes to IPv6 peers. Each
// peer's communities, MED and LOCAL_PREF (iBGP only) are set on export to
// that peer, a VIP's own MED and LOCAL_PREF replacing the peer's; a peer
// may be several hops away (eBGP multihop, from a loopback address) or
// held to a number of hops by TTL security (RFC 5082). Drain adds the
// GRACEFUL_SHUTDOWN community (RFC 8326) so routers move traffic away before
// Withdraw removes the route.
//
// The routing policy is locked down: every route received is rejected on
// import (vipd installs no routes), only the configured VIPs' host routes
// originated here are exported (default reject, in the spirit of RFC 8212),
// and every peer has a prefix limit. A peer may run BFD (package bfd): when
// its BFD session fails, the BGP session is closed at once instead of after
// the hold time.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/vipd/vipd/bfd"
)

// routeState is what the speaker currently originates for one address.
type routeState int

const (
	announced routeState = iota + 1
	draining
)

// Speaker is an embedded BGP speaker. Create it with New, then Start it.
// Its methods are safe for concurrent use.
type Speaker struct {
	log *slog.Logger

	mu      sync.Mutex
	cfg     Config
	server  *server.BgpServer
	started bool
	stopped bool
	routes  map[netip.Addr]routeState
	cancel  context.CancelFunc // ends the watcher, the BFD goroutines and the ctx goroutine
	done    chan struct{}      // closed when the ctx goroutine has returned
	bfdDone chan struct{}      // closed when the BFD goroutines have returned

	bfd bfdServer
	// bfdHeld are the peers whose BGP session is down because their BFD
	// session failed, with when it was closed.
	bfdHeld map[netip.Addr]time.Time

	// rib caches the locally originated paths of the global RIB for
	// Announced; a change through this Speaker clears it.
	rib ribCache
	now func() time.Time

	// bfdMu guards bfdPending: OnChange runs under the BFD server's lock
	// and must not take mu.
	bfdMu      sync.Mutex
	bfdPending []bfd.Change
	bfdWake    chan struct{}
	bfdApplied func() // test hook: called after bfdLoop applied a batch; guarded by mu

	// peerState is the last logged session state per peer; only the GoBGP
	// watcher goroutine (onPeerEvent) touches it.
	peerState map[string]string
}

// bfdServer is what the Speaker uses of *bfd.Server; tests substitute a
// fake.
type bfdServer interface {
	Set(bfd.SessionConfig) error
	Remove(netip.Addr)
	Status(netip.Addr) (bfd.Status, bool)
	Shutdown(context.Context)
	Run(context.Context) error
}

// ribCache is one listing of the locally originated paths.
type ribCache struct {
	at    time.Time
	paths map[netip.Addr]routeState
}

// ribCacheTTL is how long one listing of the RIB answers Announced: long
// enough for one pass over every VIP, short enough that the next pass
// (about a second later) lists again.
const ribCacheTTL = 250 * time.Millisecond

// New validates cfg and returns a Speaker that is not yet running.
func New(cfg Config) (*Speaker, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("bgp config: %w", errors.Join(errs...))
	}
	cfg.Peers = slices.Clone(cfg.Peers)
	cfg.VIPs = unmapAll(cfg.VIPs)
	cfg.VIPAttrs = cloneVIPAttrs(cfg.VIPAttrs)
	s := &Speaker{
		log:       cfg.logger(),
		cfg:       cfg,
		routes:    make(map[netip.Addr]routeState),
		bfdHeld:   make(map[netip.Addr]time.Time),
		now:       time.Now,
		bfdWake:   make(chan struct{}, 1),
		peerState: make(map[string]string),
	}
	s.bfd = bfd.NewServer(bfd.Config{Logger: s.log, OnChange: s.onBFDChange})
	return s, nil
}

func unmapAll(as []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, len(as))
	for i, a := range as {
		out[i] = a.Unmap()
	}
	return out
}

// Start starts the embedded GoBGP server and adds the configured peers. The
// speaker runs until Stop or Detach is called or ctx ends. Start (or
// Resume) may be called once.
//
// With graceful restart on, the sessions' Graceful Restart capability
// says that this speaker kept no forwarding state: a router still holding
// stale routes of a previous speaker on this host (one that crashed, or
// Detached and whose successor is not resuming) drops them as soon as the
// session is up.
func (s *Speaker) Start(ctx context.Context) error {
	return s.start(ctx, nil, false)
}

// Resume starts the speaker like Start, after a planned restart: the
// previous speaker on this host Detached, and held are the VIPs it
// announced that this one keeps. Their routes are originated before any
// session is up. With graceful restart on, each session's capability sets
// the Restart State and Forwarding State bits, so the router keeps the
// previous speaker's stale routes until this speaker's End-of-RIB; GoBGP
// sends the held routes and the End-of-RIB together once it has the
// router's End-of-RIB (or after RestartTime), and the routes never leave
// the router's table. Every address in held must be one of Config.VIPs.
func (s *Speaker) Resume(ctx context.Context, held []netip.Addr) error {
	return s.start(ctx, held, true)
}

func (s *Speaker) start(ctx context.Context, held []netip.Addr, restarting bool) error {
	held = unmapAll(held)
	for _, a := range held {
		if !slices.Contains(s.cfg.VIPs, a) {
			return fmt.Errorf("resume %s: not a configured VIP", a)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("bgp speaker already started")
	}
	s.started = true

	// The level is the handler's (gobgpLogger): no LevelVar.
	srv := server.NewBgpServer(server.LoggerOption(gobgpLogger(s.log), nil))
	// Serve returns when the server is stopped.
	go srv.Serve()

	global := &api.Global{
		Asn:             s.cfg.ASN,
		RouterId:        s.cfg.RouterID.String(),
		ListenPort:      s.cfg.listenPort(),
		ListenAddresses: s.cfg.ListenAddresses,
		// Only the families vipd originates: GoBGP v4 gives every
		// family of its global RIB tables of 2048 shards each, about
		// 10 MiB for all of them.
		Families: globalFamilies,
	}
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: global}); err != nil {
		srv.Stop()
		return fmt.Errorf("start bgp as %d: %w", s.cfg.ASN, err)
	}
	s.server = srv

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if err := srv.WatchEvent(runCtx, server.WatchEventMessageCallbacks{OnPeerUpdate: s.onPeerEvent}, server.WatchPeer()); err != nil {
		s.stopLocked()
		return fmt.Errorf("watch peer events: %w", err)
	}
	if err := s.setPolicyLocked(ctx, s.cfg.Peers, s.cfg.VIPs, s.cfg.VIPAttrs); err != nil {
		s.stopLocked()
		return err
	}
	if err := srv.SetPolicyAssignment(ctx, importAssignment()); err != nil {
		s.stopLocked()
		return fmt.Errorf("assign import policy: %w", err)
	}
	if err := srv.SetPolicyAssignment(ctx, exportAssignment()); err != nil {
		s.stopLocked()
		return fmt.Errorf("assign export policy: %w", err)
	}
	bfdDone := make(chan struct{})
	s.bfdDone = bfdDone
	go func() {
		defer close(bfdDone)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.bfdLoop(runCtx)
		}()
		if err := s.bfd.Run(runCtx); err != nil {
			s.log.Error("bfd", "err", err)
		}
		wg.Wait()
	}()
	// Held routes first: a resumed session's first UPDATE must carry them.
	for _, a := range held {
		path, err := buildPath(a, nil)
		if err != nil {
			s.stopLocked()
			return fmt.Errorf("resume %s: %w", a, err)
		}
		if _, err := srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{path}}); err != nil {
			s.stopLocked()
			return fmt.Errorf("resume %s: %w", a, err)
		}
		s.routes[a] = announced
	}
	for _, p := range s.cfg.Peers {
		ps := peerSession{gr: s.cfg.GracefulRestart, restarting: restarting}
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p, ps)}); err != nil {
			s.stopLocked()
			return fmt.Errorf("add peer %s: %w", p.Address, err)
		}
		if bc, ok := p.bfdSession(); ok {
			if err := s.bfd.Set(bc); err != nil {
				s.stopLocked()
				return fmt.Errorf("peer %s: %w", p.Address, err)
			}
		}
	}
	done := make(chan struct{})
	s.done = done
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			s.mu.Lock()
			stopped := s.stopLocked()
			s.mu.Unlock()
			if stopped {
				s.log.Info("bgp speaker stopped", "reason", "context ended")
			}
		case <-runCtx.Done():
		}
	}()
	s.log.Info("bgp speaker started", "asn", s.cfg.ASN, "router_id", s.cfg.RouterID, "peers", len(s.cfg.Peers),
		"graceful_restart_time", s.cfg.GracefulRestart.RestartTime, "resumed", restarting, "held", len(held))
	return nil
}

// Stop closes every BGP session (CEASE, administrative shutdown), then
// takes every BFD session administratively down and stops the server, so
// routers count neither as a failure. It is safe to call more than once and from any
// goroutine.
func (s *Speaker) Stop() error {
	s.mu.Lock()
	done, bfdDone := s.done, s.bfdDone
	stopped := s.stopLocked()
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	if bfdDone != nil {
		<-bfdDone
	}
	if stopped {
		s.log.Info("bgp speaker stopped", "reason", "stop called")
	}
	return nil
}

// Detach ends the speaker for a planned restart of the process, without
// telling the routers that the routes are gone: every BFD session is
// taken AdminDown (a router does not count that as a failure, RFC 5882
// section 3.2), and no BGP session gets a NOTIFICATION. The sessions end
// when the process exits and the kernel closes their sockets; a router
// that negotiated graceful restart keeps this speaker's routes, stale,
// until the next speaker's End-of-RIB (Resume) or RestartTime, and one
// that did not drops them then. The process must exit soon after Detach:
// until it does, the sessions stay up with their routes, and BFD cannot
// tell routers about a failure. Afterwards the speaker accepts no calls;
// Stop does nothing. Detach is safe to call more than once.
func (s *Speaker) Detach() {
	s.mu.Lock()
	if s.stopped || s.server == nil {
		s.stopped = true
		s.mu.Unlock()
		return
	}
	s.stopped = true
	done, bfdDone := s.done, s.bfdDone
	ctx, cancel := context.WithTimeout(context.Background(), bfdShutdownTimeout)
	s.bfd.Shutdown(ctx)
	cancel()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	if bfdDone != nil {
		<-bfdDone
	}
	s.log.Info("bgp speaker detached for a restart: sessions left to close with the process",
		"graceful_restart_time", s.cfg.GracefulRestart.RestartTime)
}

// stopLocked stops the server if it runs and reports whether it did.
func (s *Speaker) stopLocked() bool {
	if s.stopped || s.server == nil {
		s.stopped = true
		return false
	}
	s.stopped = true
	// BGP first, BFD still Up meanwhile: every session gets a CEASE
	// (administrative shutdown) and is seen idle, which GoBGP reports
	// after it wrote the NOTIFICATION. Then AdminDown. The other order
	// makes routers that close BGP on a neighbor's AdminDown (FRR 8,
	// BIRD 2) record "BFD down" as the reason.
	ctx, cancel := context.WithTimeout(context.Background(), bfdShutdownTimeout)
	if s.closeSessionsLocked(ctx) {
		// Let the routers read the NOTIFICATION before BFD says
		// AdminDown: they handle the two on different paths (bgpd and
		// bfdd, BIRD's main loop and BFD thread).
		t := time.NewTimer(ceaseBeforeAdminDown)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	s.bfd.Shutdown(ctx)
	cancel()
	s.server.Stop()
	if s.cancel != nil {
		s.cancel()
	}
	return true
}

// closeSessionsLocked sends every established session a CEASE
// (administrative shutdown) and waits, until ctx ends, for GoBGP to report
// them all down. It reports whether there was any.
func (s *Speaker) closeSessionsLocked(ctx context.Context) bool {
	established := func() []string {
		var up []string
		_ = s.server.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
			if p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED {
				up = append(up, p.GetConf().GetNeighborAddress())
			}
		})
		return up
	}
	up := established()
	any := len(up) > 0
	for _, a := range up {
		if err := s.server.DisablePeer(ctx, &api.DisablePeerRequest{Address: a, Communication: "vipd stopping"}); err != nil {
			s.log.Warn("close bgp session", "peer", a, "err", err)
		}
	}
	for len(up) > 0 {
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			s.log.Warn("bgp sessions still established when stopping", "peers", up)
			return any
		case <-t.C:
		}
		up = established()
	}
	return any
}

// ceaseBeforeAdminDown is the pause between the last CEASE and the BFD
// AdminDown when stopping.
const ceaseBeforeAdminDown = 100 * time.Millisecond

// bfdShutdownTimeout bounds how long Stop spends closing the BGP sessions
// and telling BFD neighbors.
const bfdShutdownTimeout = time.Second

func (s *Speaker) onPeerEvent(pe *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if pe == nil || pe.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	st := pe.Peer.State
	addr, to := st.NeighborAddress.String(), fsmStateName(st.SessionState)
	from, ok := s.peerState[addr]
	if !ok {
		from = "idle"
	}
	if from == to {
		return
	}
	s.peerState[addr] = to
	s.log.Info("bgp peer state", "peer", addr, "from", from, "to", to)
}

// running returns the server, or an error when the speaker is not running.
// s.mu must be held.
func (s *Speaker) runningLocked() (*server.BgpServer, error) {
	if s.server == nil {
		return nil, errors.New("bgp speaker not started")
	}
	if s.stopped {
		return nil, errors.New("bgp speaker stopped")
	}
	return s.server, nil
}

// Announce advertises addr/32 (or addr/128) with next hop self and the
// peers' communities; addr must be one of Config.VIPs. The RIB is the
// truth, not the Speaker's memory: announcing an address already announced
// checks that its path is still in the global RIB and adds it again if it
// is not. Announcing a draining address removes the GRACEFUL_SHUTDOWN
// community.
func (s *Speaker) Announce(ctx context.Context, addr netip.Addr) error {
	return s.originate(ctx, addr, announced)
}

// Drain re-announces addr with the GRACEFUL_SHUTDOWN community 65535:0
// (RFC 8326) added, so routers prefer other paths. It does not wait: the
// caller waits for its graceful-shutdown period and then calls Withdraw.
func (s *Speaker) Drain(ctx context.Context, addr netip.Addr) error {
	return s.originate(ctx, addr, draining)
}

func (s *Speaker) originate(ctx context.Context, addr netip.Addr, st routeState) error {
	addr = addr.Unmap()
	var comms []uint32
	if st == draining {
		comms = []uint32{GracefulShutdown}
	}
	path, err := buildPath(addr, comms)
	if err != nil {
		return fmt.Errorf("announce %s: %w", addr, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, err := s.runningLocked()
	if err != nil {
		return fmt.Errorf("announce %s: %w", addr, err)
	}
	if !slices.Contains(s.cfg.VIPs, addr) {
		return fmt.Errorf("announce %s: not a configured VIP", addr)
	}
	if s.routes[addr] == st {
		paths, err := listLocal(ctx, srv, []netip.Addr{addr})
		if err != nil {
			return fmt.Errorf("announce %s: read rib: %w", addr, err)
		}
		if paths[addr] == st {
			return nil
		}
		s.log.Warn("bgp route missing from the rib, adding it again", "vip", addr)
	}
	// A new path for the same prefix from the same (local) source replaces
	// the old one; peers get a single UPDATE.
	if _, err := srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{path}}); err != nil {
		return fmt.Errorf("announce %s: %w", addr, err)
	}
	s.routes[addr] = st
	s.rib = ribCache{}
	if st == draining {
		s.log.Info("bgp route draining", "vip", addr)
	} else {
		s.log.Info("bgp route announced", "vip", addr)
	}
	return nil
}

// Withdraw removes the route for addr. Withdrawing an address that is not
// announced is a no-op.
func (s *Speaker) Withdraw(ctx context.Context, addr netip.Addr) error {
	addr = addr.Unmap()
	path, err := buildPath(addr, nil)
	if err != nil {
		return fmt.Errorf("withdraw %s: %w", addr, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, err := s.runningLocked()
	if err != nil {
		return fmt.Errorf("withdraw %s: %w", addr, err)
	}
	if _, ok := s.routes[addr]; !ok {
		return nil
	}
	if err := srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{path}}); err != nil {
		return fmt.Errorf("withdraw %s: %w", addr, err)
	}
	delete(s.routes, addr)
	s.rib = ribCache{}
	s.log.Info("bgp route withdrawn", "vip", addr)
	return nil
}

// Announced reports whether the global RIB holds a locally originated path
// for addr's host route. One listing of the RIB answers every call for
// 250ms (one pass of the caller over all its VIPs costs one or two
// ListPath calls, not one per VIP); Announce, Drain and Withdraw through
// this Speaker start a new listing.
func (s *Speaker) Announced(ctx context.Context, addr netip.Addr) (bool, error) {
	addr = addr.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, err := s.runningLocked()
	if err != nil {
		return false, fmt.Errorf("read rib: %w", err)
	}
	now := s.now()
	if s.rib.paths == nil || now.Sub(s.rib.at) >= ribCacheTTL || now.Before(s.rib.at) {
		paths, err := listLocal(ctx, srv, s.cfg.VIPs)
		if err != nil {
			return false, fmt.Errorf("read rib: %w", err)
		}
		s.rib = ribCache{at: now, paths: paths}
	}
	_, ok := s.rib.paths[addr]
	return ok, nil
}

// listLocal returns the locally originated host routes of the global RIB
// for the families of vips (only that address's route when vips holds one
// address), with their state.
func listLocal(ctx context.Context, srv *server.BgpServer, vips []netip.Addr) (map[netip.Addr]routeState, error) {
	out := make(map[netip.Addr]routeState)
	var has4, has6 bool
	for _, a := range vips {
		has4, has6 = has4 || a.Is4(), has6 || a.Is6()
	}
	for _, fam := range []struct {
		f  bgp.Family
		on bool
	}{{familyIPv4, has4}, {familyIPv6, has6}} {
		if !fam.on {
			continue
		}
		req := apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: fam.f}
		if len(vips) == 1 {
			req.Prefixes = []*apiutil.LookupPrefix{{Prefix: netip.PrefixFrom(vips[0], vips[0].BitLen()).String()}}
		}
		err := srv.ListPath(req, func(nlri bgp.NLRI, paths []*apiutil.Path) {
			pfx, ok := hostRoute(nlri)
			if !ok {
				return
			}
			for _, p := range paths {
				if p.Withdrawal || !isLocal(p) {
					continue
				}
				out[pfx.Addr()] = pathState(p)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hostRoute returns nlri's prefix when it is a host route (/32, /128).
func hostRoute(nlri bgp.NLRI) (netip.Prefix, bool) {
	n, ok := nlri.(*bgp.IPAddrPrefix)
	if !ok {
		return netip.Prefix{}, false
	}
	pfx := n.Prefix
	if !pfx.IsValid() || pfx.Bits() != pfx.Addr().BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()), true
}

// isLocal reports whether p was originated by this speaker (it has no
// neighbor).
func isLocal(p *apiutil.Path) bool {
	return !p.PeerAddress.IsValid()
}

// pathState tells a draining path (GRACEFUL_SHUTDOWN) from an announced one.
func pathState(p *apiutil.Path) routeState {
	for _, a := range p.Attrs {
		if c, ok := a.(*bgp.PathAttributeCommunities); ok && slices.Contains(c.Value, GracefulShutdown) {
			return draining
		}
	}
	return announced
}

// PeerStatus is the state of one BGP session.
type PeerStatus struct {
	// Address is the neighbor's address.
	Address netip.Addr
	// ASN is the neighbor's AS number.
	ASN uint32
	// State is the session state: "idle", "connect", "active", "opensent",
	// "openconfirm" or "established" ("unknown" if GoBGP reports none).
	State string
	// Uptime is the time since the session became established, 0 otherwise.
	Uptime time.Duration
	// Received is the number of prefixes received from the peer.
	Received uint64
	// Accepted is the number of the peer's prefixes in the global RIB:
	// always 0 while the import policy rejects everything.
	Accepted uint64
	// Advertised is the number of prefixes advertised to the peer.
	Advertised uint64
	// MaxPrefixes is the peer's prefix limit.
	MaxPrefixes uint32
	// BFD is the BFD session state, "" when BFD is off: "down", "init",
	// "up" or "admin_down".
	BFD string
	// BFDDiag is the local BFD diagnostic, why the session last went down
	// ("" for none), such as "control_detection_time_expired".
	BFDDiag string
	// HeldByBFD is true while the BGP session is closed because BFD is
	// down.
	HeldByBFD bool
	// GracefulRestart is true when both sides sent the Graceful Restart
	// capability: the router keeps this speaker's routes across a restart
	// (Detach, then Resume).
	GracefulRestart bool
}

// Peers returns the state of every configured peer, sorted by address.
func (s *Speaker) Peers(ctx context.Context) ([]PeerStatus, error) {
	s.mu.Lock()
	srv, err := s.runningLocked()
	cfg := make(map[netip.Addr]Peer, len(s.cfg.Peers))
	for _, p := range s.cfg.Peers {
		cfg[p.Address] = p
	}
	held := make(map[netip.Addr]bool, len(s.bfdHeld))
	for a := range s.bfdHeld {
		held[a] = true
	}
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	accepted := make(map[netip.Addr]uint64)
	for _, f := range []bgp.Family{familyIPv4, familyIPv6} {
		err := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f}, func(_ bgp.NLRI, paths []*apiutil.Path) {
			for _, p := range paths {
				if p.PeerAddress.IsValid() {
					accepted[p.PeerAddress.Unmap()]++
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("list peers: read rib: %w", err)
		}
	}
	var out []PeerStatus
	var parseErr error
	err = srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		ps, err := peerStatus(p, time.Now())
		if err != nil {
			parseErr = errors.Join(parseErr, err)
			return
		}
		ps.Accepted = accepted[ps.Address]
		if c, ok := cfg[ps.Address]; ok {
			ps.MaxPrefixes = c.maxPrefixes()
			if c.BFD.Enabled {
				if st, ok := s.bfd.Status(ps.Address); ok {
					ps.BFD = st.State.String()
					if st.LocalDiag != bfd.DiagNone {
						ps.BFDDiag = st.LocalDiag.String()
					}
				}
			}
		}
		ps.HeldByBFD = held[ps.Address]
		out = append(out, ps)
	})
	if err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	if parseErr != nil {
		return nil, fmt.Errorf("list peers: %w", parseErr)
	}
	slices.SortFunc(out, func(a, b PeerStatus) int { return a.Address.Compare(b.Address) })
	return out, nil
}

func peerStatus(p *api.Peer, now time.Time) (PeerStatus, error) {
	addr, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
	if err != nil {
		return PeerStatus{}, fmt.Errorf("peer address %q: %w", p.GetConf().GetNeighborAddress(), err)
	}
	ps := PeerStatus{
		Address: addr.Unmap(),
		ASN:     p.GetConf().GetPeerAsn(),
		State:   stateName(p.GetState().GetSessionState()),
	}
	if ps.State == "established" {
		if up := p.GetTimers().GetState().GetUptime(); up != nil && up.IsValid() {
			if d := now.Sub(up.AsTime()); d > 0 {
				ps.Uptime = d
			}
		}
	}
	for _, af := range p.GetAfiSafis() {
		ps.Received += af.GetState().GetReceived()
		ps.Advertised += af.GetState().GetAdvertised()
	}
	// A helper (FRR's and BIRD's default) sends the capability without
	// families: it keeps routes without keeping its own.
	ps.GracefulRestart = hasGRCapability(p.GetState().GetLocalCap()) && hasGRCapability(p.GetState().GetRemoteCap())
	return ps, nil
}

// hasGRCapability reports whether caps hold the Graceful Restart
// capability.
func hasGRCapability(caps []*api.Capability) bool {
	for _, c := range caps {
		if c.GetGracefulRestart() != nil {
			return true
		}
	}
	return false
}

func stateName(st api.PeerState_SessionState) string {
	switch st {
	case api.PeerState_SESSION_STATE_IDLE:
		return "idle"
	case api.PeerState_SESSION_STATE_CONNECT:
		return "connect"
	case api.PeerState_SESSION_STATE_ACTIVE:
		return "active"
	case api.PeerState_SESSION_STATE_OPENSENT:
		return "opensent"
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return "established"
	default:
		return "unknown"
	}
}

// fsmStateName names a session state as stateName does, from the native
// form GoBGP's peer events carry.
func fsmStateName(st bgp.FSMState) string {
	switch st {
	case bgp.BGP_FSM_IDLE:
		return "idle"
	case bgp.BGP_FSM_CONNECT:
		return "connect"
	case bgp.BGP_FSM_ACTIVE:
		return "active"
	case bgp.BGP_FSM_OPENSENT:
		return "opensent"
	case bgp.BGP_FSM_OPENCONFIRM:
		return "openconfirm"
	case bgp.BGP_FSM_ESTABLISHED:
		return "established"
	default:
		return "unknown"
	}
}

// onBFDChange queues a BFD state change for bfdLoop. It runs under the BFD
// server's lock, so it only appends and wakes.
func (s *Speaker) onBFDChange(c bfd.Change) {
	s.bfdMu.Lock()
	s.bfdPending = append(s.bfdPending, c)
	s.bfdMu.Unlock()
	select {
	case s.bfdWake <- struct{}{}:
	default:
	}
}

// bfdLoop applies BFD state changes to the BGP sessions until ctx ends.
// Every bfdReassert it also opens sessions held longer than bfdHoldMax and
// re-asserts the admin state of the peers with BFD: GoBGP drops an admin
// state request that arrives while the previous one is still pending, and
// a session must not stay closed (or open) because of that.
func (s *Speaker) bfdLoop(ctx context.Context) {
	tick := time.NewTicker(bfdReassert)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.reassertAdmin(ctx)
			continue
		case <-s.bfdWake:
		}
		s.bfdMu.Lock()
		cs := s.bfdPending
		s.bfdPending = nil
		s.bfdMu.Unlock()
		for _, c := range cs {
			s.applyBFD(ctx, c)
		}
		s.mu.Lock()
		hook := s.bfdApplied
		s.mu.Unlock()
		if hook != nil {
			hook()
		}
	}
}

// bfdReassert is how often bfdLoop checks GoBGP's admin state of the peers
// with BFD against what BFD wants.
const bfdReassert = time.Second

// reassertAdmin opens the sessions held longer than bfdHoldMax, and asks
// GoBGP again for the admin state BFD wants of every peer with BFD whose
// admin state differs.
func (s *Speaker) reassertAdmin(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, err := s.runningLocked()
	if err != nil {
		return
	}
	now := s.now()
	for a, since := range s.bfdHeld {
		if now.Sub(since) >= bfdHoldMax {
			s.releaseLocked(ctx, srv, a, "bfd still down after "+bfdHoldMax.String())
		}
	}
	for _, p := range s.cfg.Peers {
		if !p.BFD.Enabled {
			continue
		}
		var down, found bool
		err := srv.ListPeer(ctx, &api.ListPeerRequest{Address: p.Address.String()}, func(ap *api.Peer) {
			found = true
			down = ap.GetState().GetAdminState() == api.PeerState_ADMIN_STATE_DOWN
		})
		held := s.heldLocked(p.Address)
		if err != nil || !found || down == held {
			continue
		}
		s.log.Warn("bgp admin state differs from bfd, asking again", "peer", p.Address, "held", held)
		if held {
			err = srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: p.Address.String(), Communication: "BFD down"})
		} else {
			err = srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: p.Address.String()})
		}
		if err != nil {
			s.log.Error("set bgp admin state", "peer", p.Address, "err", err)
		}
	}
}

// applyBFD closes a peer's BGP session when its BFD session fails (Up to
// Down, unless the neighbor said AdminDown: RFC 5882 section 3.2) and
// opens it again when BFD is Up.
func (s *Speaker) applyBFD(ctx context.Context, c bfd.Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, err := s.runningLocked()
	if err != nil {
		return
	}
	if p, ok := s.peerLocked(c.Peer); !ok || !p.BFD.Enabled {
		return
	}
	addr := c.Peer.String()
	switch {
	case c.From == bfd.Up && c.To == bfd.Down && c.RemoteState == bfd.AdminDown:
		s.log.Info("bfd down by the neighbor (admin down): bgp session kept", "peer", c.Peer)
	case c.From == bfd.Up && c.To == bfd.Down && !s.heldLocked(c.Peer):
		if err := srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: addr, Communication: "BFD down: " + c.Diag.String()}); err != nil {
			s.log.Error("close bgp session after bfd down", "peer", c.Peer, "err", err)
			return
		}
		s.bfdHeld[c.Peer] = s.now()
		s.log.Warn("bgp session closed: bfd down", "peer", c.Peer, "reason", c.Diag.String())
	case c.To == bfd.Up && s.heldLocked(c.Peer):
		s.releaseLocked(ctx, srv, c.Peer, "bfd up")
	}
}

func (s *Speaker) heldLocked(peer netip.Addr) bool {
	_, ok := s.bfdHeld[peer]
	return ok
}

// bfdHoldMax is how long a BGP session closed by a BFD failure stays
// closed while BFD does not come Up again. Routers that run BFD only
// while the BGP session is up (BGP-triggered sessions) would otherwise
// never bring BFD back, and the session would stay closed for good; after
// bfdHoldMax GoBGP may connect again (it fails while the path is really
// down), and a BFD failure after BFD is Up again closes it again.
const bfdHoldMax = 5 * time.Second

// releaseLocked opens a peer's BGP session held down by BFD.
func (s *Speaker) releaseLocked(ctx context.Context, srv *server.BgpServer, peer netip.Addr, reason string) {
	if !s.heldLocked(peer) {
		return
	}
	if err := srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: peer.String()}); err != nil {
		s.log.Error("reopen bgp session", "peer", peer, "err", err)
		return
	}
	delete(s.bfdHeld, peer)
	s.log.Info("bgp session reopened", "peer", peer, "reason", reason)
}

func (s *Speaker) peerLocked(a netip.Addr) (Peer, bool) {
	for _, p := range s.cfg.Peers {
		if p.Address == a {
			return p, true
		}
	}
	return Peer{}, false
}

// Reconfigure applies a changed peer and VIP list without restarting the
// server: removed peers are deleted (CEASE), new peers added, peers whose
// ASN, password, timers, prefix limit, local address, multihop or TTL
// security changed are re-created (their session resets), and community,
// path attribute (MED, LOCAL_PREF) or VIP changes are applied with a soft
// reset out. BFD sessions follow the peers' BFD settings (a timer change
// is a Poll Sequence, not a reset). ASN, RouterID and the listen settings
// cannot change without a restart and are reported as an error; the logger
// is not changed.
func (s *Speaker) Reconfigure(ctx context.Context, cfg Config) error {
	if errs := cfg.Validate(); len(errs) > 0 {
		return fmt.Errorf("bgp config: %w", errors.Join(errs...))
	}
	cfg.VIPs = unmapAll(cfg.VIPs)
	cfg.VIPAttrs = cloneVIPAttrs(cfg.VIPAttrs)
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, err := s.runningLocked()
	if err != nil {
		return fmt.Errorf("reconfigure: %w", err)
	}
	old := s.cfg
	if cfg.ASN != old.ASN || cfg.RouterID != old.RouterID || cfg.listenPort() != old.listenPort() ||
		!slices.Equal(cfg.ListenAddresses, old.ListenAddresses) {
		return errors.New("reconfigure: asn, router_id and listen settings need a restart")
	}
	// The capability is in OPEN: a change means new sessions, which would
	// withdraw every route a reload must keep.
	if cfg.GracefulRestart != old.GracefulRestart {
		return errors.New("reconfigure: graceful restart settings need a restart")
	}
	oldPeers := make(map[netip.Addr]Peer, len(old.Peers))
	for _, p := range old.Peers {
		oldPeers[p.Address] = p
	}
	newPeers := make(map[netip.Addr]Peer, len(cfg.Peers))
	for _, p := range cfg.Peers {
		newPeers[p.Address] = p
	}

	// Keep s.cfg.Peers in step with what GoBGP has, so a failure half way
	// leaves a state the next Reconfigure can diff against.
	current := make(map[netip.Addr]Peer, len(oldPeers))
	for a, p := range oldPeers {
		current[a] = p
	}
	commit := func() {
		ps := make([]Peer, 0, len(current))
		for _, p := range current {
			ps = append(ps, p)
		}
		slices.SortFunc(ps, func(a, b Peer) int { return a.Address.Compare(b.Address) })
		s.cfg.Peers = ps
	}
	defer commit()

	for a, p := range oldPeers {
		n, keep := newPeers[a]
		if !keep {
			s.bfd.Remove(a)
			delete(s.bfdHeld, a)
		}
		if keep && sessionEqual(p, n) {
			continue
		}
		if err := srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a.String()}); err != nil {
			return fmt.Errorf("reconfigure: delete peer %s: %w", a, err)
		}
		delete(current, a)
		if !keep {
			s.log.Info("bgp peer removed", "peer", a)
		}
	}
	// The policy must name new peers and VIPs before they are used, and
	// must keep the communities of peers still up until the soft reset
	// below.
	if err := s.setPolicyLocked(ctx, cfg.Peers, cfg.VIPs, cfg.VIPAttrs); err != nil {
		return fmt.Errorf("reconfigure: %w", err)
	}
	vipsChanged := !slices.Equal(old.VIPs, cfg.VIPs) || !vipAttrsEqual(old.VIPAttrs, cfg.VIPAttrs)
	s.cfg.VIPs, s.cfg.VIPAttrs = cfg.VIPs, cfg.VIPAttrs
	s.rib = ribCache{}
	for _, p := range cfg.Peers {
		if _, ok := current[p.Address]; ok {
			continue
		}
		ps := peerSession{adminDown: s.heldLocked(p.Address), gr: s.cfg.GracefulRestart}
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p, ps)}); err != nil {
			return fmt.Errorf("reconfigure: add peer %s: %w", p.Address, err)
		}
		current[p.Address] = p
		if _, existed := oldPeers[p.Address]; existed {
			s.log.Info("bgp peer updated", "peer", p.Address, "reason", "session settings changed")
		} else {
			s.log.Info("bgp peer added", "peer", p.Address, "asn", p.ASN)
		}
	}
	for a, n := range newPeers {
		o, existed := oldPeers[a]
		current[a] = n
		if bc, ok := n.bfdSession(); ok {
			if err := s.bfd.Set(bc); err != nil {
				return fmt.Errorf("reconfigure: %w", err)
			}
		} else if existed && o.BFD.Enabled {
			s.bfd.Remove(a)
			s.releaseLocked(ctx, srv, a, "bfd turned off")
		}
		if !existed || !sessionEqual(o, n) || (slices.Equal(o.Communities, n.Communities) && o.Attrs.Equal(n.Attrs) && !vipsChanged) {
			continue
		}
		err := srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: api.ResetPeerRequest_DIRECTION_OUT})
		if err != nil {
			return fmt.Errorf("reconfigure: resend routes to %s: %w", a, err)
		}
		s.log.Info("bgp peer updated", "peer", a, "reason", "communities, path attributes or vips changed")
	}
	return nil
}

// sessionEqual reports whether a and b need the same BGP session (everything
// but communities and path attributes, which the export policy handles,
// and BFD, which runs beside the session).
func sessionEqual(a, b Peer) bool {
	return a.Address == b.Address && a.ASN == b.ASN && a.Password == b.Password &&
		a.holdTime() == b.holdTime() && a.keepalive() == b.keepalive() && a.maxPrefixes() == b.maxPrefixes() &&
		hopsEqual(a, b)
}

func (s *Speaker) setPolicyLocked(ctx context.Context, peers []Peer, vips []netip.Addr, vipAttrs map[netip.Addr]Attrs) error {
	req, err := exportPolicy(peers, vips, vipAttrs)
	if err != nil {
		return fmt.Errorf("build export policy: %w", err)
	}
	if err := s.server.SetPolicies(ctx, req); err != nil {
		return fmt.Errorf("set export policy: %w", err)
	}
	return nil
}
