package agent

import (
	"context"
	"errors"
)

// reload re-reads the configuration file (SIGHUP). An invalid file keeps
// the running configuration. Settings that need a restart are kept as they
// are, with a warning. VIPs whose address, mode and interface are unchanged
// keep their state, and health checks that are unchanged keep running with
// their verdicts: reloading never moves a VIP by itself.
func (a *Agent) reload(ctx context.Context) {
	old := a.st.cfg
	c, err := Load(old.Path)
	if err != nil {
		var ce *ConfigError
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
		changed, err := rotateKeyring(a.keyring, c.Cluster.KeyFile)
		if err != nil {
			a.log.Error("reload refused: cluster key_file", "err", err)
			return
		}
		if changed {
			a.log.Info("membership keys rotated from key_file", "keys", len(a.keyring.GetKeys()))
		}
	}
	if c.NodeName != old.NodeName || c.Cluster.BindAddress != old.Cluster.BindAddress ||
		c.Cluster.BindPort != old.Cluster.BindPort || c.Cluster.FailureDetection != old.Cluster.FailureDetection ||
		c.Cluster.KeyFile != old.Cluster.KeyFile || c.StateDir != old.StateDir || c.API != old.API {
		a.log.Warn("reload: node_name, state_dir, [api], cluster bind address/port, failure_detection and the key_file path (turning encryption on or off) take effect after a restart; edits to the key_file's keys apply now")
		c.NodeName, c.StateDir, c.API = old.NodeName, old.StateDir, old.API
		c.Cluster.BindAddress, c.Cluster.BindPort, c.Cluster.bindAddr = old.Cluster.BindAddress, old.Cluster.BindPort, old.Cluster.bindAddr
		c.Cluster.FailureDetection, c.Cluster.KeyFile = old.Cluster.FailureDetection, old.Cluster.KeyFile
	}
	actx, cancel := withTimeout(ctx)
	defer cancel()
	if err := a.backends.Reconfigure(actx, c); err != nil {
		a.log.Error("reload: reconfigure announcers", "err", err)
		return
	}
	a.st.cfg = c
	a.peers.Store(&c.Cluster.peerAddrs)
	a.members.setAllowed(admissionNetworks(c))
	if a.opts.LogLevel != nil {
		a.opts.LogLevel.Set(c.logLevel())
	}
	if err := a.setupVIPs(ctx, c); err != nil {
		a.log.Error("reload: set up VIPs", "err", err)
	}
	a.st.checks.apply(a.st.vips)
	a.log.Info("configuration reloaded", "path", c.Path, "vips", len(c.VIPs))
}
