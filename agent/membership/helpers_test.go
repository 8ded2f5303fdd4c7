package membership

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// testCodec reads test metadata: "ok:" and anything after it; a member
// whose metadata says "ok:leaving" is leaving.
var testCodec = Codec[string]{
	Decode: func(b []byte) (string, error) {
		if !strings.HasPrefix(string(b), "ok:") {
			return "", errors.New("not ok")
		}
		return string(b), nil
	},
	Leaving: func(m string) bool { return m == "ok:leaving" },
}

func freePort(t testing.TB) int {
	t.Helper()
	// memberlist needs the same port free for TCP and UDP.
	for i := 0; i < 50; i++ {
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
	t.Fatal("no free port")
	return 0
}

func newKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

func writeKeyFile(t *testing.T, path string, keys ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
