// Package bgp advertises virtual IP addresses as host routes to BGP routers
// with an embedded GoBGP v3 speaker.
//
// A Speaker originates addr/32 (IPv4) or addr/128 (IPv6, MP-BGP) with next hop
// self. IPv4 routes go to IPv4 peers and IPv6 routes to IPv6 peers. Each
// peer's communities are added on export to that peer; Drain adds the
// GRACEFUL_SHUTDOWN community (RFC 8326) so routers move traffic away before
// Withdraw removes the route.
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

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
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
	cancel  context.CancelFunc // ends the watcher and the ctx goroutine
	done    chan struct{}      // closed when the ctx goroutine has returned

	// peerState is the last logged session state per peer; only the GoBGP
	// watcher goroutine (onPeerEvent) touches it.
	peerState map[string]string
}

// New validates cfg and returns a Speaker that is not yet running.
func New(cfg Config) (*Speaker, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("bgp config: %w", errors.Join(errs...))
	}
	cfg.Peers = slices.Clone(cfg.Peers)
	return &Speaker{
		log:       cfg.logger(),
		cfg:       cfg,
		routes:    make(map[netip.Addr]routeState),
		peerState: make(map[string]string),
	}, nil
}

// Start starts the embedded GoBGP server and adds the configured peers. The
// speaker runs until Stop is called or ctx ends. Start may be called once.
func (s *Speaker) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("bgp speaker already started")
	}
	s.started = true

	srv := server.NewBgpServer(server.LoggerOption(gobgpLogger{l: s.log}))
	// Serve never returns in GoBGP v3: after Stop this goroutine stays parked
	// on its channels (it holds no sockets or timers).
	go srv.Serve()

	global := &api.Global{
		Asn:             s.cfg.ASN,
		RouterId:        s.cfg.RouterID.String(),
		ListenPort:      s.cfg.listenPort(),
		ListenAddresses: s.cfg.ListenAddresses,
	}
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: global}); err != nil {
		srv.Stop()
		return fmt.Errorf("start bgp as %d: %w", s.cfg.ASN, err)
	}
	s.server = srv

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if err := srv.WatchEvent(runCtx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, s.onPeerEvent); err != nil {
		s.stopLocked()
		return fmt.Errorf("watch peer events: %w", err)
	}
	if err := s.setPolicyLocked(ctx, s.cfg.Peers); err != nil {
		s.stopLocked()
		return err
	}
	if err := srv.SetPolicyAssignment(ctx, exportAssignment()); err != nil {
		s.stopLocked()
		return fmt.Errorf("assign export policy: %w", err)
	}
	for _, p := range s.cfg.Peers {
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p)}); err != nil {
			s.stopLocked()
			return fmt.Errorf("add peer %s: %w", p.Address, err)
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
	s.log.Info("bgp speaker started", "asn", s.cfg.ASN, "router_id", s.cfg.RouterID, "peers", len(s.cfg.Peers))
	return nil
}

// Stop closes every session (CEASE notification) and stops the server. It is
// safe to call more than once and from any goroutine.
func (s *Speaker) Stop() error {
	s.mu.Lock()
	done := s.done
	stopped := s.stopLocked()
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	if stopped {
		s.log.Info("bgp speaker stopped", "reason", "stop called")
	}
	return nil
}

// stopLocked stops the server if it runs and reports whether it did.
func (s *Speaker) stopLocked() bool {
	if s.stopped || s.server == nil {
		s.stopped = true
		return false
	}
	s.stopped = true
	s.server.Stop()
	if s.cancel != nil {
		s.cancel()
	}
	return true
}

func (s *Speaker) onPeerEvent(r *api.WatchEventResponse) {
	pe := r.GetPeer()
	if pe == nil || pe.GetPeer() == nil || pe.GetType() != api.WatchEventResponse_PeerEvent_STATE {
		return
	}
	st := pe.GetPeer().GetState()
	addr, to := st.GetNeighborAddress(), stateName(st.GetSessionState())
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
// peers' communities. Announcing an address already announced is a no-op;
// announcing a draining address removes the GRACEFUL_SHUTDOWN community.
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
	if s.routes[addr] == st {
		return nil
	}
	// A new path for the same prefix from the same (local) source replaces
	// the old one; peers get a single UPDATE.
	if _, err := srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: path}); err != nil {
		return fmt.Errorf("announce %s: %w", addr, err)
	}
	s.routes[addr] = st
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
	if err := srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: path.Family, Path: path}); err != nil {
		return fmt.Errorf("withdraw %s: %w", addr, err)
	}
	delete(s.routes, addr)
	s.log.Info("bgp route withdrawn", "vip", addr)
	return nil
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
	// Advertised is the number of prefixes advertised to the peer.
	Advertised uint64
}

// Peers returns the state of every configured peer, sorted by address.
func (s *Speaker) Peers(ctx context.Context) ([]PeerStatus, error) {
	s.mu.Lock()
	srv, err := s.runningLocked()
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	var out []PeerStatus
	var parseErr error
	err = srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		ps, err := peerStatus(p, time.Now())
		if err != nil {
			parseErr = errors.Join(parseErr, err)
			return
		}
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
		Address: addr,
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
	return ps, nil
}

func stateName(st api.PeerState_SessionState) string {
	switch st {
	case api.PeerState_IDLE:
		return "idle"
	case api.PeerState_CONNECT:
		return "connect"
	case api.PeerState_ACTIVE:
		return "active"
	case api.PeerState_OPENSENT:
		return "opensent"
	case api.PeerState_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_ESTABLISHED:
		return "established"
	default:
		return "unknown"
	}
}

// Reconfigure applies a changed peer list without restarting the server:
// removed peers are deleted (CEASE), new peers added, peers whose ASN,
// password or timers changed are re-created (their session resets), and
// community changes are applied with a soft reset out. ASN, RouterID and the
// listen settings cannot change without a restart and are reported as an
// error; the logger is not changed.
func (s *Speaker) Reconfigure(ctx context.Context, cfg Config) error {
	if errs := cfg.Validate(); len(errs) > 0 {
		return fmt.Errorf("bgp config: %w", errors.Join(errs...))
	}
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
	// The policy must name new peers before they establish, and must keep
	// the communities of peers still up until the soft reset below.
	if err := s.setPolicyLocked(ctx, cfg.Peers); err != nil {
		return fmt.Errorf("reconfigure: %w", err)
	}
	for _, p := range cfg.Peers {
		if _, ok := current[p.Address]; ok {
			continue
		}
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p)}); err != nil {
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
		if !existed || !sessionEqual(o, n) || slices.Equal(o.Communities, n.Communities) {
			continue
		}
		err := srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: api.ResetPeerRequest_OUT})
		if err != nil {
			return fmt.Errorf("reconfigure: resend routes to %s: %w", a, err)
		}
		s.log.Info("bgp peer updated", "peer", a, "reason", "communities changed")
	}
	return nil
}

// sessionEqual reports whether a and b need the same BGP session (everything
// but communities, which the export policy handles).
func sessionEqual(a, b Peer) bool {
	return a.Address == b.Address && a.ASN == b.ASN && a.Password == b.Password &&
		a.holdTime() == b.holdTime() && a.keepalive() == b.keepalive()
}

func (s *Speaker) setPolicyLocked(ctx context.Context, peers []Peer) error {
	req, err := exportPolicy(peers)
	if err != nil {
		return fmt.Errorf("build export policy: %w", err)
	}
	if err := s.server.SetPolicies(ctx, req); err != nil {
		return fmt.Errorf("set export policy: %w", err)
	}
	return nil
}
