package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/internal/testkit"
)

// TestRunRefusesWhatPreflightRefuses: each start-up refusal of Run that
// comes before binding (state_dir, the API socket's directory, its group)
// is one Preflight, and so `vipd --check`, reports as an error at its
// key; and Run really refuses it (the same functions decide both).
func TestRunRefusesWhatPreflightRefuses(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "a-file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	noIfaces := config.HostEnv{Interfaces: func() ([]config.HostInterface, error) { return nil, nil }, Euid: func() int { return 1000 }}
	for _, tc := range []struct {
		name, stateDir, socket, extra string
		key, runErr                   string
	}{
		{"state_dir below a file", filepath.Join(blocker, "state"), "", "", "state_dir", "create state_dir"},
		{"socket below a file", "", filepath.Join(blocker, "vipd.sock"), "", "api.socket", "api socket directory"},
		{"socket group missing", "", "", "socket_group = \"nosuchgroup-vipd\"\n", "api.socket_group", "api.socket_group \"nosuchgroup-vipd\" does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			if tc.stateDir == "" {
				tc.stateDir = filepath.Join(d, "state")
			}
			if tc.socket == "" {
				tc.socket = filepath.Join(d, "run", "vipd.sock")
			}
			text := fmt.Sprintf("node_name = \"cp-1\"\nstate_dir = %q\n[api]\nsocket = %q\n%s[cluster]\nbind_address = \"127.0.0.1\"\nbind_port = %d\n"+
				"[[vip]]\nname = \"apiserver\"\naddress = \"192.0.2.10\"\ninterface = \"fake0\"\n", tc.stateDir, tc.socket, tc.extra, testkit.FreePort(t))
			path := filepath.Join(d, "vipd.toml")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			_, errs := Preflight(cfg, noIfaces)
			found := false
			for _, p := range errs {
				if p.Line > 0 && strings.HasPrefix(p.Msg, tc.key) {
					found = true
				}
			}
			if !found {
				t.Errorf("Preflight errors %v: none placed at %s", errs, tc.key)
			}
			a, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Backends: fakeBackendsFor(newWire(), "cp-1", false), Notify: func(string) {}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), tc.runErr) {
				t.Errorf("Run = %v, want an error with %q", err, tc.runErr)
			}
		})
	}
}
