package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/vipd/vipd/agent"
	"github.com/vipd/vipd/l2"
)

// cleanup is `vipd cleanup`: it removes the VIP addresses a stopped or
// crashed vipd may have left on this host (systemd runs it as ExecStopPost,
// however the daemon ended). It reads the configuration leniently
// (agent.CleanupTargets: no secret files, no semantic checks, a broken file
// scanned for its [[vip]] tables) and removes each VIP's host prefix only,
// never another address with the same IP. It fails only when an address it
// found could not be removed.
func cleanup(lg *slog.Logger, path string) error {
	targets, notes := agent.CleanupTargets(path)
	for _, n := range notes {
		lg.Warn("cleanup: " + n)
	}
	return removeTargets(lg, targets)
}

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
