package membership

import (
	"bytes"
	"encoding/base64"
	"path/filepath"
	"testing"

	"github.com/vipd/vipd/internal/testkit"
)

func TestRotateKeyring(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	k1, k2 := testkit.NewKey(t), testkit.NewKey(t)
	testkit.WriteKeyFile(t, path, k1)
	kr, err := LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := func(s string) []byte { b, _ := base64.StdEncoding.DecodeString(s); return b }
	// Step 1: install the new key, still encrypting with the old.
	testkit.WriteKeyFile(t, path, k1, k2)
	if changed, err := RotateKeyring(kr, path); err != nil || !changed {
		t.Fatalf("install: changed=%v err=%v", changed, err)
	}
	if !bytes.Equal(kr.GetPrimaryKey(), dec(k1)) || len(kr.GetKeys()) != 2 {
		t.Fatalf("after install: primary changed or keys %d", len(kr.GetKeys()))
	}
	// Step 2: use the new key.
	testkit.WriteKeyFile(t, path, k2, k1)
	if _, err := RotateKeyring(kr, path); err != nil || !bytes.Equal(kr.GetPrimaryKey(), dec(k2)) {
		t.Fatalf("use: %v", err)
	}
	// Step 3: remove the old one.
	testkit.WriteKeyFile(t, path, k2)
	if _, err := RotateKeyring(kr, path); err != nil || len(kr.GetKeys()) != 1 {
		t.Fatalf("remove: %v, %d keys", err, len(kr.GetKeys()))
	}
	if changed, err := RotateKeyring(kr, path); err != nil || changed {
		t.Errorf("same file again: changed=%v err=%v", changed, err)
	}
}
