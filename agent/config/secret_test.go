package config

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testKey is a valid cluster key (32 bytes, base64).
const testKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

func TestSecretFileMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pass")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readSecretFile(pw); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable secret accepted: %v", err)
	}
	if err := os.Chmod(pw, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := readSecretFile(pw)
	if err != nil || s != "s3cret" {
		t.Errorf("readSecretFile = %q, %v", s, err)
	}
}

func TestReadKeysRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]string{
		"not base64": "!!!\n",
		"wrong size": base64.StdEncoding.EncodeToString([]byte("short")) + "\n",
		"no key":     "# only a comment\n",
		"empty file": "",
	}
	for name, content := range tests {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadKeys(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o644)
	if _, err := ReadKeys(open); err == nil {
		t.Errorf("world-readable key file accepted")
	}
}
