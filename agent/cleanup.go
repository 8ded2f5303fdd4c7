package agent

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
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
// split brain. So it reads only what it needs, leniently: secret files are
// not read, semantic errors are ignored, and a file that does not even parse
// as TOML is scanned line by line for the [[vip]] tables' address,
// interface and mode. What it could not read is returned as notes.
func CleanupTargets(path string) ([]CleanupTarget, []string) {
	var notes []string
	data, err := os.ReadFile(path)
	if err != nil {
		notes = append(notes, fmt.Sprintf("read config: %v; removing only the addresses recorded in %s", err, DefaultStateDir))
	}
	lc, perr := parseLenient(data)
	if perr != nil {
		notes = append(notes, fmt.Sprintf("%s does not parse (%v); VIPs found by scanning its [[vip]] tables", path, perr))
		lc = scanLenient(data)
	}
	stateDir := lc.StateDir
	if stateDir == "" {
		stateDir = DefaultStateDir
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
		iface := v.Interface
		if iface == "" && v.Mode == ModeBGP {
			iface = "lo"
		}
		if iface == "" || !validIfName(iface) {
			notes = append(notes, fmt.Sprintf("vip[%d] %q: no usable interface %q; skipped", i, v.Name, iface))
			continue
		}
		add(CleanupTarget{VIP: v.Name, Interface: iface, Addr: a.Unmap()})
	}
	rec, err := loadRecorded(stateDir)
	if err != nil {
		notes = append(notes, err.Error())
	}
	for _, t := range rec {
		add(t)
	}
	return out, notes
}

// lenientConfig is the part of a configuration cleanup needs.
type lenientConfig struct {
	StateDir string       `toml:"state_dir"`
	VIPs     []lenientVIP `toml:"vip"`
}

type lenientVIP struct {
	Name      string `toml:"name"`
	Address   string `toml:"address"`
	Interface string `toml:"interface"`
	Mode      string `toml:"mode"`
}

// parseLenient decodes the keys cleanup needs and ignores everything else.
func parseLenient(data []byte) (lenientConfig, error) {
	var lc lenientConfig
	_, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&lc)
	return lc, err
}

// scanLenient finds state_dir and the [[vip]] tables' name, address,
// interface and mode in a file that is not valid TOML, line by line.
func scanLenient(data []byte) lenientConfig {
	var lc lenientConfig
	table := "" // "" top level, "vip" inside a [[vip]], "-" elsewhere
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			name := strings.TrimSpace(strings.Trim(strings.SplitN(line, "#", 2)[0], "[] \t"))
			switch {
			case strings.HasPrefix(line, "[[") && name == "vip":
				lc.VIPs = append(lc.VIPs, lenientVIP{})
				table = "vip"
			default:
				table = "-"
			}
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key = strings.Trim(strings.TrimSpace(key), `"'`)
		s, ok := scanString(strings.TrimSpace(val))
		if !ok {
			continue
		}
		switch {
		case table == "" && key == "state_dir":
			lc.StateDir = s
		case table == "vip":
			v := &lc.VIPs[len(lc.VIPs)-1]
			switch key {
			case "name":
				v.Name = s
			case "address":
				v.Address = s
			case "interface":
				v.Interface = s
			case "mode":
				v.Mode = s
			}
		}
	}
	return lc
}

// scanString reads a quoted TOML string value ("..." or '...').
func scanString(v string) (string, bool) {
	if len(v) < 2 {
		return "", false
	}
	q := v[0]
	if q != '"' && q != '\'' {
		return "", false
	}
	end := strings.IndexByte(v[1:], q)
	if end < 0 {
		return "", false
	}
	return v[1 : 1+end], true
}
