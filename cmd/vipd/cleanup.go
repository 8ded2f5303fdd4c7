package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vipd/vipd/agent"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/bgp"
	"github.com/vipd/vipd/internal/backendconfig"
	"github.com/vipd/vipd/l2"
)

// cleanup is `vipd cleanup`: it removes the VIP addresses a stopped or
// crashed vipd may have left on this host (systemd runs it as ExecStopPost,
// however the daemon ended). It reads the configuration leniently
// (agent.CleanupTargets: no secret files, no semantic checks, a broken file
// scanned for its [[vip]] tables) and removes each VIP's host prefix only,
// never another address with the same IP. It fails only when an address it
// found could not be removed.
//
// One stop keeps the addresses: a restart in place. The daemon ended well
// ($SERVICE_RESULT "success": systemd says so to ExecStopPost) and left a
// restart record of this boot whose deadline has not passed: the next
// process takes them over (and the kernel removes them by the deadline if
// none does). Any other end (a stop, a crash, the next process failing to
// start, cleanup run by hand) removes them and the record; and after a
// failure, with BGP graceful restart on, the routers are made to drop the
// routes they keep stale for this host (bgp.FlushStale).
func cleanup(lg *slog.Logger, path string) error {
	result := os.Getenv("SERVICE_RESULT")
	stateDir := agent.CleanupStateDir(path)
	if result == "success" {
		left, err := agent.RestartLeft(stateDir, false)
		if err != nil {
			lg.Warn("cleanup: " + err.Error())
		}
		if left > 0 {
			lg.Info("cleanup: restart in place: VIP addresses left for the next process", "due_within", left.Round(time.Millisecond))
			return nil
		}
	} else if _, err := agent.RestartLeft(stateDir, true); err != nil {
		lg.Warn("cleanup: " + err.Error())
	}
	targets, notes := agent.CleanupTargets(path)
	for _, n := range notes {
		lg.Warn("cleanup: " + n)
	}
	err := removeTargets(lg, targets)
	// A planned handoff's daisy chain (forwarding, a quiesced VIP) that a
	// crash left behind.
	if removed, nerr := l2.CleanupNftables(); nerr != nil {
		lg.Warn("cleanup: remove the daisy chain's nftables tables", "err", nerr)
	} else if len(removed) > 0 {
		lg.Info("cleanup: removed the daisy chain's nftables tables", "tables", removed)
	}
	// A lingering VIP's local route (l2.Linger) would keep the host taking
	// the VIP's packets, and answering ARP for it.
	if removed, nerr := l2.CleanupLingerRoutes(); nerr != nil {
		lg.Warn("cleanup: remove the lingering VIPs' local routes", "err", nerr)
	} else if len(removed) > 0 {
		lg.Info("cleanup: removed the lingering VIPs' local routes", "routes", removed)
	}
	if result != "success" {
		flushStaleRoutes(lg, path)
	}
	return err
}

// flushStaleRoutes makes the BGP routers drop what they keep stale for
// this host after a failure (bgp.FlushStale), when the configuration turns
// graceful restart on. It needs the full configuration (the peers'
// passwords): when that does not load, it says so and leaves the routers
// to their restart time, unless no VIP of the file (read leniently) is a
// BGP one: then there is nothing to flush, and a failed start of an L2
// node logs only its own error.
func flushStaleRoutes(lg *slog.Logger, path string) {
	c, err := backendconfig.Rules().Load(path)
	if err != nil {
		if mayAnnounceBGP(path) {
			lg.Warn("cleanup: stale BGP routes left to the routers' restart time: configuration not loaded", "err", err)
		}
		return
	}
	sc := backendconfig.Speaker(c.Speaker())
	if c.BGP == nil || !sc.GracefulRestart.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if err := bgp.FlushStale(ctx, sc); err != nil {
		lg.Warn("cleanup: stale BGP routes left to the routers' restart time", "err", err)
		return
	}
	lg.Info("cleanup: BGP routers told to drop this host's stale routes", "peers", len(sc.Peers))
}

// flushTimeout bounds FlushStale in cleanup.
const flushTimeout = 3 * time.Second

// removeTargets removes the host prefix of each target's address from its
// interface, logging what it removed. It is also the agent's
// Options.RemoveAddresses.
func removeTargets(lg *slog.Logger, targets []agent.CleanupTarget) error {
	var errs []error
	for _, t := range targets {
		present, err := l2.HasAddress(t.Interface, t.Addr)
		if err == nil && !present {
			continue
		}
		if err := l2.RemoveAddress(t.Interface, t.Addr); err != nil {
			errs = append(errs, fmt.Errorf("vip %s: remove %s from %s: %w", t.VIP, t.Addr, t.Interface, err))
			continue
		}
		lg.Info("removed VIP address", "vip", t.VIP, "address", t.Addr, "interface", t.Interface)
	}
	return errors.Join(errs...)
}

// removeAddresses adapts removeTargets to agent.Options.RemoveAddresses.
func removeAddresses(lg *slog.Logger) func(context.Context, []agent.CleanupTarget) error {
	return func(_ context.Context, ts []agent.CleanupTarget) error { return removeTargets(lg, ts) }
}

// mayAnnounceBGP reports whether the configuration at path, read
// leniently, may have a BGP VIP (true when it cannot be read at all).
func mayAnnounceBGP(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	lc, _ := config.ReadLenient(data)
	for _, v := range lc.VIPs {
		if v.Mode == config.ModeBGP {
			return true
		}
	}
	return false
}
