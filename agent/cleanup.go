package agent

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/vipd/vipd/agent/config"
)

// CleanupTarget is one address `vipd cleanup` removes: the host prefix (/32
// or /128) of Addr on Interface, and nothing else on that interface.
type CleanupTarget struct {
	VIP       string
	Interface string
	Addr      netip.Addr
}

// CleanupTargets returns what `vipd cleanup` removes after vipd ended
// (systemd's ExecStopPost runs it however the daemon ended): every VIP the
// configuration names, and every address the daemon recorded as added in
// state_dir (so an address stays covered even if the file was edited since).
//
// It must not fail for the wrong reason: a crashed node keeping the VIP is
// split brain. So it reads only what it needs, leniently (config.ReadLenient:
// no secret file, no semantic check, and a file that does not even parse as
// TOML scanned line by line for the [[vip]] tables). What it could not read
// is returned as notes.
func CleanupTargets(path string) ([]CleanupTarget, []string) {
	var notes []string
	data, err := os.ReadFile(path)
	if err != nil {
		notes = append(notes, fmt.Sprintf("read config: %v; removing only the addresses recorded in %s", err, config.DefaultStateDir))
	}
	lc, perr := config.ReadLenient(data)
	if perr != nil {
		notes = append(notes, fmt.Sprintf("%s does not parse (%v); VIPs found by scanning its [[vip]] tables", path, perr))
	}
	var out []CleanupTarget
	seen := map[CleanupTarget]bool{}
	add := func(t CleanupTarget) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	for i, v := range lc.VIPs {
		a, err := netip.ParseAddr(v.Address)
		if err != nil || a.Zone() != "" {
			notes = append(notes, fmt.Sprintf("vip[%d] %q: address %q skipped: %v", i, v.Name, v.Address, err))
			continue
		}
		if !config.ValidInterface(v.Interface) {
			notes = append(notes, fmt.Sprintf("vip[%d] %q: no usable interface %q; skipped", i, v.Name, v.Interface))
			continue
		}
		add(CleanupTarget{VIP: v.Name, Interface: v.Interface, Addr: a.Unmap()})
	}
	rec, err := loadRecorded(lc.StateDir)
	if err != nil {
		notes = append(notes, err.Error())
	}
	for _, t := range rec {
		add(t)
	}
	return out, notes
}

// CleanupStateDir returns the state_dir of the configuration at path, read
// as leniently as CleanupTargets reads it (the default when it cannot be
// read): where `vipd cleanup` looks for the restart record.
func CleanupStateDir(path string) string {
	data, _ := os.ReadFile(path)
	lc, _ := config.ReadLenient(data)
	return lc.StateDir
}
