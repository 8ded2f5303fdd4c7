package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSysfsLinkUp(t *testing.T) {
	root := t.TempDir()
	mk := func(name, flags, carrier string) {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "flags"), []byte(flags+"\n"), 0o644)
		if carrier != "" {
			os.WriteFile(filepath.Join(dir, "carrier"), []byte(carrier+"\n"), 0o644)
		}
	}
	mk("up", "0x1003", "1")
	mk("nocarrier", "0x1003", "0")
	mk("admindown", "0x1002", "")
	mk("garbage", "zz", "1")
	for name, want := range map[string]bool{"up": true, "nocarrier": false, "admindown": false, "garbage": false, "missing": false} {
		if got := sysfsLinkUp(root, name); got != want {
			t.Errorf("%s: up=%v, want %v", name, got, want)
		}
	}
	// The real loopback interface is up with carrier.
	if _, err := os.Stat("/sys/class/net/lo"); err == nil && !sysfsLinkUp("/sys/class/net", "lo") {
		t.Errorf("lo reads as down from /sys/class/net")
	}
}
