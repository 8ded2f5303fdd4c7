package agent

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vipd/vipd/agent/config"
)

// TestCleanupTargets: vipd cleanup finds the VIPs whatever state the file
// is in (secrets unreadable, semantic errors, not even valid TOML), plus
// the addresses the daemon recorded in state_dir.
func TestCleanupTargets(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o750); err != nil {
		t.Fatal(err)
	}
	// Recorded by a daemon whose configuration named another VIP.
	if err := saveRecorded(state, []CleanupTarget{{VIP: "old", Interface: "eth1", Addr: netip.MustParseAddr("198.51.100.7")}}); err != nil {
		t.Fatal(err)
	}
	unreadableKey := `state_dir = "` + state + `"
[cluster]
bind_address = "192.0.2.11"
key_file = "/nonexistent/cluster.key"
bind_port = 99999
[[vip]]
name = "apiserver"
address = "192.0.2.10"
interface = "eth0"
[vip.health]
url = "https://127.0.0.1:6443/readyz"
address = "203.0.113.99"
[[vip]]
name = "routed"
address = "2001:db8::10"
mode = "bgp"
`
	broken := `state_dir = "` + state + `"
[cluster
bind_address = "192.0.2.11"
[[vip]]
name = "apiserver"
address = "192.0.2.10"   # the VIP
interface = 'eth0'
[vip.health]
address = "203.0.113.99"
[[vip]]
name = "routed"
mode = "bgp"
address = "2001:db8::10"
`
	want := []CleanupTarget{
		{VIP: "apiserver", Interface: "eth0", Addr: netip.MustParseAddr("192.0.2.10")},
		{VIP: "routed", Interface: "lo", Addr: netip.MustParseAddr("2001:db8::10")},
		{VIP: "old", Interface: "eth1", Addr: netip.MustParseAddr("198.51.100.7")},
	}
	for name, text := range map[string]string{"secret unreadable, bad port": unreadableKey, "not valid TOML": broken} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, "vipd.toml")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := config.Load(path); err == nil {
				t.Fatal("the daemon accepts this file; the test needs one it refuses")
			}
			got, notes := CleanupTargets(path)
			if !slices.Equal(got, want) {
				t.Errorf("targets %v, want %v (notes %q)", got, want, notes)
			}
		})
	}
	t.Run("no file at all", func(t *testing.T) {
		got, notes := CleanupTargets(filepath.Join(dir, "missing.toml"))
		if len(got) != 0 || len(notes) == 0 {
			t.Errorf("missing file: targets %v notes %q; want none and a note", got, notes)
		}
	})
}

// TestStateFilesDoNotBlock: a FIFO in place of a state file (by mistake or
// on purpose) is refused at once instead of blocking start-up forever.
func TestStateFilesDoNotBlock(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{withdrawFile, peersFile, addressesFile} {
		if err := mkfifo(filepath.Join(dir, name)); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	}
	if ws := loadWithdraw(dir); !ws.Withdrawn || ws.Corrupt == nil {
		t.Errorf("withdraw flag FIFO: %+v, want withdrawn (fail safe) and an error", ws)
	}
	if _, err := loadPeerCache(dir); err == nil {
		t.Errorf("peer cache FIFO read without error")
	}
	if _, err := loadRecorded(dir); err == nil {
		t.Errorf("recorded addresses FIFO read without error")
	}
}
