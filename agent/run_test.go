package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/config"
)

// TestStartWaitsForBindAddress: a bind address that is not configured on
// any interface yet (as at boot before DHCP) is waited for, with a STATUS
// saying so and EXTEND_TIMEOUT_USEC keeping systemd's start timeout away,
// instead of failing; stopping meanwhile ends Run cleanly. (The netns lab
// adds the address later and sees the node join.)
func TestStartWaitsForBindAddress(t *testing.T) {
	dir := t.TempDir()
	text := "node_name = \"boot\"\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n[api]\nsocket = \"" + filepath.Join(dir, "api.sock") +
		"\"\n[cluster]\nbind_address = \"192.0.2.99\"\n[[vip]]\nname = \"apiserver\"\naddress = \"192.0.2.10\"\ninterface = \"fake0\"\n"
	cfg, err := config.Parse(filepath.Join(dir, "vipd.toml"), []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var notes []string
	a, err := New(cfg, Options{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backends: fakeBackendsFor(newWire(), "boot", false),
		Notify:   func(s string) { mu.Lock(); notes = append(notes, s); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitFor(t, 5*time.Second, "STATUS and EXTEND_TIMEOUT_USEC while waiting", func() bool {
		mu.Lock()
		defer mu.Unlock()
		j := strings.Join(notes, "\n")
		return strings.Contains(j, "STATUS=waiting for cluster.bind_address 192.0.2.99") && strings.Contains(j, "EXTEND_TIMEOUT_USEC=")
	})
	select {
	case err := <-done:
		t.Fatalf("Run returned while the bind address is missing: %v", err)
	case <-time.After(600 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel while waiting: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := os.Stat(filepath.Join(dir, "api.sock")); err == nil {
		t.Errorf("the API listened before membership started")
	}
}
