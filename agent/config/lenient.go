package config

import (
	"bytes"
	"strings"

	"github.com/BurntSushi/toml"
)

// Lenient is the part of a configuration `vipd cleanup` needs: where the
// daemon records the addresses it added, and every VIP's address and
// interface.
type Lenient struct {
	// StateDir is state_dir. [DefaultStateDir]
	StateDir string `toml:"state_dir"`
	// VIPs are the [[vip]] tables, as written (nothing is checked).
	VIPs []LenientVIP `toml:"vip"`
}

// LenientVIP is one [[vip]] table as ReadLenient found it.
type LenientVIP struct {
	// Name, Address and Mode are vip.name, vip.address and vip.mode as
	// written.
	Name    string `toml:"name"`
	Address string `toml:"address"`
	Mode    string `toml:"mode"`
	// Interface is vip.interface; for mode "bgp" "lo" when not written.
	Interface string `toml:"interface"`
}

// ReadLenient reads the keys Lenient holds and ignores everything else:
// no secret file is read and no value is checked, because `vipd cleanup`
// must not fail for the wrong reason (a crashed node keeping the VIP is
// split brain). A file that does not parse as TOML is scanned line by line
// for state_dir and the [[vip]] tables; err then says why it did not
// parse. The defaults of state_dir and of a bgp VIP's interface are filled
// in either way.
func ReadLenient(data []byte) (lc Lenient, err error) {
	if _, err = toml.NewDecoder(bytes.NewReader(data)).Decode(&lc); err != nil {
		lc = scanLenient(data)
	}
	if lc.StateDir == "" {
		lc.StateDir = DefaultStateDir
	}
	for i := range lc.VIPs {
		if v := &lc.VIPs[i]; v.Interface == "" && v.Mode == ModeBGP {
			v.Interface = "lo"
		}
	}
	return lc, err
}

// scanLenient finds state_dir and the [[vip]] tables' name, address,
// interface and mode in a file that is not valid TOML, line by line.
func scanLenient(data []byte) Lenient {
	var lc Lenient
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
				lc.VIPs = append(lc.VIPs, LenientVIP{})
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
