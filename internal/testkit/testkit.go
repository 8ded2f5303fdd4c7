// Package testkit has the small helpers that the tests of several
// packages share: a loopback port free for both TCP and UDP (memberlist
// binds both), and membership keys and key files. Only tests import it.
package testkit

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// FreePort returns a port of 127.0.0.1 that was free for both TCP and UDP
// a moment ago. It stops the test when none is found in 50 tries.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no port of 127.0.0.1 free for both TCP and UDP after 50 tries")
	return 0
}

// NewKey returns a random 32-byte membership key, base64 (the key_file's
// format).
func NewKey(t testing.TB) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// WriteKeyFile writes keys, one a line, to path with mode 0600, as an
// operator writes cluster.key_file.
func WriteKeyFile(t testing.TB, path string, keys ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
