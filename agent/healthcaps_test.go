package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vipd/vipd/agent/config"
)

// TestHealthCommandCannotReadAnyFile runs what the kubelet-credentials
// drop-in makes of vipd: a process of an unprivileged user with
// CAP_DAC_READ_SEARCH ambient (setpriv, from util-linux, as systemd's
// User= and AmbientCapabilities= do). That process reads a root-only file
// (the capability works), and a health command it runs (cat of the same
// file) must not: the command does not inherit the capability. Root and
// VIPD_NETNS_TESTS=1 only: it needs root to hand out the capability.
func TestHealthCommandCannotReadAnyFile(t *testing.T) {
	if secret := os.Getenv("VIPD_TEST_CAPS_SECRET"); secret != "" {
		healthCommandCapsChild(t, secret)
		return
	}
	if os.Geteuid() != 0 || os.Getenv("VIPD_NETNS_TESTS") != "1" {
		t.Skip("needs root and VIPD_NETNS_TESTS=1 (hands a capability to a process of another user)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not found")
	}
	dir := t.TempDir() // 0700, root's
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The test binary, where user nobody can run it.
	bin := filepath.Join(t.TempDir(), "agent.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--",
		bin, "-test.run=^TestHealthCommandCannotReadAnyFile$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "VIPD_TEST_CAPS_SECRET="+secret)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("as user nobody with CAP_DAC_READ_SEARCH ambient: %v\n%s", err, out)
	}
}

// healthCommandCapsChild is the test's side in the process with the
// ambient capability.
func healthCommandCapsChild(t *testing.T, secret string) {
	if _, err := os.ReadFile(secret); err != nil {
		t.Fatalf("setup: this process (uid %d) cannot read the root-only file itself: %v", os.Getuid(), err)
	}
	probe, err := newProbe(&healthCheck{HealthConfig: config.HealthConfig{Command: []string{"cat", secret}}})
	if err != nil {
		t.Fatal(err)
	}
	err = probe(context.Background())
	if err == nil {
		t.Fatalf("a health command read the root-only %s: it inherited CAP_DAC_READ_SEARCH", secret)
	}
	if !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("the health command failed otherwise than being denied: %v", err)
	}
	t.Logf("the health command is denied: %v", err)
}
