package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// linkUp reports whether an interface is administratively up and has
// carrier, from sysfs: the agent's Options.LinkUp.
func linkUp(iface string) bool { return sysfsLinkUp("/sys/class/net", iface) }

// sysfsLinkUp reads the interface's flags (IFF_UP) and carrier under root:
// two small reads per interface and pass.
func sysfsLinkUp(root, iface string) bool {
	b, err := os.ReadFile(filepath.Join(root, iface, "flags"))
	if err != nil {
		return false
	}
	flags, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")), 16, 32)
	if err != nil || flags&1 == 0 { // IFF_UP
		return false
	}
	c, err := os.ReadFile(filepath.Join(root, iface, "carrier"))
	return err == nil && strings.TrimSpace(string(c)) == "1"
}
