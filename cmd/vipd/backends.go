package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/vipd/vipd/agent"
	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/bgp"
	"github.com/vipd/vipd/internal/backendconfig"
	"github.com/vipd/vipd/l2"
)

// realBackends announces L2 VIPs with l2.Announcer (one per interface) and
// BGP VIPs with the embedded bgp.Speaker, binding the address locally with
// a quiet l2.Announcer.
type realBackends struct {
	lg      *slog.Logger
	mu      sync.Mutex
	l2      map[string]*l2.Announcer // by interface, and "quiet:" + interface
	speaker *bgp.Speaker
}

// newBackends starts the real announcers for c: the BGP speaker when a
// [bgp] section exists (resumed with the routes of resume, the BGP VIPs
// taken over from the previous process in a restart in place); L2
// announcers are created on first use. It is the agent's
// Options.Backends.
func newBackends(ctx context.Context, c *config.Config, lg *slog.Logger, resume []netip.Addr) (agent.Backends, error) {
	b := &realBackends{lg: lg, l2: map[string]*l2.Announcer{}}
	if c.BGP != nil {
		sp, err := bgp.New(speakerConfig(c, lg))
		if err != nil {
			return nil, fmt.Errorf("bgp: %w", err)
		}
		if len(resume) > 0 {
			err = sp.Resume(ctx, resume)
		} else {
			err = sp.Start(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("bgp: %w", err)
		}
		b.speaker = sp
	}
	return b, nil
}

// speakerConfig is the speaker's configuration: the one the
// configuration checked (config.Config.Speaker, with backendconfig.Rules),
// with a logger.
func speakerConfig(c *config.Config, lg *slog.Logger) bgp.Config {
	bc := backendconfig.Speaker(c.Speaker())
	bc.Logger = lg.With("component", "bgp")
	return bc
}

// l2For returns the announcer of an l2 configuration (config.VIPConfig.L2):
// one per interface, and one more, quiet, per interface BGP VIPs are bound
// on.
func (b *realBackends) l2For(lc l2.Config) (*l2.Announcer, error) {
	key := lc.Interface
	if lc.Quiet {
		key = "quiet:" + lc.Interface
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.l2[key]; a != nil {
		return a, nil
	}
	lc.Logger = b.lg
	a, err := l2.New(lc)
	if err != nil {
		return nil, err
	}
	b.l2[key] = a
	return a, nil
}

// Announcer implements Backends.
func (b *realBackends) Announcer(v config.VIPConfig) (agent.Announcer, error) {
	switch v.Mode {
	case config.ModeL2:
		return b.l2For(backendconfig.L2(v.L2()))
	case config.ModeBGP:
		if b.speaker == nil {
			return nil, errors.New("mode bgp needs a [bgp] section")
		}
		bind, err := b.l2For(backendconfig.L2(v.L2()))
		if err != nil {
			return nil, err
		}
		return &routedVIP{bind: bind, route: b.speaker}, nil
	}
	return nil, fmt.Errorf("unknown mode %q", v.Mode)
}

// Reconfigure implements Backends.
func (b *realBackends) Reconfigure(ctx context.Context, c *config.Config) error {
	if c.BGP == nil && b.speaker != nil {
		return errors.New("removing [bgp] takes a restart")
	}
	if c.BGP != nil && b.speaker == nil {
		return errors.New("adding [bgp] takes a restart")
	}
	if b.speaker != nil {
		return b.speaker.Reconfigure(ctx, speakerConfig(c, b.lg))
	}
	return nil
}

// BGPPeers implements Backends.
func (b *realBackends) BGPPeers(ctx context.Context) []*apipb.BGPPeerStatus {
	if b.speaker == nil {
		return nil
	}
	peers, err := b.speaker.Peers(ctx)
	if err != nil {
		b.lg.Warn("bgp peer status", "err", err)
		return nil
	}
	out := make([]*apipb.BGPPeerStatus, 0, len(peers))
	for _, p := range peers {
		out = append(out, &apipb.BGPPeerStatus{
			Address: p.Address.String(), Asn: p.ASN, State: p.State,
			UptimeSeconds: int64(p.Uptime.Seconds()), Received: p.Received, Advertised: p.Advertised,
			Accepted: p.Accepted, MaxPrefixes: p.MaxPrefixes, BfdState: p.BFD, BfdDiagnostic: p.BFDDiag,
		})
	}
	return out
}

var _ agent.Restarter = (*realBackends)(nil)

// An L2 VIP's planned handoff can be daisy-chained, and its advertisements
// (the refresh) stop while it is handed off.
var (
	_ agent.Forwarder = (*l2.Announcer)(nil)
	_ agent.Lingerer  = (*l2.Announcer)(nil)
	_ agent.Silencer  = (*l2.Announcer)(nil)
)

// RestartReady implements agent.Restarter: L2 addresses stay in the
// kernel by themselves; BGP routes stay only with routers that negotiated
// graceful restart, so every established session must have.
func (b *realBackends) RestartReady(ctx context.Context) (bool, string) {
	if b.speaker == nil {
		return true, ""
	}
	peers, err := b.speaker.Peers(ctx)
	if err != nil {
		return false, fmt.Sprintf("bgp: %v", err)
	}
	for _, p := range peers {
		if p.State == "established" && !p.GracefulRestart {
			return false, fmt.Sprintf("bgp peer %s did not negotiate graceful restart (bgp.graceful_restart_time): the routers would drop the routes", p.Address)
		}
	}
	return true, ""
}

// Detach implements agent.Restarter: the speaker leaves its sessions to the
// process exit (no CEASE), so routers keep the routes as stale for the
// next process; the L2 announcers keep their addresses anyway.
func (b *realBackends) Detach() {
	if b.speaker != nil {
		b.speaker.Detach()
	}
}

// Close implements Backends.
func (b *realBackends) Close() error {
	var errs []error
	b.mu.Lock()
	for _, a := range b.l2 {
		errs = append(errs, a.Close())
	}
	b.mu.Unlock()
	if b.speaker != nil {
		errs = append(errs, b.speaker.Stop())
	}
	return errors.Join(errs...)
}

// routedVIP is a BGP VIP: the address bound locally so the host accepts
// traffic for it, and the route announced to the routers. Announce binds
// first; Withdraw removes the route first. Both halves restore what is
// missing when called again, so Announce after a failed Verify repairs
// either.
type routedVIP struct {
	bind  binder
	route router
}

// binder is the local half of a routed VIP (a quiet l2.Announcer): Verify
// reports whether the address is on lo as Announce binds it (so the host
// never takes it as its source address).
type binder interface {
	agent.Announcer
	agent.Verifier
	agent.Lifetimer
}

// router is the BGP half of a routed VIP (bgp.Speaker).
type router interface {
	agent.Announcer
	Drain(ctx context.Context, addr netip.Addr) error
	Announced(ctx context.Context, addr netip.Addr) (bool, error)
}

var _ agent.Verifier = (*routedVIP)(nil)

func (r *routedVIP) Announce(ctx context.Context, addr netip.Addr) error {
	if err := r.bind.Announce(ctx, addr); err != nil {
		return err
	}
	return r.route.Announce(ctx, addr)
}

// Verify implements agent.Verifier: the address is on the interface as the
// binder adds it and the speaker's RIB holds its locally originated path. The speaker lists
// its RIB once for all the VIPs verified within 250ms, so a pass over 100
// VIPs costs one or two listings, not 100.
func (r *routedVIP) Verify(ctx context.Context, addr netip.Addr) (bool, error) {
	held, err := r.bind.Verify(ctx, addr)
	if err != nil || !held {
		return false, err
	}
	ok, err := r.route.Announced(ctx, addr)
	return ok && err == nil, err
}

var _ agent.Lifetimer = (*routedVIP)(nil)

// Held implements agent.Lifetimer: the local address is on the host,
// whatever its lifetime.
func (r *routedVIP) Held(addr netip.Addr) (bool, error) {
	return r.bind.Held(addr)
}

// SetLifetime implements agent.Lifetimer on the local address: after a
// restart in place that no process took over, the address goes by itself
// (the routers drop the route at their restart time).
func (r *routedVIP) SetLifetime(ctx context.Context, addr netip.Addr, life time.Duration) error {
	return r.bind.SetLifetime(ctx, addr, life)
}

func (r *routedVIP) Drain(ctx context.Context, addr netip.Addr) error {
	return r.route.Drain(ctx, addr)
}

func (r *routedVIP) Withdraw(ctx context.Context, addr netip.Addr) error {
	if err := r.route.Withdraw(ctx, addr); err != nil {
		return err
	}
	return r.bind.Withdraw(ctx, addr)
}
