package testkit

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestFreePort: the port it returns can be bound for TCP and for UDP.
func TestFreePort(t *testing.T) {
	p := FreePort(t)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatalf("TCP port %d: %v", p, err)
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatalf("UDP port %d: %v", p, err)
	}
	u.Close()
}

// TestKeys: a key is 32 random bytes in base64, two keys differ, and the
// key file has one key a line, readable by its owner only.
func TestKeys(t *testing.T) {
	a, b := NewKey(t), NewKey(t)
	if raw, err := base64.StdEncoding.DecodeString(a); err != nil || len(raw) != 32 {
		t.Fatalf("key %q: %d bytes, %v; want 32 bytes of base64", a, len(raw), err)
	}
	if a == b {
		t.Fatalf("two keys are the same: %q", a)
	}
	path := filepath.Join(t.TempDir(), "key")
	WriteKeyFile(t, path, a, b)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := a + "\n" + b + "\n"; string(got) != want {
		t.Errorf("key file %q, want %q", got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}
