package agent

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/hashicorp/memberlist"
)

// loadKeyring reads cluster.key_file: one or more base64 keys (16, 24 or 32
// bytes), one per line. The first key encrypts; all of them decrypt, which
// is how keys are rotated (add the new key as a second line everywhere,
// move it first everywhere, then remove the old one).
func loadKeyring(path string) (*memberlist.Keyring, error) {
	s, err := readSecretFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key_file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("cluster key_file %s line %d: not base64: %w", path, i+1, err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("cluster key_file %s line %d: key is %d bytes, want 16, 24 or 32", path, i+1, n)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("cluster key_file %s: no key", path)
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("cluster key_file %s: %w", path, err)
	}
	return kr, nil
}
