package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strings"
)

// readSecretFile reads a password or key file, refusing one that group or
// others can read. Its errors name the file and say what to do.
func readSecretFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", secretFileError(path, err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%s is a directory: name the file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s has mode %04o; it must not be accessible by group or others (chmod 600)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", secretFileError(path, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// secretFileError explains a secret file that cannot be read: vipd runs as
// its own user (User=vipd in the unit), which needs to own a 0600 file.
func secretFileError(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		u := "the service user"
		if cu, uerr := user.Current(); uerr == nil {
			u = cu.Username
		}
		return fmt.Errorf("%s: permission denied for user %s: chown %s %s (it must stay mode 0600)", path, u, u, path)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// ReadKeys reads cluster.key_file: one or more base64 keys (16, 24 or 32
// bytes), one per line, blank lines and "#" comments skipped. The file must
// not be readable by group or others. Its errors say what to do.
func ReadKeys(path string) ([][]byte, error) {
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
