package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/vipd/vipd/agent/config"
)

// Preflight checks c against this host as the daemon's start-up does,
// short of binding and announcing: config.CheckHost, and what Run creates
// before it binds (state_dir, the API socket's directory, the socket's
// group), with the functions Run uses for them, so `vipd --check` and the
// start cannot disagree. cmd/vipd refuses to start on errors; --check
// prints both and fails on errors.
func Preflight(c *config.Config, env config.HostEnv) (warnings, errs []config.Problem) {
	warnings, errs = config.CheckHost(c, env)
	// The packaged unit's systemd creates the default directories for the
	// service user before ExecStartPre (StateDirectory=,
	// RuntimeDirectory=); checked by hand before the first start, a
	// missing one that this user cannot create is a warning.
	dir := func(key, path, managed, what string) {
		err := creatableDir(path)
		if err == nil {
			return
		}
		if fi, serr := os.Stat(path); key == "state_dir" && serr == nil && fi.IsDir() {
			// Run starts with a state_dir it cannot write (a disk
			// remounted read-only): it holds VIPs and says so at each
			// write, keeping nothing across a restart.
			warnings = append(warnings, c.Problem(key, "state_dir %s: %v: vipd runs, but keeps no peer cache, withdraw flag or restart record across a restart; make it writable for the service user", path, err))
			return
		}
		if _, serr := os.Stat(path); errors.Is(serr, os.ErrNotExist) && filepath.Clean(path) == managed {
			warnings = append(warnings, c.Problem(key, "%s: %v: systemd creates it for vipd.service (StateDirectory=, RuntimeDirectory=); vipd started otherwise fails", what, err))
			return
		}
		errs = append(errs, c.Problem(key, "%s: %v", what, err))
	}
	dir("state_dir", c.StateDir, config.DefaultStateDir, fmt.Sprintf("state_dir %s: cannot be created", c.StateDir))
	dir("api.socket", filepath.Dir(c.API.Socket), filepath.Dir(config.DefaultSocket), fmt.Sprintf("api.socket %s: its directory cannot be created", c.API.Socket))
	if _, err := socketGroup(c.API.SocketGroup); err != nil {
		errs = append(errs, c.Problem("api.socket_group", "%v", err))
	}
	return warnings, errs
}

// creatableDir reports why os.MkdirAll(path) would fail, without creating
// anything: something in the way that is not a directory, or a directory
// this process cannot write (a read-only file system, such as everything
// outside vipd.service's writable paths under ProtectSystem=strict).
func creatableDir(path string) error {
	p := filepath.Clean(path)
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("%s is not a directory", p)
		case err == nil:
			if p == filepath.Clean(path) {
				// It exists: Run writes into it.
				if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				return nil
			}
			if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Errorf("cannot create a directory in %s: %w", p, err)
			}
			return nil
		case errors.Is(err, os.ErrNotExist):
			parent := filepath.Dir(p)
			if parent == p {
				return err
			}
			p = parent
		default:
			return err
		}
	}
}

// makeDir is Run's os.MkdirAll with creatableDir's reasons first.
func makeDir(path string, perm os.FileMode) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		// It exists. One this process cannot write (a disk remounted
		// read-only) does not stop the start: Preflight warns, and
		// each write that fails says so.
		return nil
	}
	if err := creatableDir(path); err != nil {
		return err
	}
	return os.MkdirAll(path, perm)
}
