package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlushStaleRoutesUnloadable: after a failed start whose configuration
// does not load (systemd-test 8b: a key file user vipd cannot read), cleanup
// warns about stale BGP routes only when the file has a BGP VIP; an L2
// node's failed start logs nothing but its own error.
func TestFlushStaleRoutesUnloadable(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name, vip string
		warn      bool
	}{
		{"l2", "mode = \"l2\"\ninterface = \"eth0\"", false},
		{"bgp", "mode = \"bgp\"", true},
		{"missing file", "", true},
	} {
		path := filepath.Join(dir, tt.name+".toml")
		if tt.vip != "" {
			cfg := "node_name = \"n1\"\nno_such_key = 1\n\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\n" + tt.vip + "\n"
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		flushStaleRoutes(slog.New(slog.NewTextHandler(&buf, nil)), path)
		if got := strings.Contains(buf.String(), "stale BGP routes left"); got != tt.warn {
			t.Errorf("%s: warned %t, want %t; log:\n%s", tt.name, got, tt.warn, buf.String())
		}
	}
}
