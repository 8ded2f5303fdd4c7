package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartupErrorEndsTheLine: a configuration --check accepts, on a host
// where start-up then fails (the membership port is in use: what --check
// cannot know without binding), makes vipd exit 1 with the error as the
// last line of its standard error, ended by a newline, so nothing printed
// after it (a shell prompt, systemd's next journal line) runs into it.
func TestStartupErrorEndsTheLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the vipd binary; skipped with -short")
	}
	bin := vipdBinary(t)
	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := filepath.Join(dir, "vipd.toml")
	text := "node_name = \"cp-1\"\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n" +
		"[api]\nsocket = \"" + filepath.Join(dir, "vipd.sock") + "\"\n" +
		"[cluster]\nbind_address = \"127.0.0.1\"\n" + fmt.Sprintf("bind_port = %d\n", busy.Addr().(*net.TCPAddr).Port) +
		"[[vip]]\nname = \"apiserver\"\naddress = \"192.0.2.10\"\ninterface = \"lo\"\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "--check", "--config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("vipd --check refused the configuration: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("vipd: %v, want exit status 1\nstderr:\n%s", err, stderr.String())
	}
	out := stderr.String()
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("standard error does not end with a newline: %q", out[max(0, len(out)-120):])
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "membership port ") || !strings.Contains(last, "is in use by another process") {
		t.Errorf("last line %q, want the start-up error (membership port ... is in use by another process)", last)
	}
	if stdout.Len() != 0 {
		t.Errorf("standard output %q, want nothing", stdout.String())
	}
}
