package agent

import (
	"context"
	"errors"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/membership"
)

// reload re-reads the configuration file (SIGHUP). An invalid file keeps
// the running configuration. Settings that need a restart are kept as they
// are, with a warning. VIPs whose address, mode and interface are unchanged
// keep their state, and health checks that are unchanged keep running with
// their verdicts: reloading never moves a VIP by itself.
func (a *Agent) reload(ctx context.Context) {
	old := a.st.cfg
	c, err := a.opts.ConfigRules.Load(old.Path)
	if err != nil {
		var ce *config.ConfigError
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				a.log.Error("reload refused, keeping running configuration", "problem", p.Error())
			}
		} else {
			a.log.Error("reload refused, keeping running configuration", "err", err)
		}
		return
	}
	if a.keyring != nil && c.Cluster.KeyFile == old.Cluster.KeyFile {
		changed, err := membership.RotateKeyring(a.keyring, c.Cluster.KeyFile)
		if err != nil {
			a.log.Error("reload refused: cluster key_file", "err", err)
			return
		}
		if changed {
			a.log.Info("membership keys rotated from key_file", "keys", len(a.keyring.GetKeys()))
		}
	}
	if c.KeepRestartSettings(old) {
		a.log.Warn("reload: node_name, state_dir, [api], cluster bind address/port, failure_detection, the key_file path (turning encryption on or off) and l2.refresh_interval take effect after a restart; edits to the key_file's keys apply now")
	}
	actx, cancel := withTimeout(ctx)
	defer cancel()
	if err := a.backends.Reconfigure(actx, c); err != nil {
		a.log.Error("reload: reconfigure announcers", "err", err)
		return
	}
	a.st.cfg = c
	peers := c.Cluster.PeerAddrs()
	a.peers.Store(&peers)
	a.members.SetAllowed(membership.AdmissionNetworks(c))
	if a.opts.LogLevel != nil {
		a.opts.LogLevel.Set(c.Level())
	}
	a.hooks.configure(c.Hooks)
	if err := a.setupVIPs(ctx, c); err != nil {
		a.log.Error("reload: set up VIPs", "err", err)
	}
	a.st.checks.apply(a.st.vips)
	a.reloadNodeWatch(ctx, c)
	a.log.Info("configuration reloaded", "path", c.Path, "vips", len(c.VIPs))
}
