package agent

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/hashicorp/memberlist"
)

// loadKeyring reads cluster.key_file: one or more base64 keys (16, 24 or 32
// bytes), one per line. The first key encrypts; all of them decrypt, which
// is how keys are rotated (add the new key as a second line everywhere,
// move it first everywhere, then remove the old one).
func loadKeyring(path string) (*memberlist.Keyring, error) {
	keys, err := readKeys(path)
	if err != nil {
		return nil, err
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("cluster key_file %s: %w", path, err)
	}
	return kr, nil
}

// rotateKeyring makes kr hold exactly the keys of path, the first one
// primary: what a SIGHUP after editing key_file does. Order of operations
// keeps the ring usable throughout: add, switch primary, then remove.
func rotateKeyring(kr *memberlist.Keyring, path string) (changed bool, err error) {
	keys, err := readKeys(path)
	if err != nil {
		return false, err
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[string(k)] = true
	}
	have := map[string]bool{}
	for _, k := range kr.GetKeys() {
		have[string(k)] = true
	}
	for _, k := range keys {
		if !have[string(k)] {
			if err := kr.AddKey(k); err != nil {
				return changed, fmt.Errorf("install key: %w", err)
			}
			changed = true
		}
	}
	if string(kr.GetPrimaryKey()) != string(keys[0]) {
		if err := kr.UseKey(keys[0]); err != nil {
			return changed, fmt.Errorf("use key: %w", err)
		}
		changed = true
	}
	for _, k := range kr.GetKeys() {
		if !want[string(k)] {
			if err := kr.RemoveKey(k); err != nil {
				return changed, fmt.Errorf("remove key: %w", err)
			}
			changed = true
		}
	}
	return changed, nil
}

// readKeys parses key_file.
func readKeys(path string) ([][]byte, error) {
	s, err := readSecretFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cluster key_file %w: generate a key once (head -c 32 /dev/urandom | base64 > %s), copy it to every node, chown vipd:vipd and chmod 0600 it", err, path)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster key_file %w", err)
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
	return keys, nil
}
